"""Fixtures of the integration tests (the broker fixtures live in ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from faultfleet.wire.settings import BrokerSettings

from .wire_clients import Recorder


@pytest.fixture
def recorder(broker_settings: BrokerSettings) -> Iterator[Recorder]:
    """Records every message under the topic root of the ``broker`` fixture."""
    recording = Recorder(broker_settings)
    try:
        yield recording
    finally:
        recording.stop()
