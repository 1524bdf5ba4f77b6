"""What a client does with a task: one implementation for the edge agent and the simulator.

A task (:mod:`faultfleet.tasks`: fit, evaluate, losses, gradient) is answered from the
client's data and a model architecture by :class:`ClientExecutor`, in this order:

1. **Preconditions** on the client's own data (:func:`data_problem`): the windows the task
   needs exist, have the model's sample shape, and carry labels the model can predict. A
   task carrying no model fails too.
2. **The choice among candidates** (IFCA, Ghosh et al. 2020, Alg. 1): a fit or evaluate
   task with several models uses the one of lowest mean loss on the training windows
   (:func:`~edge_agent.evaluation.choose_model`; ties go to the first key).
3. **The computation**, with the task's seed and proximal terms:
   :func:`~edge_agent.training.local_update`, :func:`~edge_agent.evaluation.evaluate`,
   :func:`~edge_agent.batching.minibatch` and :func:`~edge_agent.evaluation.loss_and_gradient`.
4. **The divergence rule** (:func:`fit_answer`, :func:`evaluation_answer`,
   :func:`losses_answer`, :func:`gradient_answer`): a non-finite training loss or trained
   weight, evaluation loss, probe loss or gradient makes the answer a
   :class:`~faultfleet.tasks.Failure` with the reason, never a result. NaN therefore never
   reaches aggregation, in a plant or in a simulation.

Every answer is a result or a :class:`~faultfleet.tasks.Failure`; failure reasons are the
ones an agent sends in its ``task_failed`` answers.

Who calls it
------------
* The edge agent: :class:`edge_agent.task_runner.TaskRunner` decodes a task frame into an
  in-process task, runs it here and encodes the answer (:mod:`edge_agent.frames`).
* The simulator (:class:`faultfleet_apps.simulation.fleet.InProcessFleet`): client by client
  with ``batched=False``, and always for gradient probes.

The vectorised path, and why it is equal
----------------------------------------
A simulated round trains and evaluates its clients together, for speed (a round of 12
clients trains about 1.9 times faster on two CPU cores; docs/federated.md, "Vectorised
training"), in :mod:`faultfleet_apps.simulation.batched_answers`:
``batched_local_update`` trains k clients as rows of one (k, n_params) tensor, in lockstep
over the very batches of :func:`~edge_agent.batching.batch_schedule` (padded and masked, so
each client's loss is the mean over its real samples), with SGD and Adam re-implemented
row-wise; and ``batched_evaluate`` pools the clients that share a model into one pass over the
concatenation of their data (IFCA's candidate losses included). Only the arithmetic
differs — the order in which float sums are taken — so its numbers equal this module's to
float rounding, and the two could choose different candidates only when their losses tie
to the last bits. Everything else is
shared, not re-implemented: the vectorised path checks :meth:`ClientExecutor.problem`,
chooses with :func:`~edge_agent.evaluation.lowest_loss_key` and turns its numbers into
answers with the same divergence rule above.
``tests/faultfleet_apps/simulation/test_batched_answers.py`` checks the two paths task by
task, failures included; ``test_batched_training.py`` beside it checks the training itself
against :func:`~edge_agent.training.local_update` for SGD, momentum and Adam.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from edge_agent.batching import minibatch
from edge_agent.evaluation import Evaluation, choose_model, evaluate, loss_and_gradient
from edge_agent.task_needs import (
    NO_MODEL,
    AnyResult,
    AnyTask,
    DataNeeds,
    TaskKind,
    data_problem,
)
from edge_agent.training import LocalUpdate, local_update
from faultfleet.tasks import (
    EvaluateResult,
    EvaluateTask,
    Failure,
    FitResult,
    FitTask,
    GradientResult,
    GradientTask,
    LossesResult,
    LossesTask,
)
from faultfleet.types import FloatArray
from signal_pipeline.federation import ClientData

__all__ = [
    "NO_MODEL",
    "AnyResult",
    "AnyTask",
    "ClientExecutor",
    "DataNeeds",
    "TaskKind",
    "data_problem",
    "evaluation_answer",
    "fit_answer",
    "gradient_answer",
    "losses_answer",
]


def fit_answer(task: FitTask, model_key: str, update: LocalUpdate) -> FitResult | Failure:
    """The result of training ``model_key`` of ``task``, or a failure if it diverged."""
    if not math.isfinite(update.train_loss):
        return Failure(
            task.client_id,
            f"local training diverged (train loss {update.train_loss}); lower train.learning_rate",
        )
    if not _finite(update.weights):
        bad = int((~np.isfinite(update.weights)).sum())
        return Failure(
            task.client_id,
            f"local training diverged ({bad} trained weights are NaN or infinite); "
            "lower train.learning_rate",
        )
    return FitResult(
        task.client_id,
        model_key,
        update.weights,
        update.delta,
        update.num_samples,
        update.train_loss,
    )


def evaluation_answer(
    task: EvaluateTask, model_key: str, evaluation: Evaluation
) -> EvaluateResult | Failure:
    """The result of evaluating ``model_key`` of ``task``, or a failure if its loss is not
    finite."""
    if not math.isfinite(evaluation.loss):
        return Failure(
            task.client_id, f"the model's {task.split} loss is {evaluation.loss}: it has diverged"
        )
    return EvaluateResult(
        task.client_id, model_key, evaluation.accuracy, evaluation.loss, evaluation.num_samples
    )


def losses_answer(
    task: LossesTask, evaluations: Mapping[str, Evaluation], num_samples: int
) -> LossesResult | Failure:
    """The losses of every model of ``task`` (``evaluations`` by key, in the task's order),
    or a failure naming the first model whose loss is not finite."""
    losses: dict[str, FloatArray] = {}
    for key in task.models:
        evaluation = evaluations[key]
        if not math.isfinite(evaluation.loss):
            return Failure(
                task.client_id,
                f"model {key!r}'s {task.split} loss is {evaluation.loss}: it has diverged",
            )
        mean = np.array([evaluation.loss], dtype=np.float32)
        losses[key] = evaluation.losses if task.per_sample else mean
    return LossesResult(task.client_id, losses, num_samples)


def gradient_answer(
    task: GradientTask, answers: Mapping[str, tuple[float, FloatArray]], num_samples: int
) -> GradientResult | Failure:
    """The (loss, gradient) of every model of ``task``, or a failure naming the first model
    whose loss or gradient is not finite."""
    for key in task.models:
        loss, gradient = answers[key]
        if not (math.isfinite(loss) and _finite(gradient)):
            return Failure(
                task.client_id, f"model {key!r}'s loss or gradient is not finite: it has diverged"
            )
    return GradientResult(
        task.client_id,
        {key: answers[key][0] for key in task.models},
        {key: answers[key][1] for key in task.models},
        num_samples,
    )


def _finite(values: FloatArray) -> bool:
    """Whether every value is finite: a float64 sum of float32 values overflows only if one
    of them is infinite or NaN (one pass, no temporary boolean array)."""
    with np.errstate(invalid="ignore"):
        return math.isfinite(float(np.sum(values, dtype=np.float64)))


class ClientExecutor:
    """Answers the tasks of one client from its data.

    Parameters
    ----------
    data : ClientData
        The client's train/val/test windows.
    model : torch module
        The architecture of every task's weights, on ``device``; called functionally or
        copied, never changed.
    sample_shape : sequence of int
        The window shape the model takes, e.g. (1, 1024).
    n_classes : int
        The classes the model predicts, 0 to ``n_classes - 1``.
    device : torch.device
    """

    def __init__(
        self,
        data: ClientData,
        model: nn.Module,
        *,
        sample_shape: Sequence[int],
        n_classes: int,
        device: torch.device,
    ) -> None:
        self.data = data
        self.model = model
        self.sample_shape = tuple(sample_shape)
        self.n_classes = n_classes
        self.device = device

    def problem(self, task: AnyTask) -> str | None:
        """Why this client cannot do ``task`` (see :func:`data_problem`); None if it can."""
        if not task.models:
            return NO_MODEL
        return data_problem(self.data, DataNeeds.of_task(task), self.sample_shape, self.n_classes)

    def execute(self, task: AnyTask) -> AnyResult | Failure:
        """The answer to ``task``, whichever its kind."""
        if isinstance(task, FitTask):
            return self.fit(task)
        if isinstance(task, EvaluateTask):
            return self.evaluate(task)
        if isinstance(task, LossesTask):
            return self.losses(task)
        return self.gradients(task)

    def choose(self, models: Mapping[str, FloatArray]) -> str:
        """The only key of ``models``, or that of lowest training loss (IFCA)."""
        if len(models) == 1:
            return next(iter(models))
        key, _ = choose_model(self.model, models, self.data.train, device=self.device)
        return key

    def fit(self, task: FitTask) -> FitResult | Failure:
        """Train the chosen model ``task.config.epochs`` epochs with the task's seed and
        proximal terms (FLACC Algorithm 1, lines 7–8)."""
        problem = self.problem(task)
        if problem is not None:
            return Failure(task.client_id, problem)
        key = self.choose(task.models)
        update = local_update(
            self.model,
            task.models[key],
            self.data.train,
            task.config,
            task.seed,
            self.device,
            proximal=task.proximal,
        )
        return fit_answer(task, key, update)

    def evaluate(self, task: EvaluateTask) -> EvaluateResult | Failure:
        """Accuracy and mean loss of the chosen model on the task's split."""
        problem = self.problem(task)
        if problem is not None:
            return Failure(task.client_id, problem)
        key = self.choose(task.models)
        split = self.data.splits()[task.split.value]
        return evaluation_answer(
            task, key, evaluate(self.model, task.models[key], split, device=self.device)
        )

    def losses(self, task: LossesTask) -> LossesResult | Failure:
        """Per-sample (or mean) losses of every model of the task on its split."""
        problem = self.problem(task)
        if problem is not None:
            return Failure(task.client_id, problem)
        split = self.data.splits()[task.split.value]
        evaluations: dict[str, Evaluation] = {}
        for key, weights in task.models.items():
            evaluations[key] = evaluate(self.model, weights, split, device=self.device)
            if not math.isfinite(evaluations[key].loss):
                break  # the answer is this model's failure: spare the other models
        return losses_answer(task, evaluations, len(split))

    def gradients(self, task: GradientTask) -> GradientResult | Failure:
        """Loss and gradient of every model of the task on one seeded mini-batch."""
        problem = self.problem(task)
        if problem is not None:
            return Failure(task.client_id, problem)
        batch = minibatch(self.data.train, task.batch_size, task.seed)
        answers: dict[str, tuple[float, FloatArray]] = {}
        for key, weights in task.models.items():
            answers[key] = loss_and_gradient(
                self.model, weights, batch.x, batch.y, device=self.device
            )
            loss, gradient = answers[key]
            if not (math.isfinite(loss) and _finite(gradient)):
                break  # the answer is this model's failure: spare the other models
        return gradient_answer(task, answers, len(batch))
