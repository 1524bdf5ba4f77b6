"""Bad answers from agents are rejected, counted by reason, and never stop the coordinator.

A coordinator service runs two rounds with three agents played on the wire by the test
(:class:`~tests.integration.wire_clients.FakeAgents`): ``a0`` and ``a1`` answer every task at
once, ``slow`` only when the test says so. The round deadline is measured on a clock the
test moves. While round 1 waits for ``slow``, the test publishes one bad message of every
kind on the agents' results topics and waits until the coordinator counted it under its
reason; the last, an update claiming more training samples than ``slow`` declared, fails
its task at once and so closes round 1 without its deadline passing. In round 2 ``slow``
stays silent until the test moved the clock past the deadline,
which closes the round, and then answers, late. Both rounds complete with the good agents'
updates and nothing rejected reaches the model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.runtime.service import CoordinatorService
from faultfleet.wire.codec import RejectReason
from faultfleet.wire.messages import FitTaskMessage
from faultfleet.wire.settings import BrokerSettings
from tests.clocks import ManualClock

from .services import (
    CoordinatorThread,
    coordinator_settings,
    sample_value,
    wait_until,
)
from .wire_clients import (
    FakeAgents,
    fit_frame,
    fit_header,
    raw_frame,
)

MAX_PAYLOAD_BYTES = 512 * 1024
"""The coordinator's limit: above a compact model's 242 KB update, below the oversized one."""
DEADLINE_S = 4.0


def test_bad_updates_are_rejected_by_reason_and_rounds_complete(
    broker_settings: BrokerSettings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare
    caplog.set_level(logging.DEBUG, logger="coordinator.engine.rounds")
    registry = CollectorRegistry()
    limited = broker_settings.model_copy(update={"max_payload_bytes": MAX_PAYLOAD_BYTES})
    settings = coordinator_settings(
        limited, tmp_path / "coordinator", min_agents=3, round_deadline_s=DEADLINE_S
    )
    round_clock = ManualClock()  # round deadlines pass only when the test moves it
    service = CoordinatorService(settings, CoordinatorMetrics(registry), round_clock=round_clock)
    agents = FakeAgents(
        broker_settings,
        ["a0", "a1", "slow"],
        policy=lambda task: None if task.agent_id == "slow" else 0.0,
    )

    def value(name: str, **labels: str) -> float:
        return sample_value(registry, name, labels)

    def rejected(reason: RejectReason) -> float:
        return value("faultfleet_updates_rejected_total", reason=reason.value)

    def counted_once(reason: RejectReason) -> Callable[[], bool]:
        return lambda: rejected(reason) == 1

    coordinator = CoordinatorThread(service)
    try:
        # Execute: round 1, while it waits for slow
        wait_until(lambda: bool(agents.fit_tasks("slow", 1)), 60, "round 1's task to slow")
        wait_until(
            lambda: value("faultfleet_updates_received_total") == 2, 60, "a0's and a1's updates"
        )
        task = agents.fit_tasks("slow", 1)[0]
        header = task.header
        assert isinstance(header, FitTaskMessage)
        weights = task.weights[header.model_keys[0]]
        poisoned = weights.copy()
        poisoned[7] = np.nan
        extra_field = fit_header(header).model_dump(mode="json") | {"priority": "high"}
        bad_messages = [
            (RejectReason.DUPLICATE, "a0", agents.fit_answer(agents.fit_tasks("a0", 1)[0])),
            (RejectReason.MALFORMED, "slow", b"definitely not a frame"),
            (RejectReason.OVERSIZED, "slow", b"FFW1" + bytes(MAX_PAYLOAD_BYTES)),
            (RejectReason.SCHEMA, "slow", raw_frame(extra_field)),
            (RejectReason.WRONG_SHAPE, "slow", fit_frame(header, weights[:-1])),
            (RejectReason.NOT_FINITE, "slow", fit_frame(header, poisoned)),
            (RejectReason.UNKNOWN_TASK, "slow", fit_frame(header, weights, task_id="f" * 24)),
        ]
        for reason, agent_id, payload in bad_messages:
            agents.send(agent_id, payload)
            wait_until(counted_once(reason), 60, f"the {reason} rejection")
        round_1_open = value("faultfleet_rounds_total") == 0
        # slow declared 10 training windows: a claim of 10**12 is refused and fails its task
        # at once, which closes round 1 although its deadline never passes
        agents.send("slow", fit_frame(header, weights, num_samples=10**12))
        wait_until(counted_once(RejectReason.TOO_MANY_SAMPLES), 60, "the too_many_samples one")
        wait_until(lambda: value("faultfleet_rounds_total") == 1, 60, "round 1 without slow")

        # Execute: round 2 closes at its deadline without slow, which then answers late
        wait_until(lambda: bool(agents.fit_tasks("slow", 2)), 60, "round 2's task to slow")
        wait_until(lambda: value("faultfleet_updates_received_total") == 4, 60, "round 2's updates")
        round_2_open = value("faultfleet_rounds_total") == 1
        round_clock.advance(DEADLINE_S)
        wait_until(lambda: value("faultfleet_rounds_total") == 2, 60, "round 2's deadline")
        agents.send("slow", agents.fit_answer(agents.fit_tasks("slow", 2)[0]))
        wait_until(lambda: rejected(RejectReason.LATE) == 1, 60, "the late rejection")
        summary = coordinator.result(timeout_s=60)
    finally:
        coordinator.close()
        agents.stop()

    # Assert: every bad message was counted once, under its own reason
    assert round_1_open  # its deadline never passed: it waited for slow
    assert round_2_open  # until the deadline passed
    assert {r: rejected(r) for r in RejectReason} == dict.fromkeys(RejectReason, 1.0)
    assert value("faultfleet_updates_received_total") == 2 + 2
    assert service.connection.handler_errors == 0

    # Assert: both rounds completed with the good updates; nothing rejected reached the model
    assert summary.finished
    assert summary.server_round == 2
    assert (
        "round 1: slow failed: its update claimed 1000000000000 training samples; it declared 10"
        in caplog.messages
    )
    assert "round 2: slow failed: no answer within the 4 s deadline" in caplog.messages
    assert not any("a0 failed" in m or "a1 failed" in m for m in caplog.messages)
    assert service.engine is not None
    assert all(np.isfinite(model).all() for model in service.engine.strategy.models.values())
