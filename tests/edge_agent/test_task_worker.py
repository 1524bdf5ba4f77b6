"""The task worker: a bounded queue answered in time, whatever the frames hold, with the
clock skew reported."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from edge_agent.metrics import AgentMetrics
from edge_agent.supervision import AgentThread, ErrorReport
from edge_agent.task_runner import TaskRunner
from edge_agent.task_worker import TaskWorker
from faultfleet.wire.codec import parse_envelope, split_frame
from faultfleet.wire.messages import (
    ANSWER_ADAPTER,
    AnyAnswerMessage,
    FitUpdateMessage,
    TaskFailedMessage,
)
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from signal_pipeline.federation import ClientData
from tests.clocks import FakeClock
from tests.edge_agent.task_frames import CPU, LIMIT, NOW, client, fit_task, frame, initial_weights
from tests.faultfleet.scrape import value

RESULTS = "faultfleet/agents/m07/results"


@pytest.fixture(scope="module")
def data() -> ClientData:
    return client()


class Harness:
    """A worker on an unstarted connection whose publishes are recorded."""

    def __init__(self, data: ClientData, monkeypatch: pytest.MonkeyPatch, **limits: Any) -> None:
        self.clock = FakeClock()
        self.metrics = AgentMetrics(CollectorRegistry())
        self.runner = TaskRunner("m07", data, CPU, max_payload_bytes=LIMIT, clock=self.clock)
        connection = MqttConnection(client_id="test-m07", settings=BrokerSettings())
        self.published: list[tuple[str, bytes]] = []
        monkeypatch.setattr(
            connection,
            "publish",
            lambda topic, payload, **_: self.published.append((topic, payload)),
        )
        self.worker = TaskWorker(
            self.runner,
            connection,
            RESULTS,
            self.metrics,
            ErrorReport("m07", self.metrics.thread_error),
            self.clock,
            max_queued=limits.get("max_queued", 16),
            clock_skew_warn_s=limits.get("clock_skew_warn_s", 30.0),
            answers_kept=limits.get("answers_kept", 4),
        )

    def _record(self, topic: str, payload: bytes, **_: Any) -> int:
        self.published.append((topic, payload))
        return len(payload)

    def answers(self) -> list[AnyAnswerMessage]:
        return [
            parse_envelope(ANSWER_ADAPTER, split_frame(payload, max_bytes=LIMIT)[0])
            for _, payload in self.published
        ]

    def drain(self) -> None:
        while not self.worker.queue.empty():
            self.worker.answer(self.worker.queue.get_nowait())

    def metric(self, name: str, **labels: str) -> float:
        return value(self.metrics.registry, name, **labels)


def _payload(task_id: str = "task-1", **changes: Any) -> bytes:
    return frame(fit_task(task_id=task_id, **changes), {"cluster-0": initial_weights(0)})


def test_a_frame_beyond_the_queue_is_answered_failed_at_once(
    data: ClientData, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare
    harness = Harness(data, monkeypatch, max_queued=2)

    # Execute: three frames arrive while the worker is busy
    for number in range(3):
        harness.worker.on_task("tasks", _payload(f"task-{number}"))

    # Assert
    (refused,) = harness.answers()
    assert isinstance(refused, TaskFailedMessage)
    assert refused.task_id == "task-2"
    assert "task queue is full (2 tasks waiting, [tasks] max_queued)" in refused.reason
    assert harness.worker.queue.qsize() == 2
    assert harness.metric("faultfleet_tasks_queue_full_total") == 1.0


def test_a_nesting_bomb_and_a_crashing_task_leave_the_worker_answering(
    data: ClientData, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: a 400 kB frame of "[", a task whose computation raises, a good task
    harness = Harness(data, monkeypatch)
    real_run = harness.runner.run

    def run(task: Any, body: bytes, received_s: float | None = None) -> Any:
        if task.task_id == "crash":
            raise RecursionError("maximum recursion depth exceeded")
        return real_run(task, body, received_s)

    monkeypatch.setattr(harness.runner, "run", run)
    for payload in (b"FFW1" + b"[" * 400_000, _payload("crash"), _payload("good")):
        harness.worker.on_task("tasks", payload)
    stop = threading.Event()
    thread = threading.Thread(target=harness.worker.run, args=(stop,))

    # Execute: the worker thread takes the three frames
    thread.start()
    while len(harness.published) < 2 and thread.is_alive():
        stop.wait(0.01)
    stop.set()
    thread.join(timeout=30)

    # Assert
    crash, good = harness.answers()
    assert isinstance(crash, TaskFailedMessage)
    assert crash.reason.startswith("RecursionError: maximum recursion depth exceeded")
    assert isinstance(good, FitUpdateMessage)
    assert harness.metric("faultfleet_tasks_rejected_total", reason="malformed") == 1.0
    assert harness.metric("faultfleet_thread_errors_total", thread=AgentThread.TASKS) == 1.0


def test_clock_skew_is_on_the_gauge_and_warned_once(
    data: ClientData, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: the agent's clock runs 2 h ahead of the coordinator's
    harness = Harness(data, monkeypatch)
    for number in range(2):
        harness.worker.on_task("tasks", _payload(f"t{number}", issued_at=NOW - 7200.0))

    # Execute
    with caplog.at_level(logging.WARNING, logger="edge_agent.task_worker"):
        harness.drain()

    # Assert: both tasks answered, the skew reported
    assert all(isinstance(a, FitUpdateMessage) for a in harness.answers())
    assert len(harness.answers()) == 2
    assert harness.metric("faultfleet_clock_skew_seconds") == pytest.approx(7200.0)
    (warning,) = caplog.records
    assert "clock is 7200.0 s ahead of the coordinator's" in warning.getMessage()
    assert "synchronise the clock (NTP)" in warning.getMessage()


def test_a_task_received_long_ago_fails_on_its_duration(
    data: ClientData, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: a frame queued 90 s before the worker reaches it (deadline 60 s)
    harness = Harness(data, monkeypatch)
    harness.worker.on_task("tasks", _payload())
    harness.clock.advance(90.0)

    # Execute
    harness.drain()

    # Assert
    (late,) = harness.answers()
    assert isinstance(late, TaskFailedMessage)
    assert "waited 90.0 s in the agent's queue, deadline 60 s" in late.reason


class CountingRuns:
    """Wraps the runner's ``run`` and counts the tasks it really computes."""

    def __init__(self, harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
        self.task_ids: list[str] = []
        real_run = harness.runner.run

        def run(task: Any, body: bytes, received_s: float | None = None) -> Any:
            self.task_ids.append(task.task_id)
            return real_run(task, body, received_s)

        monkeypatch.setattr(harness.runner, "run", run)


def test_a_task_repeated_while_it_waits_is_run_and_answered_once(
    data: ClientData, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare
    harness = Harness(data, monkeypatch)
    runs = CountingRuns(harness, monkeypatch)

    # Execute: the coordinator sends task-1 again before the worker got to it
    harness.worker.on_task("tasks", _payload("task-1"))
    harness.worker.on_task("tasks", _payload("task-1", issued_at=NOW + 5.0))
    harness.drain()

    # Assert
    assert runs.task_ids == ["task-1"]
    assert [a.task_id for a in harness.answers()] == ["task-1"]
    assert harness.metric("faultfleet_tasks_repeated_total") == 1.0


def test_a_task_repeated_after_its_answer_gets_the_same_answer_without_running(
    data: ClientData, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: task-1 answered (the broker then lost the answer)
    harness = Harness(data, monkeypatch)
    runs = CountingRuns(harness, monkeypatch)
    harness.worker.on_task("tasks", _payload("task-1"))
    harness.drain()

    # Execute: sent again after a broker restart
    harness.worker.on_task("tasks", _payload("task-1", issued_at=NOW + 5.0))
    harness.drain()

    # Assert: the very same answer, published twice, computed once
    (first, again) = [payload for _, payload in harness.published]
    assert again == first
    assert runs.task_ids == ["task-1"]
    assert harness.metric("faultfleet_tasks_repeated_total") == 1.0


def test_a_repeated_task_whose_answer_is_no_longer_kept_runs_again(
    data: ClientData, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: one answer kept; task-1's pushed out by task-2's
    harness = Harness(data, monkeypatch, answers_kept=1)
    runs = CountingRuns(harness, monkeypatch)
    for task_id in ("task-1", "task-2"):
        harness.worker.on_task("tasks", _payload(task_id))
    harness.drain()

    # Execute
    harness.worker.on_task("tasks", _payload("task-1"))
    harness.worker.on_task("tasks", _payload("task-2"))
    harness.drain()

    # Assert: task-1 ran again, task-2 came from memory
    assert runs.task_ids == ["task-1", "task-2", "task-1"]
    assert [a.task_id for a in harness.answers()] == ["task-1", "task-2", "task-2", "task-1"]
    assert all(isinstance(a, FitUpdateMessage) for a in harness.answers())


def test_a_repeat_arriving_at_a_full_queue_is_not_refused(
    data: ClientData, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: the queue is full of task-1 and task-2
    harness = Harness(data, monkeypatch, max_queued=2)
    for task_id in ("task-1", "task-2"):
        harness.worker.on_task("tasks", _payload(task_id))

    # Execute: task-1 again; then both run
    harness.worker.on_task("tasks", _payload("task-1"))
    harness.drain()

    # Assert: no task_failed for the waiting task-1, no queue-full refusal
    assert [a.task_id for a in harness.answers()] == ["task-1", "task-2"]
    assert all(isinstance(a, FitUpdateMessage) for a in harness.answers())
    assert harness.metric("faultfleet_tasks_queue_full_total") == 0.0
