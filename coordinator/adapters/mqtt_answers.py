"""Collecting the agents' answers to the tasks of a round over MQTT.

:class:`AnswerCollector` publishes a round's task frames and waits until every task is
answered or failed, or the round deadline passes;
:class:`~coordinator.adapters.mqtt_fleet.MqttFleet` holds one and sends every kind of task
through it. Answers are validated (:mod:`faultfleet.wire.codec`) off the network thread: a
malformed, oversized, wrong-shape or non-finite update is rejected and counted by reason, a
second answer for the same task is ignored (QoS 1 may deliver twice), and an answer after
its round closed is counted late. An update that claims more training samples than its
agent declared when it came online is refused (``too_many_samples``) and fails its task at
once: the sample count is the update's weight in the average. Every accepted update goes to the
:class:`~coordinator.adapters.journal.RoundJournal` (in batches, in a writer thread,
:mod:`coordinator.adapters.journal_writer`) before it counts, so a restarted coordinator
loses none; probes and evaluations are not journaled.

The network thread only queues each answer: a few worker threads
(:mod:`coordinator.adapters.answer_workers`, one per agent's messages so each agent's stay
in order) check and decode it, so the network thread keeps reading at the broker's pace.
An accepted update holds no copy of its weights: they are a view of the received message
(which the journal writes as it is), and the update Δθ is derived when a strategy reads it.

An agent that goes offline mid-round (its last will) fails its open tasks at once; one that
just never answers fails at the deadline. One whose ``online`` status arrives mid-round gets
its unanswered tasks again (:meth:`AnswerCollector.resend`): the broker may have lost them,
or the answers, when it restarted — the agent reconnecting announces itself again, and a
reconnecting coordinator receives every retained status anew. The agent answers a repeated
task once (:mod:`edge_agent.task_worker`); a second answer is ignored as a duplicate.

With ingest workers (:mod:`coordinator.adapters.ingest_fleet`) the collector leaves the
results topic to them: they forward every other answer to :meth:`AnswerCollector.receive`,
and their summaries settle fit tasks (:meth:`AnswerCollector.settle_streamed`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from coordinator.adapters.answer_workers import AnswerWorkers
from coordinator.adapters.journal import RoundJournal
from coordinator.adapters.journal_writer import JournalWriter, write_entry
from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.mqtt_probes import answer_result
from coordinator.adapters.round_tasks import (
    ClosedTasks,
    Collection,
    Pending,
    RoundAbortedError,
    Write,
    excess_samples,
)
from coordinator.adapters.task_frames import Frame
from coordinator.adapters.task_resend import send_again
from coordinator.strategies.streaming import UpdateStream
from faultfleet.clock import SYSTEM_CLOCK, Clock
from faultfleet.tasks import Failure, FitResult
from faultfleet.wire.codec import (
    RejectReason,
    WireError,
    encode_frame,
    parse_envelope,
    split_frame_view,
)
from faultfleet.wire.messages import ANSWER_ADAPTER, AnyTaskMessage, TaskFailedMessage
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.topics import Topics

logger = logging.getLogger(__name__)


class AnswerCollector:
    """The open tasks of a round and the agents' answers to them.

    Parameters
    ----------
    connection : MqttConnection
        Connected (or connecting) to the broker; the collector routes
        ``agents/+/results`` to its workers, which call :meth:`on_answer`.
    topics : Topics
    run_id : str
        Answers of another run are rejected as unknown tasks.
    n_params : int
        Flat length of the weights an update or gradient must have.
    deadline_s : float
        How long a round waits for answers, seconds.
    journal : RoundJournal
    metrics : CoordinatorMetrics
    max_payload_bytes : int
        Larger answers are rejected as oversized.
    round_clock : Clock
        Measures the round deadline and waits for answers; the system clock by default.
    clock : callable
        Unix time in seconds: the ``issued_at`` of a task sent again.
    declared_samples : callable, optional
        ``declared_samples(agent_id)``: the training windows the agent declared; an update
        may claim no more. None: no bound.
    check_threads : int
        Threads that check and decode answers off the network thread (>= 1).

    Nothing runs until :meth:`start`.
    """

    def __init__(
        self,
        connection: MqttConnection,
        topics: Topics,
        *,
        run_id: str,
        n_params: int,
        deadline_s: float,
        journal: RoundJournal,
        metrics: CoordinatorMetrics,
        max_payload_bytes: int,
        round_clock: Clock = SYSTEM_CLOCK,
        clock: Callable[[], float] = time.time,
        declared_samples: Callable[[str], int] | None = None,
        check_threads: int = 2,
    ) -> None:
        self.connection = connection
        self.declared_samples = declared_samples
        self.topics = topics
        self.run_id = run_id
        self.n_params = n_params
        self.deadline_s = deadline_s
        self.journal = journal
        self.metrics = metrics
        self.max_payload_bytes = max_payload_bytes
        self.round_clock = round_clock
        self.clock = clock
        self._lock = threading.Lock()
        self._answered = threading.Condition(self._lock)
        self._collection = Collection()
        self._sent: dict[str, tuple[AnyTaskMessage, bytes]] = {}
        """Header and body of every task of the round in flight that was published."""
        self._closed = ClosedTasks()
        self._aborted = False
        self._reopened: set[str] = set()
        """Streamed tasks of the round in flight taken back by :meth:`reopen`."""
        self._writer = JournalWriter(
            journal, written=self._settle, failed=self._unwritten, entry=write_entry
        )
        self.stream: UpdateStream | None = None
        """Where updates go instead of their tasks' results (set per round by the fleet)."""
        self._workers = AnswerWorkers(check_threads, name="answer-check")

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, *, results: bool = True) -> None:
        """Take answers: route ``agents/+/results`` here (unless ``results`` is False: ingest
        workers take that topic and forward the answers to :meth:`receive`), start the
        worker threads that check them and the journal writer thread.

        Raises
        ------
        RuntimeError
            Started already.
        """
        self._writer.start()
        self._workers.start()
        if results:
            self.connection.route(self.topics.all_results(), self.receive)

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the checking threads, then the journal writer, once each is done with what
        it holds (waiting at most ``timeout_s`` seconds each)."""
        self._workers.close(timeout_s)
        self._writer.close(timeout_s)

    # -- a round's tasks -------------------------------------------------------------------

    def dispatch(
        self,
        frames: Sequence[Frame],
        replay: Mapping[str, bytes],
    ) -> tuple[list[Pending], int]:
        """Publish ``frames`` and wait for their answers, at most ``deadline_s`` seconds.

        Answers found in ``replay`` (task id → answer frame) are taken instead of sending
        their tasks again. Returns every task's bookkeeping entry, answered or failed, and
        the bytes published.

        Raises
        ------
        RuntimeError
            The collector is not started (:meth:`start`).
        RoundAbortedError
            :meth:`abort` was called.
        """
        if not self._writer.running:
            raise RuntimeError("the answer collector is not started; call start() first")
        deadline = self.round_clock.monotonic() + self.deadline_s
        with self._lock:
            self._collection = Collection({p.task_id: p for p, _, _ in frames})
            self._reopened = set()
        bytes_down = 0
        for pending, header, body in frames:
            saved = replay.get(pending.task_id)
            if saved is not None:
                self.on_answer(self.topics.results(pending.agent_id), saved, journal=False)
                if pending.done:
                    continue
            payload = encode_frame(header, body)
            with self._lock:
                self._sent[pending.task_id] = (header, body)
            try:
                bytes_down += self.connection.publish(self.topics.tasks(pending.agent_id), payload)
            except (ValueError, RuntimeError) as error:
                self.fail(pending.task_id, f"task could not be sent: {error}")
        self.metrics.payload_sent_bytes.inc(bytes_down)
        with self._answered:
            while not (self._aborted or self._collection.finished()):
                remaining_s = deadline - self.round_clock.monotonic()
                if remaining_s <= 0:
                    break
                self.round_clock.wait(self._answered, remaining_s)
            if self._aborted:
                self._collection = Collection()
                self._sent = {}
                raise RoundAbortedError("the coordinator is stopping; the round was abandoned")
            # Updates that arrived in time but are still being journaled count for the round.
            self._answered.wait_for(lambda: not self._collection.writing(), timeout=60.0)
            collection = list(self._collection.pending.values())
            for pending in collection:
                if not pending.done:
                    pending.failure = Failure(
                        pending.agent_id, f"no answer within the {self.deadline_s:g} s deadline"
                    )
                self._closed.add(pending.task_id)
            self._collection = Collection()
            self._sent = {}
        return collection, bytes_down

    def waiting_for(self) -> list[str]:
        """Agents with a task of the round in flight still unanswered; empty between rounds."""
        with self._lock:
            return sorted({p.agent_id for p in self._collection.pending.values() if not p.done})

    def abort(self) -> None:
        """Stop waiting: the round in progress (and any later one) raises RoundAbortedError;
        accepted updates stay in the journal, so a restarted coordinator replays the round."""
        with self._answered:
            self._aborted = True
            self._answered.notify_all()

    def resend(self, agent_id: str) -> None:
        """Publish again the tasks of ``agent_id`` in the round in flight still unanswered.

        Called when the agent's ``online`` status arrives (network thread): after a broker
        restart the tasks, or their answers, may be lost. Each goes out unchanged but for
        its ``issued_at``, so its task id is the same. It runs on the agent's worker
        thread, after the answers that arrived before the status.
        """
        self._workers.call(agent_id, lambda: self._resend(agent_id))

    def _resend(self, agent_id: str) -> None:
        with self._lock:
            unanswered = self._collection.unanswered(agent_id)
            frames = [self._sent[p.task_id] for p in unanswered if p.task_id in self._sent]
        send_again(self.connection, self.topics.tasks(agent_id), frames, self.clock, self.metrics)

    def agent_offline(self, agent_id: str) -> None:
        """Fail the open tasks of an agent that went offline, so the round need not wait.

        Runs on the agent's worker thread, after the answers that arrived before its last
        will: an update sent just before the agent vanished still counts.
        """
        self._workers.call(agent_id, lambda: self._fail_agent(agent_id))

    def _fail_agent(self, agent_id: str) -> None:
        with self._answered:
            for pending in self._collection.unanswered(agent_id):
                pending.failure = Failure(agent_id, "the agent went offline during the round")
            self._answered.notify_all()

    def fail(self, tid: str, reason: str) -> None:
        """Fail task ``tid`` of the round in flight, unless it is settled or journaling."""
        with self._answered:
            pending = self._collection.pending.get(tid)
            if pending is not None and not pending.done and not pending.journaling:
                pending.failure = Failure(pending.agent_id, reason)
            self._answered.notify_all()

    def receive(self, topic: str, payload: bytes) -> None:
        """Network thread: queue a message on ``agents/+/results`` for the worker of its
        agent (waits while that worker's queue is full)."""
        agent = self.topics.agent_of(topic) or topic
        self._workers.call(agent, lambda: self.on_answer(topic, payload))

    def on_answer(self, topic: str, payload: bytes, *, journal: bool = True) -> None:
        """Check one message on ``agents/+/results`` and take its answer (worker thread).

        ``journal=False`` replays an update already in the journal (after a restart): it is
        neither written again nor counted as traffic.
        """
        if journal:
            self.metrics.payload_received_bytes.inc(len(payload))
        try:
            self._accept(topic, payload, journal=journal)
        except WireError as error:
            self.metrics.reject(error.reason)
            log = (
                logger.info
                if error.reason in (RejectReason.LATE, RejectReason.DUPLICATE)
                else logger.warning
            )
            log("rejected message on %s (%s): %s", topic, error.reason, error)

    def _accept(self, topic: str, payload: bytes, *, journal: bool) -> None:
        header, body = split_frame_view(payload, max_bytes=self.max_payload_bytes)
        answer = parse_envelope(ANSWER_ADAPTER, header)
        if self.topics.agent_of(topic) != answer.agent_id:
            raise WireError(
                RejectReason.UNKNOWN_TASK,
                f"answer of agent {answer.agent_id!r} arrived on another agent's topic {topic}",
            )
        pending = self.open_task(answer.task_id, answer.agent_id, answer.run_id)
        if isinstance(answer, TaskFailedMessage):
            self.fail(pending.task_id, f"agent reported: {answer.reason}")
            return
        result = answer_result(
            pending, answer, body, n_params=self.n_params, max_bytes=self.max_payload_bytes
        )
        if journal and isinstance(result, FitResult) and self.declared_samples is not None:
            # Updates replayed from the journal were checked when they arrived.
            problem = excess_samples(result, self.declared_samples(result.client_id))
            if problem is not None:
                self.fail(pending.task_id, problem.agent_reason)
                raise problem.error(pending.task_id)
        with self._answered:
            if self._collection.pending.get(pending.task_id) is not pending:
                raise WireError(
                    RejectReason.LATE, f"task {answer.task_id} closed while it was being checked"
                )
            if pending.done or pending.journaling:
                raise WireError(RejectReason.DUPLICATE, f"task {answer.task_id} already answered")
            if journal and isinstance(result, FitResult):
                pending.journaling = True
        if pending.journaling:
            self._writer.put(Write(pending, result, payload))
        else:
            self._settle([Write(pending, result, payload)])

    def _unwritten(self, writes: Sequence[Write]) -> None:
        """Writer thread: fail the tasks of updates the journal could not write."""
        with self._answered:
            for write in writes:
                write.pending.journaling = False
                write.pending.failure = Failure(
                    write.pending.agent_id, "its update could not be journaled"
                )
            self._answered.notify_all()

    def _settle(self, writes: Sequence[Write]) -> None:
        """Count journaled (or replayed) answers; with a stream, fold updates into it
        instead of keeping them, so their weights (and messages) are freed at once."""
        stream = self.stream
        for write in writes:
            if stream is not None and isinstance(write.result, FitResult):
                try:
                    stream.add(write.result)
                except ValueError as error:
                    self.fail(write.pending.task_id, f"its update could not be folded: {error}")
                    continue
                write.pending.streamed = True
        with self._answered:
            for write in writes:
                if not write.pending.streamed and write.pending.failure is None:
                    write.pending.result = write.result
                write.pending.bytes_up = len(write.payload)
            self._answered.notify_all()
        fits = sum(isinstance(w.result, FitResult) for w in writes)
        if fits:
            self.metrics.updates_received.inc(fits)

    def settle_streamed(self, pending: Pending) -> bool:
        """Count ``pending`` as answered by an update folded elsewhere (an ingest worker's,
        :mod:`coordinator.adapters.ingest_fleet`); False when it closed or was settled.
        A task settled again after :meth:`reopen` is counted received once."""
        with self._answered:
            if self._collection.pending.get(pending.task_id) is not pending or pending.done:
                return False
            pending.streamed = True
            first = pending.task_id not in self._reopened
            self._answered.notify_all()
        if first:
            self.metrics.updates_received.inc()
        return True

    def reopen(self, tids: Sequence[str]) -> list[str]:
        """Take back the settlement of the streamed tasks ``tids`` of the round in flight
        (the ingest worker that folded their updates is gone): they wait for an answer
        again. Returns the agents of the tasks reopened."""
        with self._answered:
            agents = []
            for tid in tids:
                pending = self._collection.pending.get(tid)
                if pending is not None and pending.streamed:
                    pending.streamed = False
                    self._reopened.add(tid)
                    agents.append(pending.agent_id)
            return agents

    def open_task(self, tid: str, agent_id: str, run_id: str) -> Pending:
        """The open task ``tid`` of ``agent_id``; a WireError (duplicate, late, unknown)
        for any other."""
        with self._lock:
            pending = self._collection.pending.get(tid)
            if pending is not None and pending.agent_id == agent_id:
                if pending.done or pending.journaling:
                    raise WireError(RejectReason.DUPLICATE, f"task {tid} already answered")
                return pending
            if tid in self._closed:
                raise WireError(
                    RejectReason.LATE, f"task {tid} of {agent_id} closed before it arrived"
                )
        reason = "another run" if run_id != self.run_id else "no open task"
        raise WireError(RejectReason.UNKNOWN_TASK, f"task {tid} of {agent_id} belongs to {reason}")
