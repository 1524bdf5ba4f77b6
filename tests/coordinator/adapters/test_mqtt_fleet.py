"""Which agents a round of :class:`MqttFleet` offers, fresh and replayed after a restart, and
the bound on an update's sample count.

No broker: the fleet's connection is never started, and presence comes from statuses fed
to its registry by hand, in the order a restarted coordinator may receive them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from coordinator.adapters.byte_budget import ByteBudget
from coordinator.adapters.journal import RoundJournal
from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.mqtt_fleet import MqttFleet
from coordinator.adapters.presence import AgentRegistry
from coordinator.adapters.round_tasks import Collection, RoundAbortedError
from coordinator.adapters.task_frames import Frame
from coordinator.strategies.robust import AggregationPolicy
from coordinator.strategies.streaming import UpdateStream
from faultfleet.tasks import FitResult, FitTask, GradientResult, GradientTask, TrainConfig
from faultfleet.wire.codec import encode_frame
from faultfleet.wire.messages import (
    AgentStatus,
    FitTaskMessage,
    GradientTaskMessage,
    ModelSpec,
    TensorEncoding,
)
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from faultfleet.wire.topics import Topics
from tests.integration.services import sample_value
from tests.integration.wire_clients import fit_frame, gradient_frame

CLIENTS = ["a", "b", "c", "d"]


def status(agent_id: str, state: Literal["online", "offline"]) -> AgentStatus:
    return AgentStatus(agent_id=agent_id, state=state, can_train=True, num_train_samples=10)


def fleet(
    journal_dir: Path,
    registry: AgentRegistry,
    metrics: CoordinatorMetrics | None = None,
    connection: MqttConnection | None = None,
    deadline_s: float = 30.0,
) -> MqttFleet:
    return MqttFleet(
        connection or MqttConnection(client_id="never-started", settings=BrokerSettings()),
        Topics(),
        registry,
        CLIENTS,
        run_id="run-1",
        model=ModelSpec(name="compact", sample_shape=(1, 1024), n_classes=12),
        n_params=10,
        encoding=TensorEncoding(),
        deadline_s=deadline_s,
        min_quorum=1,
        journal=RoundJournal(journal_dir),
        metrics=metrics or CoordinatorMetrics(CollectorRegistry()),
        max_payload_bytes=1 << 20,
    )


def test_a_fresh_round_offers_the_agents_online_at_its_start_while_they_stay(
    tmp_path: Path,
) -> None:
    registry = AgentRegistry()
    for agent in ("a", "b", "c"):
        registry.update(status(agent, "online"))
    mqtt_fleet = fleet(tmp_path, registry)

    begun = mqtt_fleet.begin_round(1, replay=True)  # nothing to replay: a fresh round
    registry.update(status("d", "online"))  # too late for this round
    registry.update(status("b", "offline"))

    assert begun == ["a", "b", "c"]
    assert mqtt_fleet.available() == ["a", "c"]


def test_a_replayed_round_keeps_its_agents_not_heard_from_since_the_restart(
    tmp_path: Path,
) -> None:
    # Prepare: round 3 was interrupted with a, b and c; after the restart only a's online
    # status and b's offline one have arrived so far
    RoundJournal(tmp_path).begin(3, ["a", "b", "c"])
    registry = AgentRegistry()
    registry.update(status("a", "online"))
    registry.update(status("b", "offline"))
    registry.update(status("d", "online"))
    mqtt_fleet = fleet(tmp_path, registry)

    # Execute
    begun = mqtt_fleet.begin_round(3, replay=True)
    replayed = mqtt_fleet.available()
    registry.update(status("c", "offline"))
    after_c_left = mqtt_fleet.available()
    mqtt_fleet.end_round()
    next_round = mqtt_fleet.begin_round(4, replay=True)

    # Assert
    assert begun == ["a", "b", "c"]
    assert replayed == ["a", "c"]  # c may simply not have been heard from yet
    assert after_c_left == ["a"]
    assert next_round == mqtt_fleet.available() == ["a", "d"]  # fresh again: online only


def test_an_update_claiming_more_samples_than_declared_is_refused_and_fails_its_task(
    tmp_path: Path,
) -> None:
    # Prepare: a and b declared 10 training windows; round 1 has one fit task for each
    registry = AgentRegistry()
    for agent in ("a", "b"):
        registry.update(status(agent, "online"))
    metrics_registry = CollectorRegistry()
    mqtt_fleet = fleet(tmp_path, registry, CoordinatorMetrics(metrics_registry))
    mqtt_fleet.begin_round(1, replay=False)
    start = np.zeros(10, dtype=np.float32)
    frames = mqtt_fleet.frames.fit(
        1, [FitTask(agent, {"global": start}, TrainConfig(), seed=1) for agent in ("a", "b")]
    )
    mqtt_fleet.answers._collection = Collection({p.task_id: p for p, _, _ in frames})
    (task_a, header_a, _), (task_b, header_b, _) = frames
    assert isinstance(header_a, FitTaskMessage)
    assert isinstance(header_b, FitTaskMessage)

    # Execute: a claims 10**12 samples, b its own 10
    mqtt_fleet.answers.on_answer(
        Topics().results("a"), fit_frame(header_a, start + 1, num_samples=10**12)
    )
    mqtt_fleet.answers.on_answer(
        Topics().results("b"), fit_frame(header_b, start + 1, num_samples=10)
    )

    # Assert
    refused = sample_value(
        metrics_registry, "faultfleet_updates_rejected_total", {"reason": "too_many_samples"}
    )
    assert refused == 1
    assert task_a.result is None
    assert task_a.failure is not None
    assert "claimed 1000000000000 training samples; it declared 10" in task_a.failure.reason
    assert task_b.failure is None  # accepted, on its way to the journal
    assert task_b.journaling or task_b.result is not None


# -- lifecycle: the fleet owns its answer collector's thread ------------------------------


def journal_writers() -> int:
    return sum(t.name == "round-journal" and t.is_alive() for t in threading.enumerate())


def test_building_a_fleet_starts_no_thread_and_it_refuses_rounds_until_started(
    tmp_path: Path,
) -> None:
    before = journal_writers()

    mqtt_fleet = fleet(tmp_path, AgentRegistry())

    assert journal_writers() == before
    with pytest.raises(RuntimeError, match=r"not started; call start\(\) first"):
        mqtt_fleet.fit(1, [])


def test_start_and_close_own_the_journal_writer_thread(tmp_path: Path) -> None:
    before = journal_writers()
    mqtt_fleet = fleet(tmp_path, AgentRegistry())

    mqtt_fleet.start()
    started = journal_writers()
    with pytest.raises(RuntimeError, match="started already"):
        mqtt_fleet.start()
    mqtt_fleet.close()

    assert (started, journal_writers()) == (before + 1, before)
    with pytest.raises(RuntimeError, match="not started"):
        mqtt_fleet.fit(1, [])


def test_the_fleet_is_a_context_manager_for_its_answers(tmp_path: Path) -> None:
    before = journal_writers()

    with fleet(tmp_path, AgentRegistry()) as mqtt_fleet:
        inside = journal_writers()
        outcome = mqtt_fleet.fit(1, [])  # no task: nothing to wait for

    assert (inside, journal_writers()) == (before + 1, before)
    assert (outcome.results, outcome.failures) == ((), ())


def test_dispatches_from_two_threads_run_one_after_the_other(tmp_path: Path) -> None:
    # Prepare: the collector's dispatch is replaced by one that holds the first caller
    mqtt_fleet = fleet(tmp_path, AgentRegistry())
    inside = 0
    most = 0
    entered = threading.Semaphore(0)
    release = threading.Event()
    lock = threading.Lock()

    def dispatch(frames: object, replay: object) -> tuple[list[object], int]:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        entered.release()
        release.wait(30)
        with lock:
            inside -= 1
        return [], 0

    mqtt_fleet.answers.dispatch = dispatch  # type: ignore[assignment,method-assign]
    threads = [threading.Thread(target=mqtt_fleet.evaluate, args=(1, [])) for _ in range(2)]

    # Execute: the second dispatch may not enter while the first is held
    for thread in threads:
        thread.start()
    assert entered.acquire(timeout=30)
    second_entered = entered.acquire(timeout=1.0)
    release.set()
    for thread in threads:
        thread.join(30)

    # Assert
    assert not second_entered
    assert most == 1


# -- a round's tasks wait for the broker ---------------------------------------------------


def _fit_frames(mqtt_fleet: MqttFleet, agents: tuple[str, ...]) -> list[Frame]:
    start = np.zeros(10, dtype=np.float32)
    tasks = [FitTask(agent, {"global": start}, TrainConfig(), seed=1) for agent in agents]
    return mqtt_fleet.frames.fit(1, tasks)


def test_tasks_beyond_the_backlog_the_broker_never_took_fail_as_not_sent(
    tmp_path: Path,
) -> None:
    # Prepare: no broker (the connection never starts, so nothing is acknowledged); a
    # budget of one byte and a deadline of 0.5 s for a round of three fit tasks
    registry = AgentRegistry()
    for agent in ("a", "b", "c"):
        registry.update(status(agent, "online"))
    mqtt_fleet = fleet(tmp_path, registry, deadline_s=0.5).start()
    mqtt_fleet.answers.max_backlog_bytes = 1
    mqtt_fleet.begin_round(1, replay=False)
    frames = _fit_frames(mqtt_fleet, ("a", "b", "c"))

    # Execute
    started = time.monotonic()
    collection, bytes_down = mqtt_fleet.answers.dispatch(frames, {})
    took_s = time.monotonic() - started
    mqtt_fleet.close()

    # Assert: a's task was sent (and waits in the client); b's waited for it until the
    # deadline; c's came after the deadline; none was answered
    reasons = {p.agent_id: p.failure.reason for p in collection if p.failure is not None}
    assert reasons["a"] == "no answer within the 0.5 s deadline"
    assert reasons["b"].startswith("task not sent: the broker did not take")
    assert reasons["c"] == reasons["b"]
    _, header, body = frames[0]
    assert bytes_down == len(encode_frame(header, body))  # a's task only
    assert 0.45 <= took_s < 5


def test_abort_ends_a_dispatch_waiting_for_the_broker(tmp_path: Path) -> None:
    # Prepare: no broker, a budget of one byte, a long deadline
    registry = AgentRegistry()
    for agent in ("a", "b"):
        registry.update(status(agent, "online"))
    mqtt_fleet = fleet(tmp_path, registry, deadline_s=600.0).start()
    mqtt_fleet.answers.max_backlog_bytes = 1
    mqtt_fleet.begin_round(1, replay=False)
    frames = _fit_frames(mqtt_fleet, ("a", "b"))
    outcome: list[str] = []

    def run_round() -> None:
        try:
            mqtt_fleet.answers.dispatch(frames, {})
            outcome.append("returned")
        except RoundAbortedError:
            outcome.append("aborted")

    round_thread = threading.Thread(target=run_round)
    round_thread.start()

    # Execute: the coordinator stops while the dispatch waits to send b's task
    time.sleep(0.3)
    started = time.monotonic()
    mqtt_fleet.abort()
    round_thread.join(30)
    took_s = time.monotonic() - started
    mqtt_fleet.close()

    # Assert: b's task was never sent (only a's waits in the client); the wait ended within
    # one slice of it
    _, header, body = frames[0]
    held = mqtt_fleet.answers.connection._sender.acknowledgements.pending_bytes()
    assert held == len(encode_frame(header, body))
    assert outcome == ["aborted"]
    assert took_s < 2


# -- answers are checked off the network thread --------------------------------------------


def test_an_update_that_arrived_before_its_agents_last_will_still_counts(
    tmp_path: Path,
) -> None:
    # Prepare: a started fleet with one open fit task for a
    registry = AgentRegistry()
    registry.update(status("a", "online"))
    mqtt_fleet = fleet(tmp_path, registry).start()
    start = np.zeros(10, dtype=np.float32)
    frames = mqtt_fleet.frames.fit(1, [FitTask("a", {"global": start}, TrainConfig(), seed=1)])
    mqtt_fleet.answers._collection = Collection({p.task_id: p for p, _, _ in frames})
    ((task, header, _),) = frames
    assert isinstance(header, FitTaskMessage)
    payload = fit_frame(header, start + 1)

    # Execute: the network thread hands over the update, then the agent's last will arrives
    mqtt_fleet.answers.receive(Topics().results("a"), payload)
    mqtt_fleet.agent_offline("a")
    mqtt_fleet.close()  # the workers finish what they hold, then the journal writer

    # Assert: accepted and journaled, its weights a view of the received message
    assert task.failure is None
    assert isinstance(task.result, FitResult)
    assert list(RoundJournal(tmp_path).accepted()) == [task.task_id]
    weights = task.result.weights
    assert np.shares_memory(weights, np.frombuffer(payload, dtype=np.uint8))
    np.testing.assert_array_equal(task.result.delta, np.ones(10, dtype=np.float32))


def test_the_last_will_fails_a_task_whose_update_never_came(tmp_path: Path) -> None:
    registry = AgentRegistry()
    registry.update(status("a", "online"))
    mqtt_fleet = fleet(tmp_path, registry).start()
    start = np.zeros(10, dtype=np.float32)
    frames = mqtt_fleet.frames.fit(1, [FitTask("a", {"global": start}, TrainConfig(), seed=1)])
    mqtt_fleet.answers._collection = Collection({p.task_id: p for p, _, _ in frames})

    mqtt_fleet.agent_offline("a")
    mqtt_fleet.close()

    ((task, _, _),) = frames
    assert task.result is None
    assert task.failure is not None
    assert task.failure.reason == "the agent went offline during the round"


def test_a_streamed_update_is_folded_once_journaled_and_not_kept(tmp_path: Path) -> None:
    # Prepare: a started fleet with open fit tasks for a and b, a stream for the round
    registry = AgentRegistry()
    for agent in ("a", "b"):
        registry.update(status(agent, "online"))
    mqtt_fleet = fleet(tmp_path, registry).start()
    start = np.zeros(10, dtype=np.float32)
    tasks = [FitTask(agent, {"global": start}, TrainConfig(), seed=1) for agent in ("a", "b")]
    frames = mqtt_fleet.frames.fit(1, tasks)
    mqtt_fleet.answers._collection = Collection({p.task_id: p for p, _, _ in frames})
    stream = UpdateStream(1, {"global": start}, AggregationPolicy(), {})
    mqtt_fleet.answers.stream = stream

    # Execute: both answer; the workers and the journal writer finish
    for (_, header, _), value in zip(frames, (1.0, 3.0), strict=True):
        assert isinstance(header, FitTaskMessage)
        mqtt_fleet.answers.receive(
            Topics().results(header.agent_id), fit_frame(header, start + value)
        )
    mqtt_fleet.close()

    # Assert: folded (sample-weighted mean of 1 and 3 with 10 samples each), nothing kept
    assert all(p.streamed and p.result is None and p.done for p, _, _ in frames)
    assert {u.client_id for u in stream.updates()} == {"a", "b"}
    np.testing.assert_allclose(stream.average("global"), np.full(10, 2.0))
    assert len(RoundJournal(tmp_path).accepted()) == 2


class RefusingProbe:
    """A probe stream that takes every answer except ``refused``'s."""

    def __init__(self, refused: str) -> None:
        self.refused = refused
        self.taken: list[GradientResult] = []

    def add(self, result: GradientResult) -> None:
        if result.client_id == self.refused:
            raise ValueError("answered for the wrong models")
        self.taken.append(result)

    def answered(self) -> frozenset[str]:
        return frozenset(r.client_id for r in self.taken)


def test_a_streamed_probe_answer_is_handed_over_and_not_kept_or_fails_if_refused(
    tmp_path: Path,
) -> None:
    # Prepare: a started fleet with open gradient tasks for a and b; the stream refuses b
    registry = AgentRegistry()
    for agent in ("a", "b"):
        registry.update(status(agent, "online"))
    mqtt_fleet = fleet(tmp_path, registry).start()
    models = {"cluster-0": np.zeros(10, dtype=np.float32)}
    frames = mqtt_fleet.frames.gradients(
        1, [GradientTask(agent, models, 8, seed=1) for agent in ("a", "b")]
    )
    mqtt_fleet.answers._collection = Collection({p.task_id: p for p, _, _ in frames})
    stream = RefusingProbe("b")
    mqtt_fleet.answers.probe_stream = stream

    # Execute: both answer; the workers finish
    for _, header, _ in frames:
        assert isinstance(header, GradientTaskMessage)
        gradient = np.full(10, 2.0, dtype=np.float32)
        mqtt_fleet.answers.receive(
            Topics().results(header.agent_id), gradient_frame(header, {"cluster-0": gradient})
        )
    mqtt_fleet.close()

    # Assert: a's answer handed over and not kept, b's task failed with the stream's reason
    (task_a, _, _), (task_b, _, _) = frames
    assert stream.answered() == frozenset({"a"})
    np.testing.assert_array_equal(stream.taken[0].gradients["cluster-0"], np.full(10, 2.0))
    assert task_a.streamed
    assert task_a.result is None
    assert task_a.failure is None
    assert task_b.failure is not None
    assert task_b.result is None
    assert "its probe answer was refused: answered for the wrong models" in task_b.failure.reason
    assert RoundJournal(tmp_path).accepted() == {}  # probes are never journaled


class GatedJournal(RoundJournal):
    """A round journal whose writes wait until :attr:`gate` is set (a slow disk)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.gate = threading.Event()

    def record_many(self, entries: Sequence[tuple[str, str, bytes]]) -> None:
        assert self.gate.wait(10), "the test never opened the journal's gate"
        super().record_many(entries)


def test_the_network_thread_waits_while_the_answers_held_fill_the_budget(
    tmp_path: Path,
) -> None:
    # Prepare: four open fit tasks, a journal that writes nothing until its gate opens,
    # and a budget of two updates
    registry = AgentRegistry()
    for agent in CLIENTS:
        registry.update(status(agent, "online"))
    metrics = CoordinatorMetrics(CollectorRegistry())
    mqtt_fleet = fleet(tmp_path, registry, metrics=metrics)
    journal = GatedJournal(tmp_path)
    mqtt_fleet.answers.journal = journal
    mqtt_fleet.answers._writer.journal = journal
    start = np.zeros(10, dtype=np.float32)
    frames = mqtt_fleet.frames.fit(
        1, [FitTask(agent, {"global": start}, TrainConfig(), seed=1) for agent in CLIENTS]
    )
    mqtt_fleet.answers._collection = Collection({p.task_id: p for p, _, _ in frames})
    payloads = []
    for _, header, _ in frames:
        assert isinstance(header, FitTaskMessage)
        payloads.append((Topics().results(header.agent_id), fit_frame(header, start + 1)))
    size = len(payloads[0][1])
    mqtt_fleet.answers.held = ByteBudget(2 * size)
    mqtt_fleet.start()
    received: list[str] = []

    def network_thread() -> None:
        for topic, payload in payloads:
            mqtt_fleet.answers.receive(topic, payload)
            received.append(topic)

    # Execute: the network thread hands over the four updates while the disk is stuck
    receiver = threading.Thread(target=network_thread)
    receiver.start()
    deadline = time.monotonic() + 5
    while len(received) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # time enough to take a third, were it let through
    while_stuck = (len(received), mqtt_fleet.answers.held.held)
    gauge_while_stuck = metrics.registry.get_sample_value("faultfleet_answers_held_bytes")
    journal.gate.set()
    receiver.join(10)
    mqtt_fleet.close()

    # Assert: two updates held while the journal was stuck, the third waited for room;
    # every update journaled and counted in the end, nothing held
    assert while_stuck == (2, 2 * size)
    assert gauge_while_stuck == 2 * size
    waited = metrics.registry.get_sample_value("faultfleet_answers_backpressure_seconds_total")
    assert waited is not None
    assert waited >= 0.2
    assert len(received) == 4
    assert all(isinstance(p.result, FitResult) for p, _, _ in frames)
    assert len(RoundJournal(tmp_path).accepted()) == 4
    assert mqtt_fleet.answers.held.held == 0
    assert mqtt_fleet.answers.held.peak == 2 * size


def test_refused_and_duplicate_answers_give_back_the_bytes_they_held(tmp_path: Path) -> None:
    registry = AgentRegistry()
    registry.update(status("a", "online"))
    metrics = CoordinatorMetrics(CollectorRegistry())
    mqtt_fleet = fleet(tmp_path, registry, metrics=metrics).start()
    start = np.zeros(10, dtype=np.float32)
    frames = mqtt_fleet.frames.fit(1, [FitTask("a", {"global": start}, TrainConfig(), seed=1)])
    mqtt_fleet.answers._collection = Collection({p.task_id: p for p, _, _ in frames})
    ((task, header, _),) = frames
    assert isinstance(header, FitTaskMessage)
    update = fit_frame(header, start + 1)

    mqtt_fleet.answers.receive(Topics().results("a"), b"not a frame")
    mqtt_fleet.answers.receive(Topics().results("a"), update)
    mqtt_fleet.answers.receive(Topics().results("a"), update)  # QoS 1 delivered it twice
    mqtt_fleet.close()

    assert isinstance(task.result, FitResult)
    assert mqtt_fleet.answers.held.held == 0
    assert mqtt_fleet.answers.held.peak >= len(update)
    rejected = metrics.registry.get_sample_value
    assert rejected("faultfleet_updates_rejected_total", {"reason": "duplicate"}) == 1


# -- unanswered tasks sent again -----------------------------------------------------------


class NumberedConnection(MqttConnection):
    """A connection never started that keeps the topics published to; which broker
    connection it is on (:attr:`number`) is set by the test."""

    def __init__(self) -> None:
        super().__init__(client_id="never-started", settings=BrokerSettings())
        self.number = 1
        self.published: list[str] = []

    @property
    def connection_number(self) -> int:
        return self.number

    def outgoing_connection(self) -> int:
        return self.number

    def publish(self, topic: str, payload: bytes | str, **_: object) -> int:
        self.published.append(topic)
        return len(payload)


def test_a_retained_status_sends_again_only_the_tasks_of_earlier_connections(
    tmp_path: Path,
) -> None:
    # Prepare: a's fit task of round 1 is sent on connection 1 and never answered
    registry = AgentRegistry()
    registry.update(status("a", "online"))
    connection = NumberedConnection()
    mqtt_fleet = fleet(tmp_path, registry, connection=connection).start()
    mqtt_fleet.begin_round(1, replay=False)
    frames = mqtt_fleet.frames.fit(
        1, [FitTask("a", {"global": np.zeros(10, dtype=np.float32)}, TrainConfig(), seed=1)]
    )
    aborted: list[bool] = []

    def run_round() -> None:
        try:
            mqtt_fleet.answers.dispatch(frames, {})
        except RoundAbortedError:
            aborted.append(True)

    round_thread = threading.Thread(target=run_round)
    round_thread.start()
    sent = Topics().tasks("a")
    deadline = time.monotonic() + 30
    while connection.published != [sent] and time.monotonic() < deadline:
        time.sleep(0.01)
    answers = mqtt_fleet.answers
    counts: list[int] = []

    # Execute: the retained status delivered on subscribing (connection 1); a's own new
    # status; a reconnection (connection 2) and the retained status again, twice
    for retained, number in ((True, 1), (False, 1), (True, 2), (True, 2)):
        connection.number = number
        answers.resend("a", retained=retained)
        done = threading.Event()
        answers._workers.call("a", done.set)  # after the resend on a's worker thread
        assert done.wait(30)
        counts.append(len(connection.published))
    mqtt_fleet.abort()
    round_thread.join(30)
    mqtt_fleet.close()

    # Assert: sent once, then again for the agent's own status and once after the reconnection
    assert counts == [1, 2, 3, 3]
    assert connection.published == [sent] * 3
    assert aborted == [True]
