"""Bookkeeping of the tasks of one round in flight, for :mod:`coordinator.mqtt_fleet`.

A :class:`Pending` entry per task sent, collected in a :class:`Collection`; a
:class:`Write` is an accepted update on its way to the round journal. Task ids are
deterministic (:func:`task_id`), which makes answers idempotent by (round, agent) and lets a
restarted coordinator recognise the updates its journal holds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from faultfleet.tasks import EvaluateResult, Failure, FitResult
from faultfleet.types import FloatArray
from faultfleet.wire.codec import RejectReason, WireError, decode_tensors
from faultfleet.wire.messages import EvaluationMessage, FitUpdateMessage


class QuorumError(RuntimeError):
    """Fewer updates than the quorum arrived before the round deadline."""


class RoundAbortedError(RuntimeError):
    """:meth:`MqttFleet.abort` was called while a round waited for answers."""


@dataclass
class Pending:
    task_id: str
    agent_id: str
    server_round: int
    models: Mapping[str, FloatArray]
    kind: str
    result: FitResult | EvaluateResult | None = None
    failure: Failure | None = None
    bytes_up: int = 0
    journaling: bool = False
    """Accepted and being written to the journal; it counts once the write is done."""

    @property
    def done(self) -> bool:
        return self.result is not None or self.failure is not None


@dataclass(frozen=True)
class Write:
    pending: Pending
    result: FitResult | EvaluateResult
    payload: bytes


@dataclass
class Collection:
    pending: dict[str, Pending] = field(default_factory=dict)

    def finished(self) -> bool:
        return all(p.done for p in self.pending.values())

    def writing(self) -> bool:
        return any(p.journaling and not p.done for p in self.pending.values())


def task_id(
    run_id: str, server_round: int, agent_id: str, kind: str, body_sha256: str, seed: int
) -> str:
    """Deterministic id of a task: the same round, agent, weights and seed give the same id."""
    digest = hashlib.sha256()
    for part in (run_id, str(server_round), agent_id, kind, str(seed), body_sha256):
        digest.update(part.encode("utf-8") + b"\0")
    return digest.hexdigest()[:24]


Bodies = dict[tuple[tuple[str, int], ...], tuple[bytes, str]]
"""Encoded task bodies of one dispatch and their SHA-256, by the (key, array) pairs sent:
the tasks of a round mostly share a model, which is then encoded and hashed once."""


def fit_result(
    pending: Pending, answer: FitUpdateMessage, body: bytes, *, n_params: int, max_bytes: int
) -> FitResult:
    """The update ``answer`` carries for ``pending``, its weights decoded and checked.

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
    weights = decode_tensors(body, answer.encoding, {"weights": n_params}, max_bytes=max_bytes)[
        "weights"
    ]
    return FitResult(
        client_id=answer.agent_id,
        model_key=answer.model_key,
        weights=weights,
        delta=weights - pending.models[answer.model_key],
        num_samples=answer.num_samples,
        train_loss=answer.train_loss,
    )


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
