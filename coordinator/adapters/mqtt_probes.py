"""Answers of the probes (losses and gradient tasks) over MQTT, checked and decoded.

:class:`~coordinator.adapters.mqtt_fleet.MqttFleet` sends probes like evaluations — same deadline,
same failures, nothing journaled (a replayed round simply probes again) — and turns every
answer into the in-process result of :mod:`faultfleet.tasks` here. An answer must name
exactly the task's models; per-sample losses must have one entry per sample it reports,
gradients one per weight. :func:`answer_result` decodes an answer of any kind.

Losses travel in float32 whatever the run's encoding: a split's per-sample losses are a few
kilobytes, and float16's three significant digits would blur the differences between
models that a strategy compares. Gradients follow the run's encoding — each one is as large
as the model — scaled per tensor by a power of two (:func:`faultfleet.wire.codec.
scale_exponents`) so that float16 keeps 11 significant bits however small they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from coordinator.adapters.round_tasks import Pending, Result, evaluation_result, fit_result
from faultfleet.tasks import GradientOutcome, GradientResult, LossesOutcome, LossesResult
from faultfleet.wire.codec import RejectReason, WireError, decode_tensors
from faultfleet.wire.messages import (
    EvaluationMessage,
    FitUpdateMessage,
    GradientMessage,
    GradientTaskMessage,
    LossesMessage,
    LossesTaskMessage,
)

ResultMessage = FitUpdateMessage | EvaluationMessage | LossesMessage | GradientMessage


def answer_result(
    pending: Pending,
    answer: ResultMessage,
    body: bytes | memoryview,
    *,
    n_params: int,
    max_bytes: int,
) -> Result:
    """The in-process result ``answer`` carries for ``pending``, checked against the task.

    Raises
    ------
    WireError
        UNKNOWN_TASK for an answer of another kind than the task; the kind's reasons
        otherwise.
    """
    if isinstance(answer, FitUpdateMessage):
        return fit_result(pending, answer, body, n_params=n_params, max_bytes=max_bytes)
    if isinstance(answer, EvaluationMessage):
        return evaluation_result(pending, answer)
    if isinstance(answer, LossesMessage):
        return losses_result(pending, answer, body, max_bytes=max_bytes)
    return gradient_result(pending, answer, body, n_params=n_params, max_bytes=max_bytes)


def losses_result(
    pending: Pending, answer: LossesMessage, body: bytes | memoryview, *, max_bytes: int
) -> LossesResult:
    """The losses ``answer`` carries for the losses task ``pending``.

    Raises
    ------
    WireError
        UNKNOWN_TASK if ``pending`` is no losses task; WRONG_SHAPE for tensors missing,
        extra, or not of length ``num_samples`` (1 when the task asked for means);
        NOT_FINITE, MALFORMED, OVERSIZED from the body.
    """
    task = pending.header
    if not isinstance(task, LossesTaskMessage):
        raise _wrong_kind(pending, answer.kind)
    length = answer.num_samples if task.per_sample else 1
    losses = decode_tensors(
        body, answer.encoding, dict.fromkeys(task.model_keys, length), max_bytes=max_bytes
    )
    ordered = {key: losses[key] for key in task.model_keys}
    return LossesResult(answer.agent_id, ordered, answer.num_samples)


def gradient_result(
    pending: Pending,
    answer: GradientMessage,
    body: bytes | memoryview,
    *,
    n_params: int,
    max_bytes: int,
) -> GradientResult:
    """The losses and gradients ``answer`` carries for the gradient task ``pending``.

    Raises
    ------
    WireError
        UNKNOWN_TASK if ``pending`` is no gradient task; SCHEMA for a batch larger than
        the task asked for; WRONG_SHAPE for losses, exponents or gradient tensors of other
        models than the task's, or gradients of another length than ``n_params``;
        NOT_FINITE (also for a scale that overflows float32), MALFORMED, OVERSIZED.
    """
    task = pending.header
    if not isinstance(task, GradientTaskMessage):
        raise _wrong_kind(pending, answer.kind)
    if answer.num_samples > task.batch_size:
        raise WireError(
            RejectReason.SCHEMA,
            f"gradient of a {answer.num_samples}-sample batch, the task asked for at most "
            f"{task.batch_size}",
        )
    keys = task.model_keys
    _check_keys("losses", answer.losses, keys, exact=True)
    _check_keys("exponents", answer.exponents, keys, exact=False)
    gradients = decode_tensors(
        body,
        answer.encoding,
        dict.fromkeys(keys, n_params),
        max_bytes=max_bytes,
        exponents=answer.exponents,
    )
    return GradientResult(
        answer.agent_id,
        {key: answer.losses[key] for key in keys},
        {key: gradients[key] for key in keys},
        answer.num_samples,
    )


def _check_keys(
    what: str, found: Mapping[str, object], keys: Sequence[str], *, exact: bool
) -> None:
    """WRONG_SHAPE unless ``found`` names exactly ``keys`` (a subset unless ``exact``)."""
    names = set(found)
    if names - set(keys) or (exact and names != set(keys)):
        raise WireError(
            RejectReason.WRONG_SHAPE,
            f"{what} given for models {sorted(names)}, the task sent {sorted(keys)}",
        )


def _wrong_kind(pending: Pending, kind: str) -> WireError:
    return WireError(
        RejectReason.UNKNOWN_TASK,
        f"a {kind} answer to task {pending.task_id}, which is a {pending.kind} task",
    )


def losses_outcome(collection: Sequence[Pending], bytes_down: int) -> LossesOutcome:
    """The results and failures of a dispatch of losses probes, in task order."""
    return LossesOutcome(
        tuple(p.result for p in collection if isinstance(p.result, LossesResult)),
        tuple(p.failure for p in collection if p.failure is not None),
        bytes_down=bytes_down,
        bytes_up=sum(p.bytes_up for p in collection),
    )


def gradient_outcome(collection: Sequence[Pending], bytes_down: int) -> GradientOutcome:
    """The results and failures of a dispatch of gradient probes, in task order."""
    return GradientOutcome(
        tuple(p.result for p in collection if isinstance(p.result, GradientResult)),
        tuple(p.failure for p in collection if p.failure is not None),
        bytes_down=bytes_down,
        bytes_up=sum(p.bytes_up for p in collection),
    )
