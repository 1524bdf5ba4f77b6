"""An ingest worker: one of N processes sharing the agents' fit updates through the broker.

Large plants outgrow one coordinator process's ingest. The broker layer already scales out
(Mosquitto on one host; EMQX, HiveMQ or VerneMQ clustered), and MQTT 5 shared
subscriptions (``$share/{group}/{filter}``) hand each message to one subscriber of a group.
:class:`IngestWorker` is such a subscriber for ``{root}/agents/+/results``: for each fit
update it splits the frame, validates the envelope, decodes the weights as a view of the
message (:func:`~faultfleet.wire.codec.decode_tensors` with ``copy=False``), checks them
finite, journals the message in its own round journal (batched, one fsync per batch) and
only then folds it into its partial sums (:class:`~coordinator.strategies.streaming.
UpdateStream`: clip and weight cap from the plan's bounds, the sketch for the similarities)
and forwards a compact :class:`~faultfleet.wire.ingest_messages.UpdateSummary` — a few
hundred bytes of header and d floats of sketch instead of the update. When the coordinator
closes the round it sends one :class:`~faultfleet.wire.ingest_messages.PartialSum` per
model key: its weighted mean update and weight, which the coordinator adds up
(:mod:`coordinator.adapters.ingest_round`).

The coordinator publishes the round's plan (retained :class:`~faultfleet.wire.
ingest_messages.IngestPlan`: models, bounds, sketch dimension and seed, so every worker
sketches alike). Workers speak MQTT 5 and therefore need Mosquitto 2 or a clustered
broker, not the embedded amqtt broker (MQTT 3.1.1 only).

What a worker decides alone is what needs no round state: the frame, the envelope, the
run and round, the model key, the tensors. What needs the coordinator's bookkeeping — is
the task open, was it answered already (QoS 1 may redeliver to another worker), did the
agent claim more samples than it declared, is the quorum met — stays with the coordinator,
which reads it from the summaries; a worker drops a second copy of a task it saw itself.
Only fit updates are folded; a worker forwards every other answer (evaluations, probes,
failures) unchanged to the coordinator on ``{root}/ingest/{worker}/answers/{agent}``
(docs/deploy.md, "Ingest workers").
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.adapters.answer_workers import AnswerWorkers
from coordinator.adapters.byte_budget import ANSWER_BUDGET_BYTES, ByteBudget
from coordinator.adapters.journal import RoundJournal
from coordinator.adapters.journal_writer import Entry, JournalWriter
from coordinator.adapters.metrics.ingest_worker import IngestWorkerMetrics
from coordinator.adapters.round_tasks import decoded_update
from coordinator.strategies.robust import AggregationPolicy
from coordinator.strategies.sketch import UpdateSketcher
from coordinator.strategies.streaming import StreamBounds, UpdateStream
from faultfleet.tasks import FitResult
from faultfleet.wire.codec import (
    RejectReason,
    WireError,
    decode_tensors,
    encode_frame,
    encode_tensors,
    parse_envelope,
    split_frame_view,
)
from faultfleet.wire.ingest_messages import (
    PLAN_ADAPTER,
    IngestClose,
    IngestPlan,
    IngestReady,
    PartialSum,
    UpdateSummary,
)
from faultfleet.wire.messages import ANSWER_ADAPTER, FitUpdateMessage, TensorEncoding
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.topics import Topics

logger = logging.getLogger(__name__)

SHARE_GROUP = "faultfleet-ingest"
FLOAT32 = TensorEncoding()


@dataclass(frozen=True)
class _Accepted:
    """An update checked and on its way to the journal."""

    message: FitUpdateMessage
    result: FitResult
    payload: bytes
    held: bool
    """Whether the payload's bytes are held in the worker's budget until it is journaled."""


def _entry(accepted: _Accepted) -> Entry:
    return accepted.message.agent_id, accepted.message.task_id, accepted.payload


class IngestWorker:
    """Checks, journals, folds and summarises the fit updates the broker hands it.

    Parameters
    ----------
    connection : MqttConnection
        Built with ``mqtt5=True``; the worker adds its routes.
    topics : Topics
    worker_id : str
    journal : RoundJournal
        The worker's own journal directory.
    max_payload_bytes : int
    check_threads : int
        Threads checking updates off the network thread.
    share_group : str
        The shared subscription's group: every worker of one coordinator uses the same.
    max_held_bytes : int
        Bytes of received messages held between arriving and being refused, forwarded or
        journaled and folded, before the network thread waits to take the next one
        (:data:`~coordinator.adapters.byte_budget.ANSWER_BUDGET_BYTES` by default).
    metrics : IngestWorkerMetrics, optional
        Where the worker counts what it does; a fresh set when None.
    """

    def __init__(
        self,
        connection: MqttConnection,
        topics: Topics,
        *,
        worker_id: str,
        journal: RoundJournal,
        max_payload_bytes: int,
        check_threads: int = 2,
        share_group: str = SHARE_GROUP,
        max_held_bytes: int = ANSWER_BUDGET_BYTES,
        metrics: IngestWorkerMetrics | None = None,
    ) -> None:
        self.connection = connection
        self.topics = topics
        self.worker_id = worker_id
        self.max_payload_bytes = max_payload_bytes
        self.share_group = share_group
        self.counts: Counter[str] = Counter()
        """Messages by outcome: ``accepted``, ``forwarded`` (not fit updates) and the rejection
        reasons (as :attr:`metrics` counts them)."""
        self.metrics = metrics or IngestWorkerMetrics()
        self._lock = threading.Lock()
        self._plan: IngestPlan | None = None
        self._stream: UpdateStream | None = None
        self._seen: set[str] = set()
        self._closed = False
        self._retracted: set[str] = set()
        self._journal = journal
        self.held = ByteBudget(max_held_bytes)
        """The received messages' bytes not yet refused, forwarded or journaled."""
        self.metrics.answers_held_bytes.set_function(lambda: float(self.held.held))
        self._writer: JournalWriter[_Accepted] = JournalWriter(
            journal, written=self._journaled, failed=self._unwritten, entry=_entry
        )
        self._workers = AnswerWorkers(check_threads, name=f"ingest-{worker_id}")

    def start(self) -> None:
        """Route the plan topic and the shared results subscription; start the threads."""
        self._writer.start()
        self._workers.start()
        self.connection.route(self.topics.ingest_plan(), self.on_plan)
        self.connection.route(
            self.topics.all_results(), self._receive, share_group=self.share_group
        )

    def close(self, timeout_s: float = 10.0) -> None:
        """Finish the checks and journal writes under way, then stop the threads."""
        self._workers.close(timeout_s)
        self._writer.close(timeout_s)

    # -- the plan ------------------------------------------------------------------------

    def on_plan(self, topic: str, payload: bytes) -> None:
        """A new round's plan (fold from now on), or the close of the current round (send
        its partial sums). Network thread."""
        if not payload:
            return
        try:
            header, body = split_frame_view(payload, max_bytes=self.max_payload_bytes)
            plan = parse_envelope(PLAN_ADAPTER, header)
            if isinstance(plan, IngestClose):
                self._close_round(plan)
                return
            expected = dict.fromkeys(plan.model_keys, plan.n_params)
            models = decode_tensors(body, FLOAT32, expected, max_bytes=self.max_payload_bytes)
        except WireError as error:
            logger.warning("ingest worker %s: refused a plan: %s", self.worker_id, error)
            return
        policy = AggregationPolicy(
            clip_factor=plan.clip_factor, clip_norm=plan.clip_norm, weight_cap=plan.weight_cap
        )
        bounds = {k: StreamBounds(b.norm, b.samples) for k, b in plan.bounds.items()}
        sketcher = (
            UpdateSketcher(plan.n_params, plan.sketch_dim, plan.sketch_seed)
            if plan.sketch_dim > 0
            else None
        )
        stream = UpdateStream(
            plan.server_round, models, policy, bounds, sketcher, raw_means=plan.raw_means
        )
        with self._lock:
            self._plan, self._stream, self._seen = plan, stream, set()
            self._closed, self._retracted = False, set()
        self._journal.begin(plan.server_round, [])
        self.metrics.round.set(plan.server_round)
        ready = IngestReady(
            run_id=plan.run_id, server_round=plan.server_round, worker_id=self.worker_id
        )
        self.connection.publish(self._summaries(), encode_frame(ready))

    def _close_round(self, close: IngestClose) -> None:
        """Send the round's partial sums without the updates ``close`` refuses; every
        close of the round is answered (the coordinator closes again when it refuses a
        summary after its close)."""
        with self._lock:
            plan, stream = self._plan, self._stream
            if plan is None or stream is None or close.server_round != plan.server_round:
                return
            self._closed = True  # updates from now on are late
        self._workers.close()  # every update of the round checked, then journaled
        self._writer.close()
        refused = [t for t in close.refused.get(self.worker_id, ()) if t not in self._retracted]
        self._retract(plan, stream, refused)
        self._retracted.update(refused)
        for key in stream.model_keys():
            mean, weight = stream.partial(key)
            raw = stream.raw_partial(key)
            report = stream.report(key)
            message = PartialSum(
                run_id=plan.run_id,
                server_round=plan.server_round,
                worker_id=self.worker_id,
                model_key=key,
                weight=weight,
                updates=report.updates,
                clipped=report.norm_clipped,
                capped=report.weight_capped,
                closing=close.closing,
                raw_weight=None if raw is None else raw[1],
            )
            tensors = {"mean": mean} if raw is None else {"mean": mean, "raw_mean": raw[0]}
            body = encode_tensors(tensors, FLOAT32)
            self.connection.publish(self._summaries(), encode_frame(message, body))
            self.metrics.partial_sums.inc()
        self._writer.start()
        self._workers.start()

    def _retract(self, plan: IngestPlan, stream: UpdateStream, refused: Sequence[str]) -> None:
        """Take the updates the coordinator refused out of the partial sums, reading them
        back from the journal (the only copy kept)."""
        if not refused:
            return
        journaled = self._journal.accepted()
        for tid in refused:
            payload = journaled.get(tid)
            if payload is None:
                logger.warning(
                    "ingest worker %s: refused task %s not journaled", self.worker_id, tid
                )
                continue
            header, body = split_frame_view(payload, max_bytes=self.max_payload_bytes)
            answer = parse_envelope(ANSWER_ADAPTER, header)
            assert isinstance(answer, FitUpdateMessage)  # journaled after the checks
            result = _fit_result(answer, body, plan, stream, max_bytes=len(payload), copy=True)
            stream.retract(result)
            self._count("retracted")

    # -- updates ---------------------------------------------------------------------------

    def _receive(self, topic: str, payload: bytes) -> None:
        """Network thread: queue a message for the checking thread of its agent, once the
        messages held leave room for it (:attr:`held`)."""
        agent = self.topics.agent_of(topic) or topic
        waited = self.held.take_waiting(len(payload))  # while full: wait for the journal
        if waited:
            self.metrics.answers_backpressure_seconds.inc(waited)
        self._workers.call(agent, lambda: self._check_held(topic, payload))

    def _check_held(self, topic: str, payload: bytes) -> None:
        """:meth:`on_answer`, then give back the message's bytes unless the journal writer
        took it (which gives them back once it is written and folded)."""
        journaling = False
        try:
            journaling = self._take(topic, payload, held=True)
        finally:
            if not journaling:
                self.held.give_back(len(payload))

    def on_answer(self, topic: str, payload: bytes) -> None:
        """Check one message of ``agents/+/results`` and journal a fit update (worker
        thread); anything refused is counted by reason and logged."""
        self._take(topic, payload, held=False)

    def _take(self, topic: str, payload: bytes, *, held: bool) -> bool:
        """:meth:`on_answer`; ``held``: the payload's bytes are held in :attr:`held`. True
        when the message went to the journal writer (which gives them back)."""
        try:
            accepted = self._check(topic, payload, held=held)
        except WireError as error:
            self._count(str(error.reason))
            logger.info(
                "ingest worker %s refused %s (%s): %s", self.worker_id, topic, error.reason, error
            )
            return False
        if accepted is None:
            return False
        self._writer.put(accepted)
        return True

    def _check(self, topic: str, payload: bytes, *, held: bool) -> _Accepted | None:
        header, body = split_frame_view(payload, max_bytes=self.max_payload_bytes)
        answer = parse_envelope(ANSWER_ADAPTER, header)
        if not isinstance(answer, FitUpdateMessage):
            self._forward_answer(topic, payload)
            return None
        if self.topics.agent_of(topic) != answer.agent_id:
            raise WireError(RejectReason.UNKNOWN_TASK, f"update of {answer.agent_id!r} on {topic}")
        with self._lock:
            plan, stream = self._plan, self._stream
            this_round = plan is not None and (answer.run_id, answer.server_round) == (
                plan.run_id,
                plan.server_round,
            )
            if plan is None or stream is None or not this_round or self._closed:
                raise WireError(RejectReason.LATE, f"no plan for round {answer.server_round}")
            if answer.task_id in self._seen:
                raise WireError(RejectReason.DUPLICATE, f"task {answer.task_id} seen already")
            self._seen.add(answer.task_id)
        if answer.model_key not in stream.models:
            raise WireError(RejectReason.UNKNOWN_TASK, f"no model {answer.model_key!r} this round")
        result = _fit_result(
            answer, body, plan, stream, max_bytes=self.max_payload_bytes, copy=False
        )
        return _Accepted(answer, result, payload, held)

    def _forward_answer(self, topic: str, payload: bytes) -> None:
        """Hand an answer other than a fit update (evaluation, probe, failure) to the
        coordinator unchanged, on a topic naming the agent topic it came from; the
        coordinator checks it as if it had received it there."""
        agent = self.topics.agent_of(topic)
        if agent is None:
            raise WireError(RejectReason.UNKNOWN_TASK, f"an answer on {topic}")
        self.connection.publish(self.topics.forwarded_answer(self.worker_id, agent), payload)
        self._count("forwarded")

    def _forward(self, batch: Sequence[_Accepted]) -> None:
        """Writer thread: fold the journaled updates and send their summaries."""
        with self._lock:
            stream = self._stream
        if stream is None:
            return
        for accepted in batch:
            try:
                folded = stream.add(accepted.result)
            except ValueError as error:  # a second task of one agent and model
                self._count("unfolded")
                logger.warning("ingest worker %s: %s", self.worker_id, error)
                continue
            message = accepted.message
            summary = UpdateSummary(
                run_id=message.run_id,
                server_round=message.server_round,
                worker_id=self.worker_id,
                task_id=message.task_id,
                agent_id=message.agent_id,
                model_key=message.model_key,
                num_samples=message.num_samples,
                train_loss=message.train_loss,
                norm=folded.norm,
            )
            sketch = {} if folded.sketch is None else {"sketch": folded.sketch}
            body = encode_tensors(sketch, FLOAT32)
            self.connection.publish(self._summaries(), encode_frame(summary, body))
            self._count("accepted")

    def _journaled(self, batch: Sequence[_Accepted]) -> None:
        """Writer thread: fold and summarise the journaled updates, then give back the
        bytes they held."""
        try:
            self._forward(batch)
        finally:
            self._give_back(batch)

    def _unwritten(self, batch: Sequence[_Accepted]) -> None:
        """Writer thread: count the updates the journal could not write; give back their
        bytes."""
        self._count("unjournaled", len(batch))
        self._give_back(batch)

    def _give_back(self, batch: Sequence[_Accepted]) -> None:
        self.held.give_back(sum(len(a.payload) for a in batch if a.held))

    def _count(self, outcome: str, n: int = 1) -> None:
        self.counts[outcome] += n
        self.metrics.count(outcome, n)

    def _summaries(self) -> str:
        return self.topics.ingest_summaries(self.worker_id)


def _fit_result(
    answer: FitUpdateMessage,
    body: memoryview | bytes,
    plan: IngestPlan,
    stream: UpdateStream,
    *,
    max_bytes: int,
    copy: bool,
) -> FitResult:
    """The update of a checked fit answer: its weights decoded from ``body`` (a view of the
    message unless ``copy``), Δθ derived against the round's model it trained."""
    return decoded_update(
        answer,
        body,
        stream.models[answer.model_key],
        n_params=plan.n_params,
        max_bytes=max_bytes,
        copy=copy,
    )
