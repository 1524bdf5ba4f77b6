"""Answers to a round's fit, evaluate and losses tasks, computed for many clients at once.

The vectorised counterpart of :class:`edge_agent.executor.ClientExecutor` (whose module
docstring records the design): the numbers come from
:func:`~faultfleet_apps.simulation.batched_training.batched_local_update` and
:func:`~faultfleet_apps.simulation.batched_training.batched_evaluate`, everything else from
the executor — its preconditions (:meth:`~edge_agent.executor.ClientExecutor.problem`),
IFCA's rule (:func:`~edge_agent.evaluation.lowest_loss_key`) and its divergence rule
(:func:`~edge_agent.executor.fit_answer`, :func:`~edge_agent.executor.evaluation_answer`,
:func:`~edge_agent.executor.losses_answer`). Tasks are keyed by their position in the
round's list; every function returns one answer per task it was given.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from edge_agent.evaluation import Evaluation, lowest_loss_key
from edge_agent.executor import (
    ClientExecutor,
    evaluation_answer,
    fit_answer,
    losses_answer,
)
from faultfleet.tasks import (
    EvaluateResult,
    EvaluateTask,
    Failure,
    FitResult,
    FitTask,
    LossesResult,
    LossesTask,
    TrainConfig,
)
from faultfleet.types import FloatArray
from faultfleet_apps.simulation.batched_training import batched_evaluate, batched_local_update

Candidates = Mapping[str, FloatArray]


def _ready(
    tasks: Mapping[int, FitTask] | Mapping[int, EvaluateTask] | Mapping[int, LossesTask],
    executors: Mapping[int, ClientExecutor],
) -> tuple[list[int], dict[int, Failure]]:
    """The positions whose client can do its task (in order), and failures for the rest."""
    ready: list[int] = []
    failures: dict[int, Failure] = {}
    for position in sorted(tasks):
        problem = executors[position].problem(tasks[position])
        if problem is None:
            ready.append(position)
        else:
            failures[position] = Failure(tasks[position].client_id, problem)
    return ready, failures


def choose(
    model: nn.Module,
    candidates: Mapping[int, Candidates],
    executors: Mapping[int, ClientExecutor],
    device: torch.device,
) -> dict[int, str]:
    """Each position's model key: its only one, or the lowest mean training loss (IFCA),
    the candidates of every client evaluated in one pooled pass per distinct model."""
    keys = {p: next(iter(models)) for p, models in candidates.items() if len(models) == 1}
    contested = [(p, k) for p, models in candidates.items() if len(models) > 1 for k in models]
    evaluations = batched_evaluate(
        model,
        [candidates[p][k] for p, k in contested],
        [executors[p].data.train for p, _ in contested],
        device=device,
    )
    losses: dict[int, list[float]] = {}
    for (p, _), evaluation in zip(contested, evaluations, strict=True):
        losses.setdefault(p, []).append(evaluation.loss)
    for p, loss_list in losses.items():
        keys[p] = lowest_loss_key(list(candidates[p]), loss_list)
    return keys


def batched_fit(
    model: nn.Module,
    tasks: Mapping[int, FitTask],
    executors: Mapping[int, ClientExecutor],
    *,
    device: torch.device,
    max_group: int | None = None,
) -> dict[int, FitResult | Failure]:
    """Local updates of every task, trained together per training config.

    Parameters
    ----------
    model : torch module
        The architecture, called functionally.
    tasks : mapping of position to FitTask
    executors : mapping of position to the ClientExecutor of the task's client
    device : torch.device
    max_group : int, optional
        At most this many clients per vectorised computation (memory).
    """
    ready, failures = _ready(tasks, executors)
    answers: dict[int, FitResult | Failure] = dict(failures)
    models = {p: tasks[p].models for p in ready}
    keys = choose(model, models, executors, device)
    by_config: dict[TrainConfig, list[int]] = {}
    for position in ready:
        by_config.setdefault(tasks[position].config, []).append(position)
    for config, positions in by_config.items():
        trained = batched_local_update(
            model,
            [tasks[p].models[keys[p]] for p in positions],
            [executors[p].data.train for p in positions],
            config,
            [tasks[p].seed for p in positions],
            device,
            max_group,
            proximal=[tasks[p].proximal for p in positions],
        )
        for p, update in zip(positions, trained, strict=True):
            answers[p] = fit_answer(tasks[p], keys[p], update)
    return answers


def batched_evaluations(
    model: nn.Module,
    tasks: Mapping[int, EvaluateTask],
    executors: Mapping[int, ClientExecutor],
    *,
    device: torch.device,
) -> dict[int, EvaluateResult | Failure]:
    """Accuracy and loss of every task's chosen model on its split, pooling the clients
    that share a model."""
    ready, failures = _ready(tasks, executors)
    answers: dict[int, EvaluateResult | Failure] = dict(failures)
    keys = choose(model, {p: tasks[p].models for p in ready}, executors, device)
    evaluations = batched_evaluate(
        model,
        [tasks[p].models[keys[p]] for p in ready],
        [executors[p].data.splits()[tasks[p].split.value] for p in ready],
        device=device,
    )
    for p, evaluation in zip(ready, evaluations, strict=True):
        answers[p] = evaluation_answer(tasks[p], keys[p], evaluation)
    return answers


def batched_losses(
    model: nn.Module,
    tasks: Mapping[int, LossesTask],
    executors: Mapping[int, ClientExecutor],
    *,
    device: torch.device,
) -> dict[int, LossesResult | Failure]:
    """Losses of every task's models on its split; every (task, model) pair is one
    evaluation, and pairs with equal weights are pooled (K cluster models sent to every
    client cost K passes)."""
    ready, failures = _ready(tasks, executors)
    answers: dict[int, LossesResult | Failure] = dict(failures)
    data = {p: executors[p].data.splits()[tasks[p].split.value] for p in ready}
    pairs = [(p, key) for p in ready for key in tasks[p].models]
    evaluations = batched_evaluate(
        model,
        [tasks[p].models[key] for p, key in pairs],
        [data[p] for p, _ in pairs],
        device=device,
    )
    by_task: dict[int, dict[str, Evaluation]] = {p: {} for p in ready}
    for (p, key), evaluation in zip(pairs, evaluations, strict=True):
        by_task[p][key] = evaluation
    for p in ready:
        answers[p] = losses_answer(tasks[p], by_task[p], len(data[p]))
    return answers
