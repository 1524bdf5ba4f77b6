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
reconnecting coordinator receives every retained status anew (which sends again only the
tasks that left on an earlier connection of the coordinator). The agent answers a repeated
task once (:mod:`edge_agent.task_worker`); a second answer is ignored as a duplicate.

With ingest workers (:mod:`coordinator.adapters.ingest_fleet`) the collector leaves the
results topic to them: they forward every other answer to :meth:`AnswerCollector.receive`,
and their summaries settle fit tasks (:meth:`AnswerCollector.settle_streamed`). What
becomes of each task of the round, under one lock, is :mod:`coordinator.adapters.open_tasks`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial

from coordinator.adapters.answer_workers import AnswerWorkers
from coordinator.adapters.byte_budget import ANSWER_BUDGET_BYTES, ByteBudget
from coordinator.adapters.journal import RoundJournal
from coordinator.adapters.journal_writer import JournalWriter, write_entry
from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.mqtt_probes import answer_result
from coordinator.adapters.open_tasks import OpenTasks
from coordinator.adapters.round_tasks import Pending, Write, excess_samples
from coordinator.adapters.task_frames import Frame
from coordinator.adapters.task_resend import send_again
from coordinator.strategies.probe_streaming import GradientStream
from coordinator.strategies.streaming import UpdateStream
from faultfleet.clock import SYSTEM_CLOCK, Clock
from faultfleet.tasks import FitResult, GradientResult
from faultfleet.wire.codec import (
    RejectReason,
    WireError,
    encode_frame,
    parse_envelope,
    split_frame_view,
)
from faultfleet.wire.messages import ANSWER_ADAPTER, TaskFailedMessage
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.topics import Topics

logger = logging.getLogger(__name__)

DISPATCH_BACKLOG_BYTES = 64 * 1024 * 1024
"""Tasks the coordinator holds for the broker at once (sent, not acknowledged), in bytes.

Without a bound, a round's tasks all wait in paho until the broker takes them: 2,500 tasks
of the 17.6 MB ``paper`` model would hold 44 GB. With it, :meth:`AnswerCollector.dispatch`
sends the next task once the backlog is below the bound, and a round's dispatch holds about
this much plus one task, whatever the fleet's size, and is no slower
(``benchmarks/bench_dispatch.py``)."""
BACKLOG_SLICE_S = 0.5
"""Longest single wait for the broker's acknowledgements while dispatching, seconds."""


class AnswerCollector(OpenTasks):
    """The open tasks of a round (:class:`~.open_tasks.OpenTasks`) and the agents' answers.

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
    max_backlog_bytes : int
        Bytes of tasks sent and not yet acknowledged by the broker before :meth:`dispatch`
        waits to send the next one (:data:`DISPATCH_BACKLOG_BYTES` by default).
    max_held_bytes : int
        Bytes of received answers held between :meth:`receive` and being refused or
        journaled, before the network thread waits to take the next one
        (:data:`~coordinator.adapters.byte_budget.ANSWER_BUDGET_BYTES` by default).

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
        max_backlog_bytes: int = DISPATCH_BACKLOG_BYTES,
        max_held_bytes: int = ANSWER_BUDGET_BYTES,
    ) -> None:
        super().__init__(
            run_id=run_id, deadline_s=deadline_s, metrics=metrics, round_clock=round_clock
        )
        self.connection = connection
        self.max_backlog_bytes = max_backlog_bytes
        self.declared_samples = declared_samples
        self.topics = topics
        self.n_params = n_params
        self.journal = journal
        self.max_payload_bytes = max_payload_bytes
        self.clock = clock
        self.held = ByteBudget(max_held_bytes)
        """The received answers' bytes not yet refused or journaled (:meth:`receive`)."""
        metrics.answers_held_bytes.set_function(lambda: float(self.held.held))
        self._writer = JournalWriter(
            journal, written=self._journaled, failed=self._not_journaled, entry=write_entry
        )
        self.stream: UpdateStream | None = None
        """Where updates go instead of their tasks' results (set per round by the fleet)."""
        self.probe_stream: GradientStream | None = None
        """Where gradient probe answers go instead of their tasks' results (set per probe
        step by the fleet)."""
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
        self._open_round([p for p, _, _ in frames])
        bytes_down = 0
        for pending, header, body in frames:
            saved = replay.get(pending.task_id)
            if saved is not None:
                self.on_answer(self.topics.results(pending.agent_id), saved, journal=False)
                if pending.done:
                    continue
            if not self._backlog_drained(deadline):
                self.fail(
                    pending.task_id,
                    "task not sent: the broker did not take the round's earlier tasks within "
                    f"the {self.deadline_s:g} s deadline",
                )
                continue
            payload = encode_frame(header, body)
            outgoing = self.connection.outgoing_connection()
            with self._lock:
                self._sent[pending.task_id] = (header, body)
                self._sent_on[pending.task_id] = outgoing
            try:
                bytes_down += self.connection.publish(self.topics.tasks(pending.agent_id), payload)
            except (ValueError, RuntimeError) as error:
                self.fail(pending.task_id, f"task could not be sent: {error}")
        self.metrics.payload_sent_bytes.inc(bytes_down)
        return self._close_round(deadline), bytes_down

    def _backlog_drained(self, deadline: float) -> bool:
        """Wait until the tasks sent and not yet acknowledged by the broker are within
        :attr:`max_backlog_bytes`; False once ``deadline`` (on ``round_clock``) passes
        first. Waits in slices of at most :data:`BACKLOG_SLICE_S`, so that :meth:`abort`
        ends it too (the round then raises RoundAbortedError when it closes)."""
        while not self._aborted:
            left_s = deadline - self.round_clock.monotonic()
            slice_s = min(max(left_s, 0.0), BACKLOG_SLICE_S)
            if self.connection.wait_backlog(self.max_backlog_bytes, slice_s):
                return True
            if left_s <= slice_s:
                return False
        return False

    def resend(self, agent_id: str, *, retained: bool = False) -> None:
        """Publish again the tasks of ``agent_id`` in the round in flight still unanswered.

        Called when the agent's ``online`` status arrives (network thread): after a broker
        restart the tasks, or their answers, may be lost. Each goes out unchanged but for
        its ``issued_at``, so its task id is the same. It runs on the agent's worker
        thread, after the answers that arrived before the status.

        ``retained``: the status is the retained one the broker delivered because this
        coordinator subscribed (at every connection), not an agent announcing itself
        again. Only the tasks that left on an earlier connection go out again then: the
        agent was online before this connection, so those sent on it reach it (QoS 1), and
        a coordinator that resumed a round after a restart, and sent the unanswered tasks
        before the retained statuses were read, sends none twice.
        """
        received_on = self.connection.connection_number if retained else None
        self._workers.call(agent_id, lambda: self._resend(agent_id, received_on))

    def _resend(self, agent_id: str, retained_on: int | None) -> None:
        """Send again ``agent_id``'s unanswered tasks; with ``retained_on``, the number of
        the connection that delivered a retained status, only those sent before it."""
        outgoing = self.connection.outgoing_connection()
        with self._lock:
            unanswered = self._collection.unanswered(agent_id)
            ids = [
                p.task_id
                for p in unanswered
                if p.task_id in self._sent
                and (retained_on is None or self._sent_on.get(p.task_id, 0) < retained_on)
            ]
            frames = [self._sent[i] for i in ids]
            for task_id in ids:
                self._sent_on[task_id] = outgoing
        send_again(self.connection, self.topics.tasks(agent_id), frames, self.clock, self.metrics)

    def agent_offline(self, agent_id: str) -> None:
        """Fail the open tasks of an agent that went offline, so the round need not wait.

        Runs on the agent's worker thread, after the answers that arrived before its last
        will: an update sent just before the agent vanished still counts.
        """
        self._workers.call(agent_id, lambda: self._fail_agent(agent_id))

    def receive(self, topic: str, payload: bytes) -> None:
        """Network thread: queue a message on ``agents/+/results`` for the worker of its
        agent (waits while that worker's queue is full, or while the answers held would go
        over :attr:`held`'s budget). The message's bytes are held until it is refused, or
        journaled and taken."""
        agent = self.topics.agent_of(topic) or topic
        waited = self.held.take_waiting(len(payload))  # while full: wait for the journal
        if waited:
            self.metrics.answers_backpressure_seconds.inc(waited)
        self._workers.call(agent, lambda: self._check_held(topic, payload))

    def _check_held(self, topic: str, payload: bytes) -> None:
        """:meth:`on_answer` for a message :meth:`receive` holds; gives its bytes back
        unless the journal writer took it (which gives them back once it is written)."""
        journaling = False
        try:
            journaling = self._check(topic, payload, journal=True, held=True)
        finally:
            if not journaling:
                self.held.give_back(len(payload))

    def on_answer(self, topic: str, payload: bytes, *, journal: bool = True) -> None:
        """Check one message on ``agents/+/results`` and take its answer (worker thread).

        ``journal=False`` replays an update already in the journal (after a restart): it is
        neither written again nor counted as traffic.
        """
        self._check(topic, payload, journal=journal, held=False)

    def _check(self, topic: str, payload: bytes, *, journal: bool, held: bool) -> bool:
        """:meth:`on_answer`; ``held``: the payload's bytes are held in :attr:`held`. True
        when the message went to the journal writer (which gives them back)."""
        if journal:
            self.metrics.payload_received_bytes.inc(len(payload))
        try:
            return self._accept(topic, payload, journal=journal, held=held)
        except WireError as error:
            self.metrics.reject(error.reason)
            log = (
                logger.info
                if error.reason in (RejectReason.LATE, RejectReason.DUPLICATE)
                else logger.warning
            )
            log("rejected message on %s (%s): %s", topic, error.reason, error)
            return False

    def _accept(self, topic: str, payload: bytes, *, journal: bool, held: bool) -> bool:
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
            return False
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
            self._writer.put(Write(pending, result, payload, held))
            return True
        self._settle([Write(pending, result, payload)])
        return False

    def _journaled(self, writes: Sequence[Write]) -> None:
        """Writer thread: take the journaled updates, then give back the bytes they held."""
        try:
            self._settle(writes)
        finally:
            self._give_back(writes)

    def _not_journaled(self, writes: Sequence[Write]) -> None:
        """Writer thread: fail the updates the journal could not write; give back their
        bytes."""
        try:
            self._unwritten(writes)
        finally:
            self._give_back(writes)

    def _give_back(self, writes: Sequence[Write]) -> None:
        self.held.give_back(sum(len(w.payload) for w in writes if w.held))

    def _hand_over(self, write: Write, add: Callable[[], object], refusal: str) -> None:
        """``add()`` the answer of ``write`` to its stream and mark it streamed, or fail its
        task with ``refusal`` and the stream's reason."""
        try:
            add()
        except ValueError as error:
            self.fail(write.pending.task_id, f"{refusal}: {error}")
            return
        write.pending.streamed = True

    def _settle(self, writes: Sequence[Write]) -> None:
        """Count journaled (or replayed) answers; with a stream, fold updates (with a probe
        stream, hand gradient answers) into it instead of keeping them, so their weights
        (and messages) are freed at once."""
        stream, probe_stream = self.stream, self.probe_stream
        for write in writes:
            result = write.result
            if stream is not None and isinstance(result, FitResult):
                self._hand_over(
                    write, partial(stream.add, result), "its update could not be folded"
                )
            elif probe_stream is not None and isinstance(result, GradientResult):
                self._hand_over(
                    write, partial(probe_stream.add, result), "its probe answer was refused"
                )
        with self._answered:
            for write in writes:
                if not write.pending.streamed and write.pending.failure is None:
                    write.pending.result = write.result
                write.pending.bytes_up = len(write.payload)
            self._answered.notify_all()
        fits = sum(isinstance(w.result, FitResult) for w in writes)
        if fits:
            self.metrics.updates_received.inc(fits)
