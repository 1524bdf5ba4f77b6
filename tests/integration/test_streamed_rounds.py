"""A FedAvg run whose rounds stream, end to end over a real Mosquitto broker: the coordinator
folds each update into the global model as it arrives (no list of the round's updates),
and a restarted coordinator goes on from its checkpoint with the medians it streamed."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.engine.state import load_state
from coordinator.runtime.service import CoordinatorService
from faultfleet.wire.settings import BrokerSettings

from .services import CoordinatorThread, coordinator_settings, running_agents, sample_value

MACHINES = range(4)


def test_a_streamed_fedavg_run_folds_every_update_and_resumes_with_its_bounds(
    broker_settings: BrokerSettings, tmp_path: Path
) -> None:
    # Prepare: FedAvg with streaming on, four agents, two rounds, then two more
    state_dir = tmp_path / "coordinator"
    options = {"streaming": "on"}
    first = coordinator_settings(
        broker_settings, state_dir, strategy_options=options, min_agents=len(MACHINES)
    )
    registry = CollectorRegistry()

    # Execute
    with running_agents(broker_settings, tmp_path / "agents", MACHINES):
        coordinator = CoordinatorThread(CoordinatorService(first, CoordinatorMetrics(registry)))
        try:
            summary = coordinator.result(timeout_s=120)
        finally:
            coordinator.close()
        after_two = load_state(state_dir / "engine").meta
        more = coordinator_settings(
            broker_settings,
            state_dir,
            strategy_options=options,
            min_agents=len(MACHINES),
            rounds=4,
        )
        resumed = CoordinatorThread(CoordinatorService(more, CoordinatorMetrics()))
        try:
            resumed_summary = resumed.result(timeout_s=120)
        finally:
            resumed.close()
    after_four = load_state(state_dir / "engine").meta

    # Assert: every round took every agent's update, through the stream (the medians the
    # next round clips against exist only there), and the resumed run kept them going
    assert summary.finished
    assert summary.server_round == 2
    assert sample_value(registry, "faultfleet_updates_received_total") == 2 * len(MACHINES)
    bounds = after_two["strategy"]["extra"]["stream_bounds"]
    assert set(bounds) == {"global"}
    assert bounds["global"]["norm"] > 0
    assert bounds["global"]["samples"] > 0
    assert resumed_summary.finished
    assert resumed_summary.server_round == 4
    assert after_four["strategy"]["extra"]["stream_bounds"]["global"]["norm"] > 0
