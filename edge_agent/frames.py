"""Task frames into in-process tasks, and the executor's answers into answer frames.

The agent's half of the wire for tasks: :func:`in_process_task` turns a task header and its
decoded tensors into the :mod:`faultfleet.tasks` dataclass that
:class:`~edge_agent.executor.ClientExecutor` answers, and :func:`answer_frame` encodes the
answer as the task asks — fit weights and gradients in the task's encoding (gradients
scaled by a power of two per tensor, :func:`~faultfleet.wire.codec.scale_exponents`),
losses always in float32 (see :mod:`coordinator.adapters.mqtt_probes`), and a
failure as a ``task_failed`` answer with its reason (:func:`failed_frame`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from edge_agent.task_needs import AnyResult, AnyTask, DataNeeds
from faultfleet.tasks import (
    EvaluateResult,
    EvaluateTask,
    FitResult,
    FitTask,
    GradientResult,
    GradientTask,
    LossesResult,
    LossesTask,
    Proximal,
)
from faultfleet.types import FloatArray
from faultfleet.wire.codec import encode_frame, encode_tensors, scale_exponents
from faultfleet.wire.messages import (
    AnyTaskMessage,
    EvaluateTaskMessage,
    EvaluationMessage,
    FitTaskMessage,
    FitUpdateMessage,
    GradientMessage,
    LossesMessage,
    LossesTaskMessage,
    TaskFailedMessage,
    TensorEncoding,
)

REASON_CHARACTERS = 2000
"""The longest reason a ``task_failed`` answer carries (longer ones are cut)."""


@dataclass(frozen=True)
class Answer:
    """The frame to publish and what it was about."""

    payload: bytes
    kind: str
    """The answer's kind: "fit_update", "evaluation", "losses_result", "gradient_result" or
    "task_failed"."""
    server_round: int
    train_seconds: float = 0.0


def data_needs(task: AnyTaskMessage) -> DataNeeds:
    """What ``task`` uses of the agent's data, read from its header alone."""
    split = task.split if isinstance(task, EvaluateTaskMessage | LossesTaskMessage) else None
    return DataNeeds.of(task.kind, split=split, n_models=len(task.model_keys))


def in_process_task(task: AnyTaskMessage, tensors: Mapping[str, FloatArray]) -> AnyTask:
    """``task`` with its decoded body ``tensors`` (every name of ``task.tensor_names()``),
    as the in-process dataclass of :mod:`faultfleet.tasks`."""
    models = {key: tensors[key] for key in task.model_keys}
    if isinstance(task, FitTaskMessage):
        proximal = tuple(Proximal(tensors[p.tensor], p.strength, p.part) for p in task.proximal)
        return FitTask(task.agent_id, models, task.train.config(), task.seed, proximal)
    if isinstance(task, EvaluateTaskMessage):
        return EvaluateTask(task.agent_id, models, task.split)
    if isinstance(task, LossesTaskMessage):
        return LossesTask(task.agent_id, models, task.split, task.per_sample)
    return GradientTask(task.agent_id, models, task.batch_size, task.seed)


def answer_frame(
    task: AnyTaskMessage, answer: AnyResult, agent_id: str, *, train_seconds: float = 0.0
) -> Answer:
    """The frame in which agent ``agent_id`` answers ``task`` with ``answer``;
    ``train_seconds`` goes with a fit update."""
    fields = answer_fields(task, agent_id)
    if isinstance(answer, FitResult):
        header = FitUpdateMessage(
            **fields,
            model_key=answer.model_key,
            encoding=task.encoding,
            num_samples=answer.num_samples,
            train_loss=answer.train_loss,
            train_seconds=train_seconds,
        )
        body = encode_tensors({"weights": answer.weights}, task.encoding)
        return Answer(encode_frame(header, body), "fit_update", task.server_round, train_seconds)
    if isinstance(answer, EvaluateResult):
        evaluation = EvaluationMessage(
            **fields,
            model_key=answer.model_key,
            accuracy=answer.accuracy,
            loss=answer.loss,
            num_samples=answer.num_samples,
        )
        return Answer(encode_frame(evaluation), "evaluation", task.server_round)
    if isinstance(answer, LossesResult):
        encoding = TensorEncoding(dtype="float32", compression=task.encoding.compression)
        losses = LossesMessage(**fields, encoding=encoding, num_samples=answer.num_samples)
        body = encode_tensors(answer.losses, encoding)
        return Answer(encode_frame(losses, body), "losses_result", task.server_round)
    return _gradient_frame(task, answer, fields)


def _gradient_frame(task: AnyTaskMessage, answer: GradientResult, fields: dict[str, Any]) -> Answer:
    exponents = {k: e for k, e in scale_exponents(answer.gradients, task.encoding).items() if e}
    header = GradientMessage(
        **fields,
        encoding=task.encoding,
        num_samples=answer.num_samples,
        losses=dict(answer.losses),
        exponents=exponents,
    )
    body = encode_tensors(answer.gradients, task.encoding, exponents=exponents)
    return Answer(encode_frame(header, body), "gradient_result", task.server_round)


def failed_frame(task: AnyTaskMessage, agent_id: str, reason: str) -> Answer:
    """Agent ``agent_id``'s ``task_failed`` answer to ``task`` saying ``reason`` (cut to
    2000 characters)."""
    cut = reason if len(reason) <= REASON_CHARACTERS else reason[: REASON_CHARACTERS - 3] + "..."
    message = TaskFailedMessage(**answer_fields(task, agent_id), reason=cut)
    return Answer(encode_frame(message), "task_failed", task.server_round)


def answer_fields(task: AnyTaskMessage, agent_id: str) -> dict[str, Any]:
    """The fields every answer of agent ``agent_id`` to ``task`` carries."""
    return {
        "task_id": task.task_id,
        "run_id": task.run_id,
        "server_round": task.server_round,
        "agent_id": agent_id,
    }
