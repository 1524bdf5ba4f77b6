"""A broker killed mid-round loses no update and holds no round to its deadline.

A small federation — the coordinator service and two simulated agents in threads of this
process, plus a fake agent ``slow`` — runs over a real Mosquitto that is killed with SIGKILL
in the middle of three rounds and restarted on the same port and folder. In each of those
rounds ``slow`` plays a task lost with the broker: it never answers the copy it got first,
nor the broker's redelivery of that copy (same ``issued_at``), so the round is open when the
broker dies and only the coordinator sending the task again (when the agents' ``online``
statuses come back) can close it. The round clock never moves, so a round that needed its
deadline would never end: every round finishing with every update is the proof.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.runtime.service import CoordinatorService
from faultfleet.wire.messages import FitTaskMessage
from faultfleet.wire.settings import BrokerSettings
from faultfleet_apps.brokers.launch import RunningBroker
from tests.clocks import ManualClock

from .services import (
    CoordinatorThread,
    coordinator_settings,
    running_agents,
    sample_value,
    wait_until,
)
from .wire_clients import FakeAgents

ROUNDS = 4
KILLED_IN_ROUNDS = (2, 3, 4)
AGENTS = 3


def _has_task(agents: FakeAgents, server_round: int) -> bool:
    return bool(agents.fit_tasks("slow", server_round))


@pytest.mark.timeout(600)
def test_three_broker_kills_mid_round_lose_no_update_and_wait_out_no_deadline(
    broker: RunningBroker, broker_settings: BrokerSettings, tmp_path: Path
) -> None:
    # Prepare
    registry = CollectorRegistry()
    settings = coordinator_settings(
        broker_settings, tmp_path / "coordinator", rounds=ROUNDS, min_agents=AGENTS
    )
    round_clock = ManualClock()  # never moved: no round deadline can pass
    first_issued: dict[int, float] = {}

    def lose_the_first_copy_in_killed_rounds(task: FitTaskMessage) -> float | None:
        if task.server_round not in KILLED_IN_ROUNDS:
            return 0.0
        lost = first_issued.setdefault(task.server_round, task.issued_at)
        return None if task.issued_at == lost else 0.0

    slow = FakeAgents(
        broker_settings, ["slow"], policy=lose_the_first_copy_in_killed_rounds, like_agents=True
    )
    service = CoordinatorService(settings, CoordinatorMetrics(registry), round_clock=round_clock)

    # Execute
    with running_agents(broker_settings, tmp_path / "agents", [0, 1]) as agents:
        coordinator = CoordinatorThread(service)
        try:
            for server_round in KILLED_IN_ROUNDS:
                wait_until(
                    functools.partial(_has_task, slow, server_round),
                    120,
                    f"slow's task of round {server_round}",
                )
                broker.kill()
                wait_until(
                    lambda: (
                        not service.connection.connected
                        and not any(a.connection.connected for a in agents)
                    ),
                    30,
                    "every client to notice the broker is gone",
                )
                broker.restart()
            summary = coordinator.result(timeout_s=300)
        finally:
            coordinator.close()
            slow.stop()

    # Assert: every round finished with every agent's update, none at its deadline
    assert summary.finished
    assert round_clock.monotonic() == 0.0
    assert sample_value(registry, "faultfleet_rounds_total") == ROUNDS
    assert sample_value(registry, "faultfleet_updates_received_total") == ROUNDS * AGENTS
    assert sample_value(registry, "faultfleet_rounds_without_quorum_total") == 0
    assert sample_value(registry, "faultfleet_tasks_resent_total") >= len(KILLED_IN_ROUNDS)
    copies = [t.header.server_round for t in slow.fit_tasks("slow")]
    assert all(copies.count(r) >= 2 for r in KILLED_IN_ROUNDS), copies
