"""A :class:`~coordinator.fleet.ProbingFleet` whose clients are edge agents reached over MQTT.

Per round :class:`MqttFleet` publishes one task frame per task (:mod:`coordinator.task_frames`;
an agent may get several), then collects the answers until every task is answered or the
round deadline passes. Probes (losses and gradient tasks, :mod:`coordinator.mqtt_probes`)
and evaluations are collected the same way but not journaled. Answers are validated
(:mod:`faultfleet.wire.codec`) in the network thread: a malformed, oversized, wrong-shape
or non-finite update is rejected and counted by reason, a second answer for the same task
is ignored (QoS 1 may deliver twice), and an answer after its round closed is counted late.
Every accepted update goes to the :class:`~coordinator.journal.RoundJournal` before it
counts, so a restarted coordinator loses none.

An agent that goes offline mid-round (its last will) fails its open tasks at once; one that
just never answers fails at the deadline. A round with fewer updates than the quorum raises
:class:`QuorumError`; the service retries it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from coordinator.journal import RoundJournal
from coordinator.metrics import CoordinatorMetrics
from coordinator.mqtt_probes import answer_result, gradient_outcome, losses_outcome
from coordinator.presence import AgentRegistry
from coordinator.round_tasks import (
    Collection,
    Pending,
    QuorumError,
    RoundAbortedError,
    Write,
)
from coordinator.task_frames import Frame, TaskFrames
from faultfleet.tasks import (
    EvaluateOutcome,
    EvaluateResult,
    EvaluateTask,
    Failure,
    FitOutcome,
    FitResult,
    FitTask,
    GradientOutcome,
    GradientResult,
    GradientTask,
    LossesOutcome,
    LossesResult,
    LossesTask,
)
from faultfleet.wire.codec import (
    RejectReason,
    WireError,
    encode_frame,
    parse_envelope,
    split_frame,
)
from faultfleet.wire.messages import ANSWER_ADAPTER, ModelSpec, TaskFailedMessage, TensorEncoding
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.topics import Topics

logger = logging.getLogger(__name__)

_CLOSED_MEMORY = 4096
"""How many answered or expired task ids are remembered to tell late from unknown answers."""


class MqttFleet:
    """Edge agents as a fleet.

    Parameters
    ----------
    connection : MqttConnection
        Connected (or connecting) to the broker; the fleet adds its routes.
    topics : Topics
    registry : AgentRegistry
        Presence of the agents (fed by the service from status messages).
    clients : sequence of str
        The federation's clients: the agents registered when the run started.
    run_id : str
    model : ModelSpec
        Architecture of the weights; ``n_params`` is its flat length.
    encoding : TensorEncoding
        Tensor encoding of tasks and of the answers asked for.
    deadline_s : float
        How long a round waits for answers, seconds.
    min_quorum : int
    journal : RoundJournal
    metrics : CoordinatorMetrics
    clock : callable
        Unix time in seconds (injected for tests).
    """

    def __init__(
        self,
        connection: MqttConnection,
        topics: Topics,
        registry: AgentRegistry,
        clients: Sequence[str],
        *,
        run_id: str,
        model: ModelSpec,
        n_params: int,
        encoding: TensorEncoding,
        deadline_s: float,
        min_quorum: int,
        journal: RoundJournal,
        metrics: CoordinatorMetrics,
        max_payload_bytes: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.connection = connection
        self.topics = topics
        self.registry = registry
        self._clients = list(clients)
        self.run_id = run_id
        self.model = model
        self.n_params = n_params
        self.encoding = encoding
        self.deadline_s = deadline_s
        self.min_quorum = min_quorum
        self.journal = journal
        self.metrics = metrics
        self.max_payload_bytes = max_payload_bytes
        self.clock = clock
        self.frames = TaskFrames(
            run_id=run_id, model=model, encoding=encoding, deadline_s=deadline_s, clock=clock
        )
        self._lock = threading.Lock()
        self._answered = threading.Condition(self._lock)
        self._collection = Collection()
        self._closed: deque[str] = deque(maxlen=_CLOSED_MEMORY)
        self._closed_set: set[str] = set()
        self._round_available: list[str] | None = None
        self._aborted = False
        self._writes: queue.Queue[Write] = queue.Queue()
        threading.Thread(target=self._write_journal, name="round-journal", daemon=True).start()
        connection.route(topics.all_results(), self.on_answer)

    # -- Fleet protocol ------------------------------------------------------------------

    def client_ids(self) -> list[str]:
        return list(self._clients)

    def set_clients(self, clients: Sequence[str]) -> None:
        """The federation after agents joined or left, between rounds."""
        self._clients = list(clients)

    def available(self) -> list[str]:
        """The round's agents (fixed by :meth:`begin_round`) that are still online."""
        if self._round_available is not None:
            online = set(self.online_clients())
            return [a for a in self._round_available if a in online]
        return self.online_clients()

    def online_clients(self) -> list[str]:
        """Clients of the federation that are online now."""
        members = set(self._clients)
        return [a for a in self.registry.online_trainers() if a in members]

    def begin_round(self, server_round: int, *, replay: bool) -> list[str]:
        """Fix (and return) the available agents for ``server_round``.

        With ``replay``, an interrupted ``server_round`` found in the journal keeps the agents
        it had. With none available nothing is written, so the round can start later.
        """
        replayed = self.journal.replay_available(server_round) if replay else None
        available = replayed or self.online_clients()
        if replayed:
            logger.info("round %d: resuming the interrupted round", server_round)
        if available:
            self.journal.begin(server_round, available)
        self._round_available = available
        return available

    def end_round(self) -> None:
        """The round's checkpoint is written: forget its journal."""
        self.journal.clear()
        self._round_available = None

    def fit(self, server_round: int, tasks: Sequence[FitTask]) -> FitOutcome:
        """Local updates for ``tasks``; an agent may have several (one per model).

        Updates the journal holds for this round are taken from there, not asked for again.
        """
        frames = self.frames.fit(server_round, tasks)
        collection, bytes_down = self._dispatch(frames, replay=self.journal.accepted())
        results = tuple(p.result for p in collection if isinstance(p.result, FitResult))
        failures = tuple(p.failure for p in collection if p.failure is not None)
        bytes_up = sum(p.bytes_up for p in collection)
        self._check_quorum(server_round, "updates", tasks, results)
        return FitOutcome(results, failures, bytes_down=bytes_down, bytes_up=bytes_up)

    def evaluate(self, server_round: int, tasks: Sequence[EvaluateTask]) -> EvaluateOutcome:
        collection, _ = self._dispatch(self.frames.evaluate(server_round, tasks), replay={})
        results = tuple(p.result for p in collection if isinstance(p.result, EvaluateResult))
        failures = tuple(p.failure for p in collection if p.failure is not None)
        return EvaluateOutcome(results, failures)

    def losses(self, server_round: int, tasks: Sequence[LossesTask]) -> LossesOutcome:
        """Losses probes: one result or failure per task; the round's quorum applies."""
        frames = self.frames.losses(server_round, tasks)
        outcome = losses_outcome(*self._dispatch(frames, replay={}))
        self._check_quorum(server_round, "losses answers", tasks, outcome.results)
        return outcome

    def gradients(self, server_round: int, tasks: Sequence[GradientTask]) -> GradientOutcome:
        """Gradient probes: one result or failure per task; the round's quorum applies."""
        frames = self.frames.gradients(server_round, tasks)
        outcome = gradient_outcome(*self._dispatch(frames, replay={}))
        self._check_quorum(server_round, "gradient answers", tasks, outcome.results)
        return outcome

    def _check_quorum(
        self,
        server_round: int,
        what: str,
        tasks: Sequence[FitTask | LossesTask | GradientTask],
        results: Sequence[FitResult | LossesResult | GradientResult],
    ) -> None:
        """Raise :class:`QuorumError` unless ``min(min_quorum, agents asked)`` agents answered.

        Agents count once however many tasks they had, and probes count like training: a
        strategy that trains only the agents its probe heard from must not slip under the
        quorum because the probe went unanswered.
        """
        asked = {t.client_id for t in tasks}
        answered = {r.client_id for r in results}
        quorum = min(self.min_quorum, len(asked))
        if len(answered) < quorum:
            raise QuorumError(
                f"round {server_round}: {what} from {len(answered)} of {len(asked)} agents "
                f"arrived within {self.deadline_s:g} s, the quorum is {quorum}"
            )

    # -- collecting answers ----------------------------------------------------------------

    def _dispatch(
        self,
        frames: Sequence[Frame],
        replay: Mapping[str, bytes],
    ) -> tuple[list[Pending], int]:
        deadline = time.monotonic() + self.deadline_s
        with self._lock:
            self._collection = Collection({p.task_id: p for p, _, _ in frames})
        bytes_down = 0
        for pending, header, body in frames:
            saved = replay.get(pending.task_id)
            if saved is not None:
                self.on_answer(self.topics.results(pending.agent_id), saved, journal=False)
                if pending.done:
                    continue
            payload = encode_frame(header, body)
            try:
                bytes_down += self.connection.publish(self.topics.tasks(pending.agent_id), payload)
            except (ValueError, RuntimeError) as error:
                self._fail(pending.task_id, f"task could not be sent: {error}")
        self.metrics.payload_sent_bytes.inc(bytes_down)
        with self._answered:
            self._answered.wait_for(
                lambda: self._aborted or self._collection.finished(),
                timeout=max(0.0, deadline - time.monotonic()),
            )
            if self._aborted:
                self._collection = Collection()
                raise RoundAbortedError("the coordinator is stopping; the round was abandoned")
            # Updates that arrived in time but are still being journaled count for the round.
            self._answered.wait_for(lambda: not self._collection.writing(), timeout=60.0)
            collection = list(self._collection.pending.values())
            for pending in collection:
                if not pending.done:
                    pending.failure = Failure(
                        pending.agent_id, f"no answer within the {self.deadline_s:g} s deadline"
                    )
                self._remember_closed(pending.task_id)
            self._collection = Collection()
        return collection, bytes_down

    def abort(self) -> None:
        """Stop waiting: the round in progress (and any later one) raises RoundAbortedError.

        Accepted updates stay in the journal, so a restarted coordinator replays the round.
        """
        with self._answered:
            self._aborted = True
            self._answered.notify_all()

    def agent_offline(self, agent_id: str) -> None:
        """Fail the open tasks of an agent that went offline, so the round need not wait."""
        with self._answered:
            for pending in self._collection.pending.values():
                if pending.agent_id == agent_id and not pending.done and not pending.journaling:
                    pending.failure = Failure(agent_id, "the agent went offline during the round")
            self._answered.notify_all()

    def _fail(self, tid: str, reason: str) -> None:
        with self._answered:
            pending = self._collection.pending.get(tid)
            if pending is not None and not pending.done and not pending.journaling:
                pending.failure = Failure(pending.agent_id, reason)
            self._answered.notify_all()

    def _remember_closed(self, tid: str) -> None:
        if len(self._closed) == self._closed.maxlen:
            self._closed_set.discard(self._closed[0])
        self._closed.append(tid)
        self._closed_set.add(tid)

    def on_answer(self, topic: str, payload: bytes, *, journal: bool = True) -> None:
        """Handle one message on ``agents/+/results`` (called in the network thread).

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
        header, body = split_frame(payload, max_bytes=self.max_payload_bytes)
        answer = parse_envelope(ANSWER_ADAPTER, header)
        if self.topics.agent_of(topic) != answer.agent_id:
            raise WireError(
                RejectReason.UNKNOWN_TASK,
                f"answer of agent {answer.agent_id!r} arrived on another agent's topic {topic}",
            )
        pending = self._open_task(answer.task_id, answer.agent_id, answer.run_id)
        if isinstance(answer, TaskFailedMessage):
            self._fail(pending.task_id, f"agent reported: {answer.reason}")
            return
        result = answer_result(
            pending, answer, body, n_params=self.n_params, max_bytes=self.max_payload_bytes
        )
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
            self._writes.put(Write(pending, result, payload))
        else:
            self._settle([Write(pending, result, payload)])

    def _write_journal(self) -> None:
        """Writer thread: journal accepted updates in batches, then count them."""
        while True:
            batch = [self._writes.get()]
            while True:
                try:
                    batch.append(self._writes.get_nowait())
                except queue.Empty:
                    break
            entries = [(w.pending.agent_id, w.pending.task_id, w.payload) for w in batch]
            try:
                self.journal.record_many(entries)
            except Exception:
                logger.exception("could not write %d update(s) to the round journal", len(batch))
                with self._answered:
                    for write in batch:
                        write.pending.journaling = False
                        write.pending.failure = Failure(
                            write.pending.agent_id, "its update could not be journaled"
                        )
                    self._answered.notify_all()
                continue
            self._settle(batch)

    def _settle(self, writes: Sequence[Write]) -> None:
        with self._answered:
            for write in writes:
                write.pending.result = write.result
                write.pending.bytes_up = len(write.payload)
            self._answered.notify_all()
        fits = sum(isinstance(w.result, FitResult) for w in writes)
        if fits:
            self.metrics.updates_received.inc(fits)

    def _open_task(self, tid: str, agent_id: str, run_id: str) -> Pending:
        with self._lock:
            pending = self._collection.pending.get(tid)
            if pending is not None and pending.agent_id == agent_id:
                if pending.done or pending.journaling:
                    raise WireError(RejectReason.DUPLICATE, f"task {tid} already answered")
                return pending
            if tid in self._closed_set:
                raise WireError(
                    RejectReason.LATE, f"task {tid} of {agent_id} closed before it arrived"
                )
        reason = "another run" if run_id != self.run_id else "no open task"
        raise WireError(RejectReason.UNKNOWN_TASK, f"task {tid} of {agent_id} belongs to {reason}")
