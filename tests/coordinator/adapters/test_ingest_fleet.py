"""Fit rounds through ingest workers, the coordinator's side: which summaries count, where
forwarded answers go, a worker that never sends its partial sums and one that goes offline
mid-round.

No broker: the connection is never started and records what the coordinator publishes;
the workers' messages are handed to the coordinator's handlers by the test, and the round's
time is a :class:`~tests.clocks.ManualClock` the test moves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from coordinator.adapters.ingest_coordinator import IngestCoordinator
from coordinator.adapters.ingest_fleet import WorkerIngest
from coordinator.adapters.journal import RoundJournal
from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.mqtt_fleet import MqttFleet
from coordinator.adapters.presence import AgentRegistry
from coordinator.adapters.round_tasks import Collection, Pending
from coordinator.strategies.robust import AggregationPolicy
from coordinator.strategies.sketch import UpdateSketcher
from coordinator.strategies.streaming import UpdateStream
from faultfleet.clock import SYSTEM_CLOCK, Clock
from faultfleet.tasks import EvaluateResult, EvaluateTask, FitOutcome, FitTask, TrainConfig
from faultfleet.wire.codec import encode_frame, encode_tensors
from faultfleet.wire.ingest_messages import (
    IngestReady,
    IngestWorkerStatus,
    PartialSum,
    UpdateSummary,
)
from faultfleet.wire.messages import AgentStatus, EvaluateTaskMessage, ModelSpec, TensorEncoding
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from faultfleet.wire.topics import Topics
from tests.clocks import ManualClock
from tests.integration.services import sample_value, wait_until
from tests.integration.wire_clients import evaluation_frame

TOPICS = Topics()
N_PARAMS = 10
SKETCHER = UpdateSketcher(N_PARAMS, 5, seed=0)
START = np.zeros(N_PARAMS, dtype=np.float32)


class RecordingConnection(MqttConnection):
    """A connection never started: it keeps what is published and the routes added."""

    def __init__(self) -> None:
        super().__init__(client_id="never-started", settings=BrokerSettings())
        self.published: list[str] = []

    def publish(self, topic: str, payload: bytes | str, **_: object) -> int:
        self.published.append(topic)
        return len(payload)

    def publish_wait(self, topic: str, payload: bytes | str, **_: object) -> int:
        return self.publish(topic, payload)


def driven_fleet(
    tmp_path: Path, clock: Clock = SYSTEM_CLOCK, workers: tuple[str, ...] = ("w1", "w2")
) -> tuple[MqttFleet, WorkerIngest, CoordinatorMetrics]:
    registry = AgentRegistry()
    for agent in ("a", "b"):
        registry.update(
            AgentStatus(agent_id=agent, state="online", can_train=True, num_train_samples=10)
        )
    metrics = CoordinatorMetrics(CollectorRegistry())
    connection = RecordingConnection()
    link = IngestCoordinator(connection, TOPICS, max_payload_bytes=1 << 20, clock=clock)
    ingest = WorkerIngest(link, workers, metrics, ready_timeout_s=5.0, close_timeout_s=7.0)
    fleet = MqttFleet(
        connection,
        TOPICS,
        registry,
        ["a", "b"],
        run_id="run-1",
        model=ModelSpec(name="compact", sample_shape=(1, 1024), n_classes=12),
        n_params=N_PARAMS,
        encoding=TensorEncoding(),
        deadline_s=30.0,
        min_quorum=1,
        journal=RoundJournal(tmp_path),
        metrics=metrics,
        max_payload_bytes=1 << 20,
        round_clock=clock,
        ingest=ingest,
    ).start()
    return fleet, ingest, metrics


def summary(worker: str, pending: Pending, *, samples: int = 10, model: str = "global") -> bytes:
    message = UpdateSummary(
        run_id="run-1",
        server_round=1,
        worker_id=worker,
        task_id=pending.task_id,
        agent_id=pending.agent_id,
        model_key=model,
        num_samples=samples,
        train_loss=0.5,
        norm=1.0,
    )
    sketch = np.ones(SKETCHER.dim, dtype=np.float32) / np.sqrt(SKETCHER.dim)
    return encode_frame(message, encode_tensors({"sketch": sketch}, TensorEncoding()))


def partial(worker: str, value: float, updates: int) -> bytes:
    message = PartialSum(
        run_id="run-1",
        server_round=1,
        worker_id=worker,
        model_key="global",
        weight=10.0 * updates,
        updates=updates,
    )
    body = {"mean": np.full(N_PARAMS, value, dtype=np.float32)}
    return encode_frame(message, encode_tensors(body, TensorEncoding()))


def fit_tasks(fleet: MqttFleet) -> list[Pending]:
    """Open fit tasks for a and b, as a round's dispatch opens them."""
    tasks = [FitTask(a, {"global": START}, TrainConfig(), seed=1) for a in ("a", "b")]
    pending = [p for p, _, _ in fleet.frames.fit(1, tasks)]
    fleet.answers._collection = Collection({p.task_id: p for p in pending})
    return pending


def rejected(metrics: CoordinatorMetrics, reason: str) -> float:
    return sample_value(metrics.registry, "faultfleet_updates_rejected_total", {"reason": reason})


def test_the_first_summary_of_an_open_fit_task_counts_and_the_others_are_refused(
    tmp_path: Path,
) -> None:
    # Prepare: an open round with fit tasks for a and b (each declared 10 windows)
    fleet, ingest, metrics = driven_fleet(tmp_path)
    task_a, task_b = fit_tasks(fleet)
    stream = UpdateStream(1, {"global": START}, AggregationPolicy(), {}, SKETCHER)
    merged = ingest.link.open_round("run-1", stream, admit=ingest.admit)
    other = Pending("t-unknown", "a", 1, {"global": START}, task_a.header)

    # Execute: a's update summarised twice (QoS 1 redelivered it to the other worker), a
    # task never sent, b claiming more windows than it declared
    for worker, payload in [
        ("w1", summary("w1", task_a)),
        ("w2", summary("w2", task_a)),
        ("w1", summary("w1", other)),
        ("w2", summary("w2", task_b, samples=11)),
    ]:
        ingest.link._on_summary(TOPICS.ingest_summaries(worker), payload, worker=worker)

    # Assert: only a's first summary counts; b's task fails at once
    assert [u.client_id for u in merged.updates()] == ["a"]
    assert task_a.streamed
    assert task_a.done
    assert task_b.failure is not None
    assert "claimed 11 training samples" in task_b.failure.reason
    assert merged.close_message().refused == {"w2": (task_a.task_id, task_b.task_id)} | {
        "w1": ("t-unknown",)
    }
    assert rejected(metrics, "duplicate") == 1
    assert rejected(metrics, "unknown_task") == 1
    assert rejected(metrics, "too_many_samples") == 1
    assert sample_value(metrics.registry, "faultfleet_updates_received_total") == 1


def test_a_summary_on_another_workers_topic_is_refused(tmp_path: Path) -> None:
    fleet, ingest, _ = driven_fleet(tmp_path)
    task_a, _ = fit_tasks(fleet)
    stream = UpdateStream(1, {"global": START}, AggregationPolicy(), {}, SKETCHER)
    merged = ingest.link.open_round("run-1", stream, admit=ingest.admit)

    ingest.link._on_summary(TOPICS.ingest_summaries("w1"), summary("w2", task_a), worker="w1")

    assert merged.updates() == ()
    assert not task_a.done


def test_only_the_configured_workers_are_listened_to(tmp_path: Path) -> None:
    fleet, _, _ = driven_fleet(tmp_path, workers=("w1",))

    filters = set(fleet.answers.connection.dispatcher.filters())

    assert TOPICS.ingest_summaries("w1") in filters
    assert TOPICS.forwarded_answers("w1") in filters
    assert TOPICS.all_ingest_summaries() not in filters
    assert TOPICS.all_results() not in filters  # the workers take the agents' results


def test_a_forwarded_evaluation_answers_its_task_as_if_it_came_from_the_agent(
    tmp_path: Path,
) -> None:
    # Prepare: an open evaluation task for a
    fleet, ingest, metrics = driven_fleet(tmp_path)
    frames = fleet.frames.evaluate(1, [EvaluateTask("a", {"global": START})])
    ((pending, header, _),) = frames
    assert isinstance(header, EvaluateTaskMessage)
    fleet.answers._collection = Collection({pending.task_id: pending})
    answer = evaluation_frame(header)

    # Execute: w1 forwards it on b's topic (refused), on w2's topic (ignored), then rightly
    ingest.on_forwarded("w1", TOPICS.forwarded_answer("w1", "b"), answer)
    ingest.on_forwarded("w1", TOPICS.forwarded_answer("w2", "a"), answer)
    fleet.close()  # the checking threads finish what they hold
    answered_before = pending.done
    fleet.answers._workers.start()
    ingest.on_forwarded("w1", TOPICS.forwarded_answer("w1", "a"), answer)
    fleet.close()

    # Assert
    assert not answered_before
    assert rejected(metrics, "unknown_task") == 1
    assert pending.result == EvaluateResult("a", "global", 0.5, 1.0, 10)


class DrivenRound:
    """One fit round of agents a and b through workers w1 and w2, run on its own thread
    on a :class:`ManualClock`; the test delivers the workers' messages."""

    def __init__(self, tmp_path: Path) -> None:
        self.clock = ManualClock()
        self.fleet, self.ingest, self.metrics = driven_fleet(tmp_path, self.clock)
        tasks = [FitTask(a, {"global": START}, TrainConfig(), seed=1) for a in ("a", "b")]
        self.stream = UpdateStream(1, {"global": START}, AggregationPolicy(), {}, SKETCHER)
        self.outcome: list[FitOutcome | BaseException] = []

        def run_round() -> None:
            try:
                self.outcome.append(self.fleet.fit_streaming(1, tasks, self.stream))
            except BaseException as error:  # re-raised by until(), in the test's thread
                self.outcome.append(error)

        self.thread = threading.Thread(target=run_round)
        connection = self.fleet.answers.connection
        assert isinstance(connection, RecordingConnection)
        self.connection = connection

    def deliver(self, worker: str, payload: bytes) -> None:
        """``payload`` as if ``worker`` had published it on its summaries topic."""
        self.ingest.link._on_summary(TOPICS.ingest_summaries(worker), payload, worker=worker)

    def until(self, predicate: Callable[[], bool], what: str) -> None:
        """Wait for ``predicate`` (or the round's end); re-raise the round's error."""
        wait_until(lambda: predicate() or bool(self.outcome), 120, what)
        if self.outcome and isinstance(self.outcome[0], BaseException):
            raise self.outcome[0]


def test_a_worker_that_sends_no_partial_sums_is_left_out_at_the_close_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: a round of a and b through w1 and w2; its time moves only when the test says
    driven = DrivenRound(tmp_path)
    clock, fleet, metrics = driven.clock, driven.fleet, driven.metrics
    stream, outcome, thread = driven.stream, driven.outcome, driven.thread
    connection, deliver, until = driven.connection, driven.deliver, driven.until

    # Execute: both workers take the plan and summarise an update each; w1 answers the
    # close, w2 (dead) never does
    thread.start()
    until(lambda: bool(clock.waiting_until()), "the wait for the workers")
    for worker in ("w1", "w2"):
        deliver(worker, encode_frame(IngestReady(run_id="run-1", server_round=1, worker_id=worker)))
    until(lambda: fleet.waiting_for() == ["a", "b"], "the round's tasks")
    pending = {p.agent_id: p for p in fleet.answers._collection.pending.values()}
    deliver("w1", summary("w1", pending["a"]))
    deliver("w2", summary("w2", pending["b"]))
    until(lambda: TOPICS.ingest_plan() in connection.published[1:], "the close")
    deliver("w1", partial("w1", 2.0, updates=1))
    until(lambda: bool(clock.waiting_until()), "the wait for the partial sums")
    open_before_timeout = thread.is_alive()
    clock.advance(7.0)
    thread.join(120)

    # Assert: the round closes without w2: b's task failed, the average is w1's alone
    assert open_before_timeout
    (fit,) = outcome
    assert isinstance(fit, FitOutcome)
    assert [(f.client_id, f.reason) for f in fit.failures] == [
        ("b", "its ingest worker w2 sent no partial sums")
    ]
    assert [u.client_id for u in stream.updates()] == ["a"]
    np.testing.assert_allclose(stream.average("global"), np.full(N_PARAMS, 2.0))
    labels = {"stage": "close"}
    assert sample_value(metrics.registry, "faultfleet_ingest_workers_missing_total", labels) == 1
    assert "ingest worker w2 sent no partial sums within 7 s" in caplog.text


def test_a_worker_gone_offline_mid_round_has_its_updates_asked_for_again(
    tmp_path: Path,
) -> None:
    # Prepare: a round of a and b through w1 and w2; its time moves only when the test says
    driven = DrivenRound(tmp_path)
    clock, fleet, ingest, metrics = driven.clock, driven.fleet, driven.ingest, driven.metrics
    stream, outcome, thread = driven.stream, driven.outcome, driven.thread
    connection, deliver, until = driven.connection, driven.deliver, driven.until

    offline = IngestWorkerStatus(worker_id="w2", state="offline").model_dump_json().encode()

    # Execute: both take the plan and summarise an update each; w2's last will arrives;
    # b answers its repeated task through w1, whose partial sums hold both updates
    thread.start()
    until(lambda: bool(clock.waiting_until()), "the wait for the workers")
    for worker in ("w1", "w2"):
        deliver(worker, encode_frame(IngestReady(run_id="run-1", server_round=1, worker_id=worker)))
    until(lambda: fleet.waiting_for() == ["a", "b"], "the round's tasks")
    pending = {p.agent_id: p for p in fleet.answers._collection.pending.values()}
    deliver("w1", summary("w1", pending["a"]))
    deliver("w2", summary("w2", pending["b"]))
    ingest.on_status("w2", TOPICS.ingest_status("w2"), offline)
    until(lambda: connection.published.count(TOPICS.tasks("b")) == 2, "b's task again")
    reopened = fleet.waiting_for()
    deliver("w1", summary("w1", pending["b"]))
    until(lambda: TOPICS.ingest_plan() in connection.published[1:], "the close")
    deliver("w1", partial("w1", 2.0, updates=2))
    thread.join(120)

    # Assert: b's update counted once, through w1; the round closed without waiting for w2
    assert reopened == ["b"]
    assert clock.monotonic() == 0.0
    (fit,) = outcome
    assert isinstance(fit, FitOutcome)
    assert fit.failures == ()
    assert sorted(u.client_id for u in stream.updates()) == ["a", "b"]
    np.testing.assert_allclose(stream.average("global"), np.full(N_PARAMS, 2.0))
    registry = metrics.registry
    assert sample_value(registry, "faultfleet_updates_received_total") == 2
    assert sample_value(registry, "faultfleet_tasks_resent_total") == 1
    labels = {"stage": "close"}
    assert sample_value(registry, "faultfleet_ingest_workers_missing_total", labels) == 1
    assert ingest.offline() == {"w2"}
