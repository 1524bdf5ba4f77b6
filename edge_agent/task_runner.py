"""An agent's answer to one task frame: decode, execute, encode.

:class:`TaskRunner` turns a task frame from the coordinator into the answer frame:

1. it reads the header and refuses what this agent must not or cannot do before reading any
   weights — a task for another agent, one past its deadline, any task when the agent holds
   no labelled data, a task its data cannot serve
   (:func:`~edge_agent.executor.data_problem`), a model it cannot build;
2. it decodes the weights (safetensors, checked against the architecture's parameter count)
   into the in-process task (:func:`~edge_agent.frames.in_process_task`);
3. :class:`~edge_agent.executor.ClientExecutor` answers it — the same code the simulator
   runs for its clients; the executor's module docstring says what it does and why it is
   the one implementation;
4. the answer is encoded as the task asks (:func:`~edge_agent.frames.answer_frame`).

Problems with the agent's own data, a diverged model, or an answer too large to publish
come back as a ``task_failed`` answer with the reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import torch
from torch import nn

from edge_agent.executor import ClientExecutor, data_problem
from edge_agent.frames import Answer, answer_frame, data_needs, failed_frame, in_process_task
from faultfleet.models.weights import parameter_count
from faultfleet.models.zoo import build_model
from faultfleet.tasks import Failure
from faultfleet.wire.codec import WireError, decode_tensors, parse_envelope, split_frame
from faultfleet.wire.messages import TASK_ADAPTER, AnyTaskMessage, ModelSpec
from signal_pipeline.federation import ClientData

__all__ = ["Answer", "TaskRunner"]

logger = logging.getLogger(__name__)


class TaskRunner:
    """Runs the tasks of one agent on its data.

    Parameters
    ----------
    agent_id : str
    data : ClientData or None
        The agent's train/val/test windows; None for an agent without labelled data.
    device : torch.device
    max_payload_bytes : int
    compute_lock : threading.Lock, optional
        Held while computing an answer, so that agents sharing one host (a lab machine
        running many simulated agents) take turns instead of oversubscribing the cores.
    clock : callable
        Unix time, seconds.
    """

    def __init__(
        self,
        agent_id: str,
        data: ClientData | None,
        device: torch.device,
        *,
        max_payload_bytes: int,
        compute_lock: threading.Lock | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.agent_id = agent_id
        self.data = data
        self.device = device
        self.max_payload_bytes = max_payload_bytes
        self.compute_lock = compute_lock or threading.Lock()
        self.clock = clock
        self._models: dict[ModelSpec, tuple[nn.Module, int]] = {}

    def parse(self, payload: bytes) -> tuple[AnyTaskMessage, bytes]:
        """The task header and body; raises ``WireError`` for a frame it cannot read."""
        header, body = split_frame(payload, max_bytes=self.max_payload_bytes)
        return parse_envelope(TASK_ADAPTER, header), body

    def run(self, task: AnyTaskMessage, body: bytes) -> Answer:
        """The answer to ``task``; a ``task_failed`` answer if it cannot be done."""
        problem = self._problem(task)
        if problem is not None:
            return self.failed(task, problem)
        assert self.data is not None
        model, n_params = self._architecture(task.model)
        try:
            tensors = decode_tensors(
                body,
                task.encoding,
                dict.fromkeys(task.tensor_names(), n_params),
                max_bytes=self.max_payload_bytes,
            )
        except WireError as error:
            return self.failed(task, f"unreadable weights: {error}")
        executor = ClientExecutor(
            self.data,
            model,
            sample_shape=task.model.sample_shape,
            n_classes=task.model.n_classes,
            device=self.device,
        )
        with self.compute_lock:
            started = time.perf_counter()
            result = executor.execute(in_process_task(task, tensors))
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
        if self.clock() > task.deadline:
            return "the task's deadline passed before the agent could start it"
        if self.data is None:
            return "this agent holds no labelled training data (diagnosis only)"
        spec = task.model
        problem = data_problem(self.data, data_needs(task), spec.sample_shape, spec.n_classes)
        if problem is not None:
            return problem
        try:
            self._architecture(spec)
        except ValueError as error:  # an unknown name, windows too short for the model
            return f"cannot build model {spec.name!r}: {error}"
        return None

    def failed(self, task: AnyTaskMessage, reason: str) -> Answer:
        """A ``task_failed`` answer to ``task`` saying ``reason`` (cut to 2000 characters)."""
        logger.warning("task %s of round %d failed: %s", task.task_id, task.server_round, reason)
        return failed_frame(task, self.agent_id, reason)

    def _architecture(self, spec: ModelSpec) -> tuple[nn.Module, int]:
        if spec not in self._models:
            model = build_model(spec.name, tuple(spec.sample_shape), spec.n_classes).to(self.device)
            self._models[spec] = (model, parameter_count(model))
        return self._models[spec]
