"""A :class:`~coordinator.engine.fleet.ProbingFleet` of edge agents reached over MQTT.

Per round :class:`MqttFleet` publishes one task frame per task
(:mod:`coordinator.adapters.task_frames`; an agent may get several), then collects the
answers until every task is answered or the round deadline passes, through the
:class:`~coordinator.adapters.mqtt_answers.AnswerCollector` it holds (which validates,
journals and counts them). :meth:`MqttFleet.start` starts taking answers (the collector's
journal writer thread), :meth:`MqttFleet.close` stops; the fleet is also a context manager.
A streaming strategy's updates (:meth:`MqttFleet.fit_streaming`) are folded into its stream
as soon as they are journaled, and their messages freed. Probes (losses and gradient tasks,
:mod:`coordinator.adapters.mqtt_probes`) and evaluations
are collected the same way but not journaled; a streamed gradient probe's answers
(:meth:`MqttFleet.gradients_streaming`) are handed to the strategy's probe stream as soon as
they are checked, and their messages freed. Updates the journal holds for a round
interrupted by a restart are replayed from there, not asked for again.

With ingest workers (``ingest``, :mod:`coordinator.adapters.ingest_fleet`) a streaming
round's updates go to the workers instead, which journal and fold them; the fleet leaves
the results topic to them and takes the answers they forward.

A round with fewer updates than the quorum raises :class:`QuorumError`; the service retries
it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from coordinator.adapters.ingest_fleet import WorkerIngest
from coordinator.adapters.journal import RoundJournal
from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.mqtt_answers import AnswerCollector
from coordinator.adapters.mqtt_probes import gradient_outcome, losses_outcome
from coordinator.adapters.presence import AgentRegistry
from coordinator.adapters.round_tasks import Pending, QuorumError
from coordinator.adapters.task_frames import Frame, TaskFrames
from coordinator.strategies.probe_streaming import GradientStream
from coordinator.strategies.streaming import UpdateStream
from faultfleet.clock import SYSTEM_CLOCK, Clock
from faultfleet.errors import UsageError
from faultfleet.tasks import (
    EvaluateOutcome,
    EvaluateResult,
    EvaluateTask,
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
from faultfleet.wire.messages import ModelSpec, TensorEncoding
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.topics import Topics

logger = logging.getLogger(__name__)


class MqttFleet:
    """Edge agents as a fleet.

    Parameters
    ----------
    connection : MqttConnection
        Connected (or connecting) to the broker; the fleet adds its routes.
    topics : Topics
    registry : AgentRegistry
        Presence of the agents (fed by the service from status messages); an update may
        claim at most the training windows its agent declared there.
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
        Unix time in seconds, for the tasks' deadlines (injected for tests).
    round_clock : Clock
        Measures the round deadline and waits for answers (injected for tests).
    ingest : WorkerIngest, optional
        Ingest workers that take the streaming rounds' updates; None: the fleet takes them.

    Attributes
    ----------
    answers : AnswerCollector
        Publishes the round's task frames and collects the answers; started by
        :meth:`start`.
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
        round_clock: Clock = SYSTEM_CLOCK,
        ingest: WorkerIngest | None = None,
    ) -> None:
        self.registry = registry
        self.ingest = ingest
        self.run_id = run_id
        self.journal = journal
        self.deadline_s = deadline_s
        self._clients = list(clients)
        self.model = model
        self.encoding = encoding
        self.min_quorum = min_quorum
        self.clock = clock
        self.frames = TaskFrames(
            run_id=run_id, model=model, encoding=encoding, deadline_s=deadline_s, clock=clock
        )
        self._round_available: list[str] | None = None
        self._replaying = False
        self._dispatching = threading.Lock()
        self.answers = AnswerCollector(
            connection,
            topics,
            run_id=run_id,
            n_params=n_params,
            deadline_s=deadline_s,
            journal=journal,
            metrics=metrics,
            max_payload_bytes=max_payload_bytes,
            round_clock=round_clock,
            clock=clock,
            declared_samples=registry.declared_samples,
        )

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> MqttFleet:
        """Start taking the agents' answers (route and journal writer thread); returns self."""
        self.answers.start(results=self.ingest is None)
        if self.ingest is not None:
            self.ingest.start(self.answers)
        return self

    def close(self) -> None:
        """Stop taking answers: the journal writer thread ends."""
        self.answers.close()

    def __enter__(self) -> MqttFleet:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def abort(self) -> None:
        """Stop waiting: the round in progress (and any later one) raises RoundAbortedError."""
        self.answers.abort()

    def agent_offline(self, agent_id: str) -> None:
        """Fail the open tasks of an agent that went offline, so the round need not wait."""
        self.answers.agent_offline(agent_id)

    def resend(self, agent_id: str, *, retained: bool = False) -> None:
        """Publish again the unanswered tasks of an agent whose ``online`` status arrived
        (:meth:`AnswerCollector.resend`; ``retained``: the status was delivered because
        the coordinator subscribed)."""
        self.answers.resend(agent_id, retained=retained)

    def waiting_for(self) -> list[str]:
        """Agents with a task of the round in flight still unanswered; empty between rounds."""
        return self.answers.waiting_for()

    def _dispatch(
        self, frames: Sequence[Frame], *, replay: Mapping[str, bytes]
    ) -> tuple[list[Pending], int]:
        """:meth:`AnswerCollector.dispatch`, one at a time: a round's tasks, the gate's
        evaluations, a newcomer's offer, or those of another thread (an operator's tool)
        wait for the dispatch in flight."""
        with self._dispatching:
            return self.answers.dispatch(frames, replay=replay)

    # -- Fleet protocol ------------------------------------------------------------------

    def client_ids(self) -> list[str]:
        return list(self._clients)

    def set_clients(self, clients: Sequence[str]) -> None:
        """The federation after agents joined or left, between rounds."""
        self._clients = list(clients)

    def available(self) -> list[str]:
        """The round's agents (fixed by :meth:`begin_round`) that are still online.

        In a round replayed after a restart, an agent of the round not heard from since the
        restart stays in it (its retained status may simply not have arrived yet); only
        one known to be offline leaves. So the replay samples the agents it had.
        """
        if self._round_available is not None:
            online = set(self.online_clients())
            unheard = set(self._round_available) - set(self.registry.all())
            kept = online | unheard if self._replaying else online
            return [a for a in self._round_available if a in kept]
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
        self._replaying = bool(replayed)
        return available

    def end_round(self) -> None:
        """The round's checkpoint is written: forget its journal."""
        self.journal.clear()
        self._round_available = None
        self._replaying = False

    def fit(self, server_round: int, tasks: Sequence[FitTask]) -> FitOutcome:
        """Local updates for ``tasks``; an agent may have several (one per model).

        Updates the journal holds for this round are taken from there, not asked for again.
        """
        if self.ingest is not None:
            raise UsageError("ingest workers take streamed rounds only (pairwise = 'sketch')")
        frames = self.frames.fit(server_round, tasks)
        collection, bytes_down = self._dispatch(frames, replay=self.journal.accepted())
        results = tuple(p.result for p in collection if isinstance(p.result, FitResult))
        failures = tuple(p.failure for p in collection if p.failure is not None)
        bytes_up = sum(p.bytes_up for p in collection)
        self._check_quorum(server_round, "updates", tasks, results)
        return FitOutcome(results, failures, bytes_down=bytes_down, bytes_up=bytes_up)

    def fit_streaming(
        self, server_round: int, tasks: Sequence[FitTask], stream: UpdateStream
    ) -> FitOutcome:
        """As :meth:`fit`, each update folded into ``stream`` once journaled (or replayed),
        and not kept: the outcome's results are empty. With ingest workers, the workers
        journal and fold the updates and their merged round is taken into ``stream``."""
        frames = self.frames.fit(server_round, tasks)
        with self._dispatching:
            if self.ingest is not None:
                collection, bytes_down = self.ingest.fit(self.run_id, frames, stream)
            else:
                self.answers.stream = stream
                try:
                    collection, bytes_down = self.answers.dispatch(
                        frames, replay=self.journal.accepted()
                    )
                finally:
                    self.answers.stream = None
        failures = tuple(p.failure for p in collection if p.failure is not None)
        bytes_up = sum(p.bytes_up for p in collection)
        answered = {u.client_id for u in stream.updates()}
        self._check_quorum_of(server_round, "updates", tasks, answered)
        return FitOutcome((), failures, bytes_down=bytes_down, bytes_up=bytes_up)

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

    def gradients_streaming(
        self, server_round: int, tasks: Sequence[GradientTask], stream: GradientStream
    ) -> GradientOutcome:
        """As :meth:`gradients`, each answer handed to ``stream`` once checked and not kept
        (one the stream refuses fails its task): the outcome's results are empty."""
        frames = self.frames.gradients(server_round, tasks)
        with self._dispatching:
            self.answers.probe_stream = stream
            try:
                collection, bytes_down = self.answers.dispatch(frames, replay={})
            finally:
                self.answers.probe_stream = None
        outcome = gradient_outcome(collection, bytes_down)
        self._check_quorum_of(server_round, "gradient answers", tasks, set(stream.answered()))
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
        self._check_quorum_of(server_round, what, tasks, {r.client_id for r in results})

    def _check_quorum_of(
        self,
        server_round: int,
        what: str,
        tasks: Sequence[FitTask | LossesTask | GradientTask],
        answered: set[str],
    ) -> None:
        asked = {t.client_id for t in tasks}
        quorum = min(self.min_quorum, len(asked))
        if len(answered) < quorum:
            raise QuorumError(
                f"round {server_round}: {what} from {len(answered)} of {len(asked)} agents "
                f"arrived within {self.deadline_s:g} s, the quorum is {quorum}"
            )
