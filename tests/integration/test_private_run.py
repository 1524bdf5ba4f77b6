"""A run with differential privacy reports the privacy it spent in ``summary.json``.

Three agents played on the wire (:class:`~tests.integration.wire_clients.FakeAgents`) answer
every task; the coordinator runs FedAvg for two rounds with ``[aggregation]
noise_multiplier = 1`` and ``clip_norm = 0.001`` (below the fake updates' norm, so every
update is clipped). ε after each round is dp-accounting's for two Poisson-sampled Gaussian
mechanisms at the run's sampling rate.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.runtime.run_summary import load_summary
from coordinator.runtime.service import CoordinatorService
from coordinator.runtime.settings import AggregationSettings
from coordinator.strategies.privacy import privacy_spent
from faultfleet.wire.settings import BrokerSettings

from .services import CoordinatorThread, coordinator_settings, sample_value
from .wire_clients import FakeAgents

AGENTS = ["a0", "a1", "a2"]


def test_a_private_run_writes_its_epsilon_to_the_summary(
    broker_settings: BrokerSettings, tmp_path: Path
) -> None:
    # Prepare
    registry = CollectorRegistry()
    settings = coordinator_settings(
        broker_settings, tmp_path / "coordinator", min_agents=3, fraction=2 / 3
    ).model_copy(
        update={
            "aggregation": AggregationSettings(
                clip_factor=0, weight_cap=0, trim_fraction=0, noise_multiplier=1.0, clip_norm=1e-3
            )
        }
    )
    agents = FakeAgents(broker_settings, AGENTS)

    # Execute
    coordinator = CoordinatorThread(CoordinatorService(settings, CoordinatorMetrics(registry)))
    try:
        summary = coordinator.result(timeout_s=120)
    finally:
        coordinator.close()
        agents.stop()

    # Assert: two of three agents per round, every update clipped
    written = load_summary(tmp_path / "coordinator")
    assert written is not None
    assert written["privacy"] == summary.privacy
    assert summary.privacy is not None
    assert summary.privacy["epsilon"] == pytest.approx(privacy_spent(1.0, 2 / 3, 2, 1e-5))
    assert (summary.privacy["rounds"], summary.privacy["clip_norm"]) == (2, 1e-3)
    assert sample_value(registry, "faultfleet_updates_clipped_total", {"rule": "norm"}) == 4
