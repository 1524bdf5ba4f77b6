"""Bookkeeping of the tasks of one round in flight, for :mod:`coordinator.adapters.mqtt_fleet`.

A :class:`Pending` entry per task sent, collected in a :class:`Collection`; a
:class:`Write` is an accepted update on its way to the round journal. Task ids are
deterministic (:func:`task_id`), which makes answers idempotent by task and lets a restarted
coordinator recognise the updates its journal holds.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from faultfleet.errors import FaultfleetError
from faultfleet.tasks import EvaluateResult, Failure, FitResult, GradientResult, LossesResult
from faultfleet.types import FloatArray
from faultfleet.wire.codec import RejectReason, WireError, decode_tensors
from faultfleet.wire.messages import AnyTaskMessage, EvaluationMessage, FitUpdateMessage

Result = FitResult | EvaluateResult | LossesResult | GradientResult


class QuorumError(FaultfleetError, RuntimeError):
    """Fewer updates than the quorum arrived before the round deadline."""


class RoundAbortedError(FaultfleetError, RuntimeError):
    """:meth:`MqttFleet.abort` was called while a round waited for answers."""


@dataclass
class Pending:
    """A task sent and not yet settled: its header, the models it carried, its outcome."""

    task_id: str
    agent_id: str
    server_round: int
    models: Mapping[str, FloatArray]
    """The task's models by key (proximal targets excluded), shape (n_params,) each."""
    header: AnyTaskMessage
    result: Result | None = None
    failure: Failure | None = None
    bytes_up: int = 0
    journaling: bool = False
    """Accepted and being written to the journal; it counts once the write is done."""
    streamed: bool = False
    """Folded into the round's stream: answered, its result not kept."""

    @property
    def done(self) -> bool:
        return self.result is not None or self.failure is not None or self.streamed

    @property
    def kind(self) -> str:
        """The task's kind: "fit", "evaluate", "losses" or "gradient"."""
        return self.header.kind


@dataclass(frozen=True)
class Write:
    """An accepted answer on its way to the journal."""

    pending: Pending
    result: Result
    payload: bytes
    held: bool = False
    """Whether the payload's bytes are held in a :class:`~coordinator.adapters.byte_budget.
    ByteBudget` until the answer is journaled (or could not be)."""


@dataclass
class Collection:
    """The tasks of one round by id; the mapping is never changed, only replaced."""

    pending: dict[str, Pending] = field(default_factory=dict)
    _order: list[Pending] = field(init=False, repr=False)
    _settled: int = field(default=0, init=False, repr=False)
    """How many tasks of :attr:`_order`, from the first, :meth:`finished` found settled."""
    _by_agent: dict[str, list[Pending]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._order = list(self.pending.values())
        self._by_agent = {}
        for pending in self._order:
            self._by_agent.setdefault(pending.agent_id, []).append(pending)

    def finished(self) -> bool:
        """Whether every task is settled.

        The round's waiter asks after every batch of answers; a task once settled stays
        settled (until :meth:`unsettled`), so each call resumes where the last one found
        the first open task instead of rescanning the whole round: a round of n tasks
        costs O(n) over all calls, not O(n) per call.
        """
        order, settled = self._order, self._settled
        while settled < len(order) and order[settled].done:
            settled += 1
        self._settled = settled
        return settled == len(order)

    def unsettled(self) -> None:
        """A settled task was taken back (:meth:`~coordinator.adapters.open_tasks.OpenTasks.
        reopen`): :meth:`finished` looks at every task again."""
        self._settled = 0

    def writing(self) -> bool:
        return any(p.journaling and not p.done for p in self.pending.values())

    def unanswered(self, agent_id: str) -> list[Pending]:
        """Tasks of ``agent_id`` neither settled nor being journaled, in the round's order
        (looked up by agent: at every agent's reconnection, not a scan of the round)."""
        return [p for p in self._by_agent.get(agent_id, ()) if not (p.done or p.journaling)]


class ClosedTasks:
    """The last ``size`` task ids answered or expired, to tell late answers from unknown ones."""

    def __init__(self, size: int = 4096) -> None:
        self._order: deque[str] = deque(maxlen=size)
        self._ids: set[str] = set()

    def add(self, tid: str) -> None:
        """Remember ``tid``, forgetting the oldest one when full."""
        if len(self._order) == self._order.maxlen:
            self._ids.discard(self._order[0])
        self._order.append(tid)
        self._ids.add(tid)

    def __contains__(self, tid: object) -> bool:
        return tid in self._ids


def task_id(
    run_id: str, server_round: int, agent_id: str, label: str, body_sha256: str, occurrence: int
) -> str:
    """Deterministic id of a task.

    Parameters
    ----------
    label : str
        Everything the task asks, apart from its weights: its header as JSON without the
        task id and the deadline (kind, model keys, seed, split, proximal terms, ...).
    body_sha256 : str
        Digest of the encoded weights.
    occurrence : int
        0 for the first task of a round with this label and body for this agent, 1 for the
        second, ...: identical tasks sent to one agent in one round keep distinct ids.

    The same round, agent, request and weights give the same id, in this process or in a
    restarted one; different tasks of one agent in one round never share one.
    """
    digest = hashlib.sha256()
    for part in (run_id, str(server_round), agent_id, label, body_sha256, str(occurrence)):
        digest.update(part.encode("utf-8") + b"\0")
    return digest.hexdigest()[:24]


def fit_result(
    pending: Pending,
    answer: FitUpdateMessage,
    body: bytes | memoryview,
    *,
    n_params: int,
    max_bytes: int,
) -> FitResult:
    """The update ``answer`` carries for ``pending``, its weights decoded and checked.

    A float32 body that needs no conversion is not copied: the weights are a read-only view
    of ``body`` (:func:`~faultfleet.wire.codec.decode_tensors` with ``copy=False``), and
    the update Δθ is derived from the task's model when a strategy reads it
    (:class:`~faultfleet.tasks.FitResult`), so accepting an update allocates nothing of
    its size.

    Raises
    ------
    WireError
        UNKNOWN_TASK for a model the task did not offer; the body's reasons otherwise.
    """
    if answer.model_key not in pending.models or pending.kind != "fit":
        raise WireError(
            RejectReason.UNKNOWN_TASK,
            f"update for model {answer.model_key!r}, the task offered {sorted(pending.models)}",
        )
    return decoded_update(
        answer, body, pending.models[answer.model_key], n_params=n_params, max_bytes=max_bytes
    )


def decoded_update(
    answer: FitUpdateMessage,
    body: bytes | memoryview,
    base: FloatArray,
    *,
    n_params: int,
    max_bytes: int,
    copy: bool = False,
) -> FitResult:
    """The :class:`~faultfleet.tasks.FitResult` of ``answer``: its weights decoded from
    ``body`` (a read-only view of it unless ``copy``), Δθ derived against ``base``, the
    model it trained, shape (n_params,).

    Raises
    ------
    WireError
        The body's reasons (:func:`~faultfleet.wire.codec.decode_tensors`).
    """
    weights = decode_tensors(
        body, answer.encoding, {"weights": n_params}, max_bytes=max_bytes, copy=copy
    )["weights"]
    return FitResult(
        answer.agent_id,
        answer.model_key,
        weights,
        None,
        answer.num_samples,
        answer.train_loss,
        base=base,
    )


@dataclass(frozen=True)
class ExcessSamples:
    """An update claiming more training samples than its agent declared when it came online."""

    result: FitResult
    declared: int

    @property
    def agent_reason(self) -> str:
        """Why its task failed."""
        return (
            f"its update claimed {self.result.num_samples} training samples; it declared "
            f"{self.declared}"
        )

    def error(self, tid: str) -> WireError:
        """The rejection (TOO_MANY_SAMPLES) of the update answering task ``tid``."""
        return WireError(
            RejectReason.TOO_MANY_SAMPLES,
            f"update of {self.result.client_id} for task {tid} claims "
            f"{self.result.num_samples} training samples; the agent declared {self.declared} "
            "when it came online",
        )


def excess_samples(result: FitResult, declared: int) -> ExcessSamples | None:
    """The refusal of ``result`` if it claims more than ``declared`` samples, else None: the
    sample count is the update's weight in the average."""
    return ExcessSamples(result, declared) if result.num_samples > declared else None


def evaluation_result(pending: Pending, answer: EvaluationMessage) -> EvaluateResult:
    """The evaluation ``answer`` carries for ``pending``; UNKNOWN_TASK for another model."""
    if answer.model_key not in pending.models or pending.kind != "evaluate":
        raise WireError(
            RejectReason.UNKNOWN_TASK,
            f"evaluation of model {answer.model_key!r}, the task offered {sorted(pending.models)}",
        )
    return EvaluateResult(
        answer.agent_id, answer.model_key, answer.accuracy, answer.loss, answer.num_samples
    )
