"""A :class:`~coordinator.engine.fleet.Fleet` whose clients are the datasets of a federation.

:class:`InProcessFleet` answers the coordinator's tasks in this process with the agents'
own code: every client has an :class:`edge_agent.executor.ClientExecutor`, which checks the
client's data, makes IFCA's choice among candidate models, trains, evaluates or probes, and
turns a diverged model into a :class:`~faultfleet.tasks.Failure` — what an edge agent does
with a task frame, less the frames. With ``batched=True`` (the default) a round's fit,
evaluate and losses tasks are computed together
(:mod:`~faultfleet_apps.simulation.batched_answers`), equal to the executor to float
rounding; gradient probes, and every task with ``batched=False``, go client by client
through the executor. The executor's module docstring records the design. With ``lanes``
above 1 (the simulator's choice on the CPU) every task list is split among that many
compute lanes, side by side on one torch thread each
(:mod:`~faultfleet_apps.simulation.lanes`).

Offline or unknown clients, and clients that are not members (:meth:`InProcessFleet.set_clients`),
come back as failures, as over MQTT. An optional codec
(:mod:`~faultfleet_apps.simulation.wire_codec`) carries the weights as the wire would, for
wire-precision experiments.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from functools import partial
from typing import TypeVar

import torch
from torch import nn

from edge_agent.batching import select_device
from edge_agent.executor import ClientExecutor
from faultfleet.tasks import (
    EvaluateOutcome,
    EvaluateResult,
    EvaluateTask,
    Failure,
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
from faultfleet_apps.simulation.batched_answers import (
    batched_evaluations,
    batched_fit,
    batched_losses,
)
from faultfleet_apps.simulation.lanes import Lanes
from faultfleet_apps.simulation.stacked_forward import stacked_step_function
from faultfleet_apps.simulation.wire_codec import (
    WeightCodec,
    carry_fit_result,
    carry_fit_task,
    carry_gradients,
    carry_models,
)
from signal_pipeline.federation import Federation

AnyTask = FitTask | EvaluateTask | LossesTask | GradientTask
ModelTask = TypeVar("ModelTask", EvaluateTask, LossesTask, GradientTask)
ResultT = TypeVar("ResultT")
TaskT = TypeVar("TaskT", FitTask, EvaluateTask, LossesTask, GradientTask)
AnswerT = TypeVar("AnswerT")
BatchedAnswers = Callable[
    [nn.Module, Mapping[int, TaskT], Mapping[int, ClientExecutor]], Mapping[int, AnswerT]
]
"""(model, tasks by position, their executors) -> answers by position: one kind, batched."""


class InProcessFleet:
    """The clients of ``federation``, trained and evaluated in this process.

    Parameters
    ----------
    federation : Federation
        Client datasets; every client is a member, in the federation's order, until
        :meth:`set_clients` says otherwise.
    model : torch module
        The architecture of every task's weights; its own parameters are never used.
    device : torch.device, optional
        Defaults to ``select_device("auto")`` (CUDA when present).
    batched : bool
        Answer a round's fit, evaluate and losses tasks together (default) or client by
        client with :class:`~edge_agent.executor.ClientExecutor`; answers agree to float
        rounding.
    max_group : int, optional
        At most this many clients per vectorised computation (memory); default all.
    offline : collection of client ids
        Clients that start offline: their tasks fail.
    codec : WeightCodec, optional
        Carry every task's weights, and the weights and gradients of the answers, through
        this codec as the wire would (:mod:`~faultfleet_apps.simulation.wire_codec`); byte
        counts are then its encoded sizes. Default: weights pass untouched.
    lanes : int
        Share every task list's clients among this many compute lanes, side by side on
        one torch thread each (:mod:`~faultfleet_apps.simulation.lanes`); default 1, the
        calling thread with its torch threads. Answers agree to float rounding.
    """

    def __init__(
        self,
        federation: Federation,
        model: nn.Module,
        *,
        device: torch.device | None = None,
        batched: bool = True,
        max_group: int | None = None,
        offline: Collection[str] = (),
        codec: WeightCodec | None = None,
        lanes: int = 1,
    ) -> None:
        if max_group is not None and max_group < 1:
            raise ValueError(f"max_group must be >= 1 or None, got {max_group}")
        # the batched path traces each lane's model: once, here, not beside a computing lane
        self._lanes = Lanes(model, lanes, prepare=stacked_step_function if batched else None)
        self.federation = federation
        self.model = model
        self.device = select_device("auto") if device is None else device
        self.batched = batched
        self.max_group = max_group
        self.codec = codec
        self._executors = {
            c.client_id: ClientExecutor(
                c,
                model,
                sample_shape=federation.sample_shape,
                n_classes=federation.n_classes,
                device=self.device,
            )
            for c in federation.clients
        }
        self._members: frozenset[str] = frozenset(self._executors)
        self._offline: frozenset[str] = frozenset()
        self.set_offline(offline)

    def client_ids(self) -> list[str]:
        """The members of the federation, in its order."""
        return [c.client_id for c in self.federation.clients if c.client_id in self._members]

    def set_clients(self, clients: Sequence[str]) -> None:
        """The federation after machines joined or left, between rounds.

        From now on :meth:`client_ids` and :meth:`available` cover only ``clients`` (still
        in the federation's order, whatever the order given); tasks for any other client
        come back as failures ("not a member").

        Raises
        ------
        ValueError
            An id is repeated or is not a client of the federation.
        """
        if len(set(clients)) != len(clients):
            raise ValueError(f"members must be unique, got {list(clients)}")
        unknown = self._unknown(clients)
        if unknown:
            raise ValueError(
                f"cannot make unknown clients {unknown} members; the federation's clients "
                f"are {list(self._executors)}"
            )
        self._members = frozenset(clients)

    def available(self) -> list[str]:
        """Members that are not offline, in the federation's order."""
        return [c for c in self.client_ids() if c not in self._offline]

    def set_offline(self, client_ids: Collection[str]) -> None:
        """Make exactly ``client_ids`` offline (the others come back online); any client
        of the federation may be offline, member or not."""
        unknown = self._unknown(client_ids)
        if unknown:
            raise ValueError(
                f"cannot take unknown clients {unknown} offline; known clients are "
                f"{list(self._executors)}"
            )
        self._offline = frozenset(client_ids)

    def _unknown(self, client_ids: Collection[str]) -> list[str]:
        """The ids among ``client_ids`` that are not clients of the federation, sorted."""
        return sorted(set(client_ids) - self._executors.keys())

    def fit(self, server_round: int, tasks: Sequence[FitTask]) -> FitOutcome:
        """Local updates for ``tasks``; ``server_round`` is not needed (seeds come in tasks).

        ``bytes_down`` counts every weight array of every task (what a broker would carry,
        failed tasks included: the models, and proximal targets that are not one of them)
        and ``bytes_up`` the weights of every result.
        """
        if self.codec is None:
            sent, bytes_down = list(tasks), sum(_fit_task_bytes(task) for task in tasks)
        else:
            carried = [carry_fit_task(task, self.codec) for task in tasks]
            sent, bytes_down = [t for t, _ in carried], sum(n for _, n in carried)
        executors, failures = self._reach(sent)
        answers: dict[int, FitResult | Failure] = dict(failures)

        fit = partial(batched_fit, device=self.device, max_group=self.max_group)
        answers.update(self._in_lanes(sent, executors, fit, ClientExecutor.fit))
        bytes_up = 0
        for position, answer in answers.items():
            if not isinstance(answer, FitResult):
                continue
            if self.codec is None:
                bytes_up += int(answer.weights.nbytes)
            else:
                sent_models = tasks[position].models
                answers[position], size = carry_fit_result(answer, sent_models, self.codec)
                bytes_up += size
        return FitOutcome(*_split(answers), bytes_down=bytes_down, bytes_up=bytes_up)

    def evaluate(self, server_round: int, tasks: Sequence[EvaluateTask]) -> EvaluateOutcome:
        """Accuracy and loss of each task's model (IFCA choice on train data) on its split."""
        sent, _ = self._carry(tasks)
        executors, failures = self._reach(sent)
        answers: dict[int, EvaluateResult | Failure] = dict(failures)

        evaluations = partial(batched_evaluations, device=self.device)
        answers.update(self._in_lanes(sent, executors, evaluations, ClientExecutor.evaluate))
        return EvaluateOutcome(*_split(answers))

    def losses(self, server_round: int, tasks: Sequence[LossesTask]) -> LossesOutcome:
        """Losses of every task's models on its split; ``server_round`` is not needed.

        Batched, every (task, model) pair is one evaluation and pairs for equal weights are
        pooled (:func:`~faultfleet_apps.simulation.batched_answers.batched_losses`): K
        cluster models sent to every client cost K passes. ``bytes_down`` counts every
        weight array of every task, ``bytes_up`` the loss arrays of every result (float32,
        whatever the codec: losses travel in float32).
        """
        sent, bytes_down = self._carry(tasks)
        executors, failures = self._reach(sent)
        answers: dict[int, LossesResult | Failure] = dict(failures)

        losses = partial(batched_losses, device=self.device)
        answers.update(self._in_lanes(sent, executors, losses, ClientExecutor.losses))
        results, refusals = _split(answers)
        return LossesOutcome(
            results=results,
            failures=refusals,
            bytes_down=bytes_down,
            bytes_up=sum(int(a.nbytes) for r in results for a in r.losses.values()),
        )

    def gradients(self, server_round: int, tasks: Sequence[GradientTask]) -> GradientOutcome:
        """Loss and gradient of every task's models on one mini-batch of its client's
        training data, the same batch for all of them, client by client through the
        executor; ``server_round`` is not needed.

        ``bytes_down`` counts every weight array of every task, ``bytes_up`` the gradients
        of every result.
        """
        sent, bytes_down = self._carry(tasks)
        executors, failures = self._reach(sent)
        answers: dict[int, GradientResult | Failure] = dict(failures)

        answers.update(self._in_lanes(sent, executors, None, ClientExecutor.gradients))
        bytes_up = 0
        for position, answer in answers.items():
            if not isinstance(answer, GradientResult):
                continue
            if self.codec is None:
                bytes_up += sum(int(g.nbytes) for g in answer.gradients.values())
            else:
                answers[position], size = carry_gradients(answer, self.codec)
                bytes_up += size
        return GradientOutcome(*_split(answers), bytes_down=bytes_down, bytes_up=bytes_up)

    def _in_lanes(
        self,
        sent: Sequence[TaskT],
        executors: Mapping[int, ClientExecutor],
        batched: BatchedAnswers[TaskT, AnswerT] | None,
        one: Callable[[ClientExecutor, TaskT], AnswerT],
    ) -> dict[int, AnswerT]:
        """The answers to the tasks at the positions of ``executors``, computed in the
        fleet's lanes: together by ``batched`` on the batched path (when there is one for
        the kind), else one task at a time by ``one`` with the lane's executor."""

        def lane(model: nn.Module, positions: list[int]) -> Mapping[int, AnswerT]:
            if batched is not None and self.batched:
                tasks = {p: sent[p] for p in positions}
                return batched(model, tasks, {p: executors[p] for p in positions})
            return {p: one(Lanes.executor(executors[p], model), sent[p]) for p in positions}

        return self._lanes.run(_loads(executors), lane)

    def _carry(self, tasks: Sequence[ModelTask]) -> tuple[list[ModelTask], int]:
        """The tasks as clients receive them, and the bytes of their weights."""
        if self.codec is None:
            return list(tasks), sum(int(w.nbytes) for t in tasks for w in t.models.values())
        carried = [carry_models(task, self.codec) for task in tasks]
        return [t for t, _ in carried], sum(n for _, n in carried)

    def _reach(
        self, tasks: Sequence[AnyTask]
    ) -> tuple[dict[int, ClientExecutor], dict[int, Failure]]:
        """The executors of the tasks' clients, by position, and failures for the tasks
        whose client is unknown, not a member or offline."""
        executors: dict[int, ClientExecutor] = {}
        failures: dict[int, Failure] = {}
        for position, task in enumerate(tasks):
            executor = self._executors.get(task.client_id)
            if executor is None:
                reason = f"unknown client: not in federation {self.federation.name!r}"
            elif task.client_id not in self._members:
                reason = "client is not a member: it left or has not joined"
            elif task.client_id in self._offline:
                reason = "client is offline"
            else:
                executors[position] = executor
                continue
            failures[position] = Failure(task.client_id, reason)
        return executors, failures


def _loads(executors: Mapping[int, ClientExecutor]) -> dict[int, int]:
    """Each position's share of a lane's work: its client's training windows (evaluation
    splits are in proportion to them)."""
    return {p: len(executor.data.train) for p, executor in executors.items()}


def _split(
    answers: Mapping[int, ResultT | Failure],
) -> tuple[tuple[ResultT, ...], tuple[Failure, ...]]:
    """The results and the failures among ``answers``, each in task order."""
    ordered = [answer for _, answer in sorted(answers.items())]
    failures = tuple(a for a in ordered if isinstance(a, Failure))
    return tuple(a for a in ordered if not isinstance(a, Failure)), failures


def _fit_task_bytes(task: FitTask) -> int:
    """Weight bytes a fit task carries: its models and the proximal targets besides them."""
    models = list(task.models.values())
    extra = [p.target for p in task.proximal if not any(p.target is m for m in models)]
    return sum(int(w.nbytes) for w in (*models, *extra))
