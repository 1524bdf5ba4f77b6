"""Fit rounds through ingest workers: what :class:`~coordinator.adapters.mqtt_fleet.MqttFleet`
does instead of ingesting every update itself when ``[ingest] workers`` is set.

Per fit round, :meth:`WorkerIngest.fit`

1. publishes the round's plan (:class:`~coordinator.adapters.ingest_coordinator.
   IngestCoordinator`) and waits up to ``ready_timeout_s`` for every configured worker not
   known to be offline to take it. A worker that does not is logged and counted
   (``faultfleet_ingest_workers_missing_total{stage="plan"}``) and the round goes on with
   the others; with none, the round misses its quorum at once (tried again later) without
   sending a task;
2. sends the fit tasks through the :class:`~coordinator.adapters.mqtt_answers.
   AnswerCollector` as any round does: last wills and ``task_failed`` answers fail tasks
   at once, the others fail at the round deadline. A worker's summary counts for its task
   (:meth:`WorkerIngest.admit`) when the collector finds the task open and unanswered, of
   that agent and model, and claiming no more samples than the agent declared; every other
   summary is refused (counted by reason) and its worker takes it out of its sums;
3. closes the round and waits up to ``close_timeout_s`` for the partial sums. A worker
   that sends none (it died or lost its connection within the round) is left out: its
   tasks fail ("its ingest worker ... sent no partial sums"), the quorum applies to the
   others, and ``faultfleet_ingest_workers_missing_total{stage="close"}`` counts it. The
   updates it journaled stay in its ``state_dir/<worker id>`` and are not replayed;
4. takes the merged summaries and partial sums into the strategy's stream
   (:meth:`~coordinator.strategies.streaming.UpdateStream.absorb`), which the strategy
   then takes as its own.

A worker that dies or loses its connection is known at once by its retained status on
``{root}/ingest/{worker}/status`` (the broker publishes its last will, ``offline``):
:meth:`WorkerIngest.on_status` leaves it out of the open round, takes back its summaries
(their tasks wait again, :meth:`~coordinator.adapters.mqtt_answers.AnswerCollector.reopen`)
and sends every unanswered task of the round again, as after a broker restart: an answer
it held, or one in flight to it, is lost with it, and an agent answers a repeated task
with the answer it gave. The other workers take the answers; each update counts once
(``faultfleet_updates_received_total`` included). The round need not wait for the
deadline, nor the close for the lost worker; the worker counts as missing at the close,
and in later rounds at the plan (without being waited for) until it is ``online`` again.

Evaluations, probes and ``task_failed`` answers share the results topic, so the broker
hands them to the workers too; a worker forwards each unchanged on
``{root}/ingest/{worker}/answers/{agent}``. :meth:`WorkerIngest.start` listens to that
topic of each configured worker only and gives the answer to the collector as if it had
arrived on ``{root}/agents/{agent}/results``, where the usual checks apply (the envelope's
agent must be the topic's).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from functools import partial

from coordinator.adapters.ingest_coordinator import IngestCoordinator
from coordinator.adapters.ingest_round import IngestRound
from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.mqtt_answers import AnswerCollector
from coordinator.adapters.round_tasks import Pending, QuorumError
from coordinator.adapters.task_frames import Frame
from coordinator.strategies.streaming import UpdateStream
from faultfleet.tasks import Failure
from faultfleet.wire.codec import RejectReason, WireError, parse_envelope
from faultfleet.wire.ingest_messages import WORKER_STATUS_ADAPTER, UpdateSummary

logger = logging.getLogger(__name__)


class WorkerIngest:
    """The fit rounds of a fleet, ingested by ``workers``.

    Parameters
    ----------
    link : IngestCoordinator
        On the coordinator's connection.
    workers : sequence of str
        The ingest workers' ids; summaries and answers of any other worker are ignored.
    metrics : CoordinatorMetrics
    ready_timeout_s : float
        How long a round's plan waits for the workers to take it, seconds.
    close_timeout_s : float
        How long a round's close waits for the workers' partial sums, seconds.
    """

    def __init__(
        self,
        link: IngestCoordinator,
        workers: Sequence[str],
        metrics: CoordinatorMetrics,
        *,
        ready_timeout_s: float,
        close_timeout_s: float,
    ) -> None:
        if not workers:
            raise ValueError("WorkerIngest needs at least one ingest worker id")
        self.link = link
        self.workers = tuple(workers)
        self.metrics = metrics
        self.ready_timeout_s = ready_timeout_s
        self.close_timeout_s = close_timeout_s
        self._answers: AnswerCollector | None = None
        self._lock = threading.Lock()
        self._offline: set[str] = set()

    def start(self, answers: AnswerCollector) -> None:
        """Route the workers' summaries and statuses, and their forwarded answers to
        ``answers``."""
        self._answers = answers
        self.link.start(self.workers)
        route, topics = self.link.connection.route, self.link.topics
        for worker in self.workers:
            route(topics.forwarded_answers(worker), partial(self.on_forwarded, worker))
            route(topics.ingest_status(worker), partial(self.on_status, worker))

    def offline(self) -> frozenset[str]:
        """The workers whose last status said ``offline``."""
        with self._lock:
            return frozenset(self._offline)

    def on_status(self, worker: str, topic: str, payload: bytes) -> None:
        """``worker``'s retained status (network thread); ``offline`` mid-round: the round
        goes on without it, and what it held is asked for again."""
        if not payload:
            return
        try:
            status = parse_envelope(WORKER_STATUS_ADAPTER, payload)
        except WireError as error:
            logger.warning("ignoring a status of ingest worker %s on %s: %s", worker, topic, error)
            return
        if status.worker_id != worker:
            logger.warning("ignoring %s's status on %s", status.worker_id, topic)
            return
        with self._lock:
            if status.state == "online":
                self._offline.discard(worker)
                return
            self._offline.add(worker)
        self._worker_lost(worker)

    def _worker_lost(self, worker: str) -> None:
        """Leave ``worker`` out of the open round, reopen the tasks it summarised and send
        every unanswered task of the round in flight again."""
        answers = self.answers
        reopened = answers.reopen(self.link.drop_worker(worker))
        waiting = answers.waiting_for()
        if reopened or waiting:
            logger.warning(
                "ingest worker %s went offline mid-round; its %d update(s) and every "
                "unanswered task (%d agent(s)) are asked for again",
                worker,
                len(reopened),
                len(waiting),
            )
        for agent in waiting:
            answers.resend(agent)

    @property
    def answers(self) -> AnswerCollector:
        if self._answers is None:
            raise RuntimeError("WorkerIngest is not started; call start() first")
        return self._answers

    def on_forwarded(self, worker: str, topic: str, payload: bytes) -> None:
        """An answer ``worker`` forwarded (network thread): to the collector, as if it had
        arrived on its agent's results topic."""
        agent = self.link.topics.forwarded_agent(worker, topic)
        if agent is None:
            logger.warning("ignoring a message of ingest worker %s on %s", worker, topic)
            return
        self.answers.receive(self.link.topics.results(agent), payload)

    def admit(self, summary: UpdateSummary) -> bool:
        """Whether ``summary`` answers its task (the first summary of an open fit task of
        its agent and model, within the samples the agent declared); a refusal is counted
        by reason, and an update claiming too many samples fails its task."""
        answers, tid = self.answers, summary.task_id
        try:
            pending = answers.open_task(tid, summary.agent_id, summary.run_id)
            if pending.kind != "fit" or summary.model_key not in pending.models:
                raise WireError(
                    RejectReason.UNKNOWN_TASK,
                    f"summary for model {summary.model_key!r}; task {tid} offered "
                    f"{sorted(pending.models)}",
                )
            declared = answers.declared_samples
            limit = declared(summary.agent_id) if declared is not None else None
            if limit is not None and summary.num_samples > limit:
                reason = f"its update claimed {summary.num_samples} training samples"
                answers.fail(tid, f"{reason}; it declared {limit}")
                raise WireError(RejectReason.TOO_MANY_SAMPLES, f"task {tid}: {reason}")
            if not answers.settle_streamed(pending):
                raise WireError(RejectReason.LATE, f"task {tid} closed while summarised")
        except WireError as error:
            self.metrics.reject(error.reason)
            logger.info(
                "refused %s's summary of task %s (%s): %s",
                summary.worker_id,
                tid,
                error.reason,
                error,
            )
            return False
        return True

    def fit(
        self, run_id: str, frames: Sequence[Frame], stream: UpdateStream
    ) -> tuple[list[Pending], int]:
        """Run a fit round's ``frames`` through the workers and fold the merged round into
        ``stream``; returns every task's bookkeeping entry and the bytes published.

        Raises
        ------
        QuorumError
            No worker took the round's plan in time (no task was sent).
        RoundAbortedError
            The coordinator is stopping.
        """
        tasks = {p.task_id: p.agent_id for p, _, _ in frames}
        merged = self.link.open_round(run_id, stream, tasks=tasks, admit=self.admit)
        self._await_ready(merged)
        collection, bytes_down = self.answers.dispatch(frames, replay={})
        self.link.close_round(self.close_timeout_s)
        lost = {tid: worker for worker, tids in merged.dropped.items() for tid in tids}
        counted = merged.counted()
        for pending in collection:
            if pending.streamed and pending.task_id not in counted:
                worker = lost.get(pending.task_id, "(unknown)")
                pending.streamed = False
                pending.failure = Failure(
                    pending.agent_id, f"its ingest worker {worker} sent no partial sums"
                )
        self.metrics.ingest_workers_missing.labels(stage="close").inc(len(merged.dropped))
        stream.absorb(merged.updates(), merged.totals())
        return collection, bytes_down

    def _await_ready(self, merged: IngestRound) -> None:
        """Wait for the workers not known offline to take the plan; count the others."""
        configured = set(self.workers)
        wanted = configured - self.offline()
        if wanted:
            self.link.wait_for(lambda r: r.ready() >= wanted, self.ready_timeout_s)
        ready = merged.ready() & configured
        missing = sorted(configured - ready)
        if not missing:
            return
        self.metrics.ingest_workers_missing.labels(stage="plan").inc(len(missing))
        offline = sorted(self.offline() & set(missing))
        said = f" ({', '.join(offline)} offline)" if offline else ""
        if not ready:
            raise QuorumError(
                f"round {merged.server_round}: no ingest worker ({', '.join(self.workers)}) "
                f"took the round's plan within {self.ready_timeout_s:g} s{said}; are the "
                "`faultfleet ingest-worker` processes running and connected?"
            )
        logger.warning(
            "round %d: ingest worker(s) %s did not take the round's plan within %g s%s; the "
            "round goes on with %s",
            merged.server_round,
            ", ".join(missing),
            self.ready_timeout_s,
            said,
            ", ".join(sorted(ready)),
        )
