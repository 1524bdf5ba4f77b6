"""An agent's answer to one task frame: decode, execute, encode.

:class:`TaskRunner` turns a task frame from the coordinator into the answer frame:

1. it reads the header and refuses what this agent must not or cannot do before reading any
   weights — a task for another agent, one whose deadline passed while it waited in the
   agent's queue, one outside the agent's limits (:class:`TaskLimits`: more epochs or
   classes than allowed, another model than the run's), any task when the agent holds no
   labelled data, a task its data cannot serve
   (:func:`~edge_agent.executor.data_problem`), a model it cannot build;
2. it decodes the weights (safetensors, checked against the architecture's parameter count)
   into the in-process task (:func:`~edge_agent.frames.in_process_task`);
3. :class:`~edge_agent.executor.ClientExecutor` answers it — the same code the simulator
   runs for its clients; the executor's module docstring says what it does and why it is
   the one implementation (through :class:`~edge_agent.task_compute.TaskCompute`, the
   only part that needs torch: it is imported at the first task that passes step 1, so
   that an agent loads torch only once it is asked to train);
4. the answer is encoded as the task asks (:func:`~edge_agent.frames.answer_frame`).

Problems with the agent's own data, a diverged model, or an answer too large to publish
come back as a ``task_failed`` answer with the reason.

Deadlines are durations: a task says when it was issued on the coordinator's clock
(``issued_at``) and how long the coordinator waits (``deadline_s``). The agent counts
``deadline_s`` on its own monotonic clock from the moment the frame arrived, so an agent
whose wall clock is hours off still answers in time; ``issued_at`` only measures the skew
(:meth:`TaskRunner.clock_skew_s`).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edge_agent.compute_turns import ComputeTurns
from edge_agent.frames import Answer, answer_frame, data_needs, failed_frame, in_process_task
from edge_agent.task_needs import data_problem
from faultfleet.clock import SYSTEM_CLOCK, Clock
from faultfleet.tasks import Failure
from faultfleet.wire.codec import WireError, decode_tensors, parse_envelope, split_frame
from faultfleet.wire.messages import TASK_ADAPTER, AnyTaskMessage, FitTaskMessage, ModelSpec
from signal_pipeline.federation import ClientData

if TYPE_CHECKING:  # torch loads with the first task, not with the agent
    import torch

    from edge_agent.task_compute import TaskCompute

__all__ = ["Answer", "TaskLimits", "TaskRunner"]

logger = logging.getLogger(__name__)

_REASON_DETAILS = re.compile(r"'[^']*'|\d+(\.\d+)?")
"""Numbers and quoted names in a failure reason: what differs between failures of a kind."""


@dataclass(frozen=True)
class TaskLimits:
    """What an agent accepts of a task (the agent's ``[tasks]`` settings).

    Attributes
    ----------
    max_epochs : int
        Most local epochs of a fit task: one task cannot hold the compute lock of a process
        for hours while the other agents of that process wait.
    max_classes : int
        Most output classes of a task's model.
    max_cached_models : int
        Built architectures kept between tasks, least recently used dropped first.
    """

    max_epochs: int = 50
    max_classes: int = 256
    max_cached_models: int = 4


class TaskRunner:
    """Runs the tasks of one agent on its data.

    Parameters
    ----------
    agent_id : str
    data : ClientData or None
        The agent's train/val/test windows; None for an agent without labelled data.
    device : str or torch.device
        Where tasks compute (``"cpu"``, ``"cuda"``); torch is imported at the first task.
    max_payload_bytes : int
    compute_lock : context manager, optional
        Held while computing an answer, so that agents sharing one host (a lab machine
        running many simulated agents) take turns instead of oversubscribing the cores.
    clock : Clock
        Wall-clock time for the skew, monotonic time for deadlines.
    limits : TaskLimits
    run_model : callable, optional
        The (run id, model spec) of the model the agent follows, or None before it has one:
        a task of that run must name that model.
    data_for_task : callable, optional
        Called as each task starts: the data for that task (newly labelled data joins
        between tasks, never during one; :mod:`edge_agent.labelled_data`). Without it the
        runner keeps ``data``.
    training_threads : callable, optional
        Torch threads for a task on a model of the given number of parameters, set as its
        turn begins (:class:`faultfleet_apps.thread_policy.TrainingThreads`). Without it
        tasks compute with torch's current setting.
    """

    def __init__(
        self,
        agent_id: str,
        data: ClientData | None,
        device: str | torch.device,
        *,
        max_payload_bytes: int,
        compute_lock: AbstractContextManager[object] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        limits: TaskLimits | None = None,
        run_model: Callable[[], tuple[str, ModelSpec] | None] | None = None,
        data_for_task: Callable[[], ClientData | None] | None = None,
        training_threads: Callable[[int], int] | None = None,
    ) -> None:
        self.agent_id = agent_id
        self.training_threads = training_threads
        self.data = data
        self.device = device
        self.max_payload_bytes = max_payload_bytes
        self.compute_lock: AbstractContextManager[object] = compute_lock or ComputeTurns()
        self.clock = clock
        self.limits = limits or TaskLimits()
        self.run_model = run_model
        self.data_for_task = data_for_task
        self._compute: TaskCompute | None = None
        self._failures_logged: set[str] = set()

    def parse(self, payload: bytes) -> tuple[AnyTaskMessage, bytes]:
        """The task header and body; raises ``WireError`` for a frame it cannot read."""
        header, body = split_frame(payload, max_bytes=self.max_payload_bytes)
        return parse_envelope(TASK_ADAPTER, header), body

    def clock_skew_s(self, task: AnyTaskMessage, received_at: float) -> float:
        """The agent's wall clock minus the coordinator's, seconds (positive: the agent is
        ahead), from a task received at Unix time ``received_at`` (transit time included)."""
        return received_at - task.issued_at

    def run(self, task: AnyTaskMessage, body: bytes, received_s: float | None = None) -> Answer:
        """The answer to ``task``; a ``task_failed`` answer if it cannot be done.

        ``received_s`` is the clock's monotonic time when the frame arrived (now by default);
        the task's ``deadline_s`` counts from it.
        """
        if self.data_for_task is not None:
            self.data = self.data_for_task()
        waited_s = 0.0 if received_s is None else self.clock.monotonic() - received_s
        if waited_s > task.deadline_s:
            return self.failed(
                task,
                f"the task's deadline passed before the agent could start it (it waited "
                f"{waited_s:.1f} s in the agent's queue, deadline {task.deadline_s:g} s)",
            )
        problem = self._problem(task)
        if problem is not None:
            return self.failed(task, problem)
        assert self.data is not None
        compute = self.compute()
        n_params = compute.parameter_count(task.model)
        try:
            tensors = decode_tensors(
                body,
                task.encoding,
                dict.fromkeys(task.tensor_names(), n_params),
                max_bytes=self.max_payload_bytes,
            )
        except WireError as error:
            return self.failed(task, f"unreadable weights: {error}")
        with self.compute_lock:
            started = time.perf_counter()
            threads = None if self.training_threads is None else self.training_threads(n_params)
            result = compute.execute(
                self.data, task.model, in_process_task(task, tensors), threads=threads
            )
            seconds = time.perf_counter() - started
        if isinstance(result, Failure):
            return self.failed(task, result.reason)
        answer = answer_frame(task, result, self.agent_id, train_seconds=seconds)
        if len(answer.payload) > self.max_payload_bytes:
            return self.failed(
                task,
                f"the answer holds {len(answer.payload)} bytes, above "
                f"broker.max_payload_bytes={self.max_payload_bytes}; send fewer models per "
                "task or set [wire] dtype = 'float16'",
            )
        return answer

    def _problem(self, task: AnyTaskMessage) -> str | None:
        """Why this agent cannot do ``task``, from its header alone; None if it can."""
        if task.agent_id != self.agent_id:
            return f"task addressed to {task.agent_id!r}, this agent is {self.agent_id!r}"
        limit = self._limit_problem(task)
        if limit is not None:
            return limit
        if self.data is None:
            return "this agent holds no labelled training data (diagnosis only)"
        spec = task.model
        problem = data_problem(self.data, data_needs(task), spec.sample_shape, spec.n_classes)
        if problem is not None:
            return problem
        try:
            self.compute().parameter_count(spec)
        except ValueError as error:  # an unknown name, windows too short for the model
            return f"cannot build model {spec.name!r}: {error}"
        return None

    def _limit_problem(self, task: AnyTaskMessage) -> str | None:
        """Why ``task`` is outside this agent's limits or the run's model; None if inside."""
        limits = self.limits
        if isinstance(task, FitTaskMessage) and task.train.epochs > limits.max_epochs:
            return (
                f"train.epochs={task.train.epochs} is above this agent's limit of "
                f"{limits.max_epochs} ([tasks] max_epochs); lower the coordinator's [train] epochs"
            )
        if task.model.n_classes > limits.max_classes:
            return (
                f"the model has {task.model.n_classes} classes, above this agent's limit of "
                f"{limits.max_classes} ([tasks] max_classes)"
            )
        followed = self.run_model() if self.run_model is not None else None
        if followed is not None and followed[0] == task.run_id and followed[1] != task.model:
            return (
                f"run {task.run_id!r} uses model {followed[1].model_dump()}, the task names "
                f"{task.model.model_dump()}"
            )
        return None

    def failed(self, task: AnyTaskMessage, reason: str) -> Answer:
        """A ``task_failed`` answer to ``task`` saying ``reason`` (cut to 2000 characters).

        Logged as a warning the first time for each kind of reason (its text without the
        numbers and quoted names it holds), at debug level after that: a stream of tasks
        failing alike — hostile frames on an open broker, say — cannot flood the journal.
        """
        kind = _REASON_DETAILS.sub("…", reason)[:200]
        level = logging.DEBUG if kind in self._failures_logged else logging.WARNING
        self._failures_logged.add(kind)
        logger.log(
            level,
            "%s: task %s of round %d failed: %s",
            self.agent_id,
            task.task_id,
            task.server_round,
            reason,
        )
        return failed_frame(task, self.agent_id, reason)

    @property
    def cached_models(self) -> int:
        """Architectures currently kept built (0 before the first task)."""
        return 0 if self._compute is None else self._compute.cached_models

    def compute(self) -> TaskCompute:
        """The torch half of the tasks, imported and created at the first call.

        Runners that share a :class:`~edge_agent.compute_turns.ComputeTurns` (the agents of
        one process) share one, so they keep one built copy of each architecture: the
        executor uses an architecture only during its runner's turn and never changes it.
        """
        if self._compute is None:
            from edge_agent.task_compute import TaskCompute  # noqa: PLC0415 (loads torch)

            def create() -> TaskCompute:
                return TaskCompute(self.device, max_cached_models=self.limits.max_cached_models)

            if isinstance(self.compute_lock, ComputeTurns):
                key = (TaskCompute, str(self.device), self.limits.max_cached_models)
                shared = self.compute_lock.shared(key, create)
                assert isinstance(shared, TaskCompute)
                self._compute = shared
            else:
                self._compute = create()
        return self._compute
