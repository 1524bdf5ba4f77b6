"""The fixture every strategy contract test takes: a factory of each registered strategy."""

from __future__ import annotations

import pytest

from tests.coordinator.strategies.test_contract import Factory, strategy_factories


@pytest.fixture(params=strategy_factories(), ids=lambda p: p[0])
def new_strategy(request: pytest.FixtureRequest) -> Factory:
    factory: Factory = request.param[1]
    return factory
