"""What a task needs of a client's data, checked from its header before any weights or torch.

:class:`DataNeeds` says which windows a task uses (known from its kind, split and number of
models) and :func:`data_problem` says why a client's data cannot serve it. Both the
simulator and the edge agent check tasks with them: the agent before it decodes a task's
weights (:class:`~edge_agent.task_runner.TaskRunner`), and
:class:`~edge_agent.executor.ClientExecutor` before it computes. They need numpy only, so
that an agent refuses the tasks it cannot do without loading torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from faultfleet.tasks import (
    EvaluateResult,
    EvaluateTask,
    FitResult,
    FitTask,
    GradientResult,
    GradientTask,
    LossesResult,
    LossesTask,
    Split,
)
from signal_pipeline.federation import ClientData

AnyTask = FitTask | EvaluateTask | LossesTask | GradientTask
AnyResult = FitResult | EvaluateResult | LossesResult | GradientResult
TaskKind = Literal["fit", "evaluate", "losses", "gradient"]
NO_MODEL = "task carries no model"


@dataclass(frozen=True)
class DataNeeds:
    """What a task uses of a client's data: known from its header, before any weights."""

    train: bool = False
    """Training windows to train on or to draw a batch from (fit, gradient)."""
    split: Split | None = None
    """The split the task evaluates or probes (evaluate, losses)."""
    choice: bool = False
    """Training windows to choose among several candidate models with (evaluate)."""

    @classmethod
    def of(cls, kind: TaskKind, *, split: Split | None = None, n_models: int = 1) -> DataNeeds:
        """The needs of a task of ``kind`` on ``split`` carrying ``n_models`` models."""
        if kind in ("fit", "gradient"):
            return cls(train=True)
        return cls(split=split, choice=kind == "evaluate" and n_models > 1)

    @classmethod
    def of_task(cls, task: AnyTask) -> DataNeeds:
        """The needs of an in-process task."""
        if isinstance(task, FitTask):
            return cls.of("fit")
        if isinstance(task, GradientTask):
            return cls.of("gradient")
        if isinstance(task, EvaluateTask):
            return cls.of("evaluate", split=task.split, n_models=len(task.models))
        return cls.of("losses", split=task.split)


def data_problem(
    data: ClientData, needs: DataNeeds, sample_shape: Sequence[int], n_classes: int
) -> str | None:
    """Why ``data`` cannot serve a task with ``needs`` for a model of ``sample_shape`` and
    ``n_classes`` classes; None when it can."""
    if needs.train and len(data.train) == 0:
        return "this agent holds no training windows"
    split = needs.split
    if split is not None and len(data.splits()[split.value]) == 0:
        return f"this agent holds no {split} windows"
    if needs.choice and len(data.train) == 0:
        return "this agent holds no training windows to choose a model with"
    shape = tuple(data.train.x.shape[1:])
    if shape != tuple(sample_shape):
        return (
            f"the model takes windows of shape {tuple(sample_shape)}, this agent's "
            f"windows have shape {shape}"
        )
    used = [data.train.y]
    if split is not None:
        used.append(data.splits()[split.value].y)
    labels = [int(y.min()) for y in used if len(y)] + [int(y.max()) for y in used if len(y)]
    if labels and (min(labels) < 0 or max(labels) >= n_classes):
        return (
            f"this agent's labels run from {min(labels)} to {max(labels)}, the model "
            f"predicts classes 0 to {n_classes - 1}"
        )
    return None
