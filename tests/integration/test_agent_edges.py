"""Agents at the edges, over the real broker: a clock two hours off, a full disk, and a
task meant to hold the compute lock of every agent of a process.

Agents run in threads of the test (:func:`~tests.integration.services.running_agents`);
the coordinator is the real service, or its model publisher.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.publisher import ModelPublisher
from coordinator.runtime.service import CoordinatorService
from faultfleet.clock import Waitable
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.tasks import TrainConfig
from faultfleet.types import FloatArray
from faultfleet.wire.codec import encode_frame, encode_tensors, split_frame
from faultfleet.wire.messages import (
    ANSWER_ADAPTER,
    Diagnosis,
    FitTaskMessage,
    ModelSpec,
    TaskFailedMessage,
    TensorEncoding,
    TrainSpec,
)
from faultfleet.wire.settings import BrokerSettings

from .services import (
    SIGNING_KEY,
    CoordinatorThread,
    coordinator_settings,
    running_agents,
    sample_value,
    wait_until,
)
from .wire_clients import TOPICS, Recorder, connect

SPEC = ModelSpec(name="compact", sample_shape=(1, 1024), n_classes=12)
CLASSES = tuple(f"class {i}" for i in range(12))
AHEAD_S = 7200.0


class AheadClock:
    """The system clock with its wall time :data:`AHEAD_S` seconds ahead (a gateway whose
    clock was set wrong); monotonic time and waits are the real ones."""

    def time(self) -> float:
        return time.time() + AHEAD_S

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, waitable: Waitable, timeout_s: float) -> bool:
        return waitable.wait(timeout_s)


def _weights(seed: int) -> FloatArray:
    return flatten_weights(build_model("compact", (1, 1024), 12, seed=seed))


def test_agents_two_hours_ahead_answer_every_task_and_report_the_skew(
    broker_settings: BrokerSettings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare
    registry = CollectorRegistry()
    settings = coordinator_settings(broker_settings, tmp_path / "coordinator", rounds=2)

    # Execute: a two-round run with both agents' clocks 2 h ahead
    with (
        caplog.at_level(logging.WARNING, logger="edge_agent.task_worker"),
        running_agents(broker_settings, tmp_path / "agents", [0, 1], clock=AheadClock()) as agents,
    ):
        service = CoordinatorService(settings, CoordinatorMetrics(registry))
        coordinator = CoordinatorThread(service)
        try:
            summary = coordinator.result(timeout_s=300)
        finally:
            coordinator.close()
        skew_s = sample_value(agents[0].metrics.registry, "faultfleet_clock_skew_seconds")

    # Assert: every task answered, the skew measured and said once per agent
    assert summary.finished
    assert sample_value(registry, "faultfleet_updates_received_total") == 2 * 2
    assert AHEAD_S - 60 < skew_s < AHEAD_S + 60
    warnings = [r.getMessage() for r in caplog.records if "clock is" in r.getMessage()]
    assert sorted(w.split(":")[0] for w in warnings) == ["m00", "m01"]
    assert all("ahead of the coordinator's" in w for w in warnings)


def test_a_full_disk_stops_the_local_log_not_the_published_diagnoses(
    broker_settings: BrokerSettings, tmp_path: Path
) -> None:
    # Prepare: m00's diagnosis log is /dev/full (every write: ENOSPC); m01's is a real file
    (tmp_path / "m00").mkdir()
    (tmp_path / "m00" / "diagnoses.jsonl").symlink_to("/dev/full")
    coordinator = connect("test-coordinator", broker_settings, {})
    recorder = Recorder(broker_settings)
    publisher = ModelPublisher(coordinator, TOPICS, SPEC, CLASSES, "run-1", SIGNING_KEY)
    try:
        with running_agents(broker_settings, tmp_path, [0, 1]) as agents:
            # Execute: a model for both, then windows diagnosed for a while
            publisher.publish(1, 1, {"A": _weights(1)}, {"m00": "A", "m01": "A"})
            wait_until(
                lambda: (
                    len(recorder.on(TOPICS.diagnoses("m00"))) >= 10
                    and len(recorder.on(TOPICS.diagnoses("m01"))) >= 10
                    and sample_value(
                        agents[0].metrics.registry, "faultfleet_diagnosis_log_failures_total"
                    )
                    >= 10
                ),
                60,
                "ten published diagnoses from each agent, ten of m00's lines counted as lost",
            )
            failures = sample_value(
                agents[0].metrics.registry, "faultfleet_diagnosis_log_failures_total"
            )
            errors = sample_value(
                agents[0].metrics.registry,
                "faultfleet_thread_errors_total",
                {"thread": "diagnosis"},
            )
    finally:
        recorder.stop()
        coordinator.stop()

    # Assert: m00 published and counted what it could not log; m01 logged as usual
    published = [
        Diagnosis.model_validate_json(m.payload) for m in recorder.on(TOPICS.diagnoses("m00"))
    ]
    assert {d.class_name for d in published} <= set(CLASSES)
    assert failures >= 10
    assert errors == 0
    assert (tmp_path / "m01" / "diagnoses.jsonl").read_text().count("\n") >= 10


def test_a_task_of_100000_epochs_is_refused_and_the_other_agents_train_on(
    broker_settings: BrokerSettings, tmp_path: Path
) -> None:
    # Prepare: a well-formed fit task asking m00 for 100000 epochs
    header = FitTaskMessage(
        task_id="wedge-1",
        run_id="attack",
        server_round=0,
        agent_id="m00",
        model=SPEC,
        model_keys=("global",),
        encoding=TensorEncoding(),
        issued_at=time.time(),
        deadline_s=600.0,
        train=TrainSpec.of(TrainConfig(epochs=100_000)),
        seed=0,
    )
    frame = encode_frame(header, encode_tensors({"global": _weights(0)}, TensorEncoding()))
    registry = CollectorRegistry()
    settings = coordinator_settings(broker_settings, tmp_path / "coordinator", rounds=2)
    recorder = Recorder(broker_settings)
    attacker = connect("attacker", broker_settings, {})
    try:
        with running_agents(broker_settings, tmp_path / "agents", [0, 1]) as agents:
            wait_until(
                lambda: all(a.connection.wait_subscribed(0.1) for a in agents), 30, "the agents"
            )
            # Execute: the task, then a genuine two-round run on the same two agents
            attacker.publish_wait(TOPICS.tasks("m00"), frame)
            wait_until(lambda: bool(recorder.on(TOPICS.results("m00"))), 60, "m00's answer")
            service = CoordinatorService(settings, CoordinatorMetrics(registry))
            coordinator = CoordinatorThread(service)
            try:
                summary = coordinator.result(timeout_s=300)
            finally:
                coordinator.close()
    finally:
        attacker.stop()
        recorder.stop()

    # Assert
    first = recorder.on(TOPICS.results("m00"))[0].payload
    answer = ANSWER_ADAPTER.validate_python(split_frame(first, max_bytes=len(first))[0])
    assert isinstance(answer, TaskFailedMessage)
    assert answer.task_id == "wedge-1"
    assert "train.epochs=100000 is above this agent's limit of 50" in answer.reason
    assert summary.finished
    assert sample_value(registry, "faultfleet_updates_received_total") == 2 * 2
