"""An agent's answer to one task frame: local training or evaluation of the models sent.

:class:`TaskRunner` turns a task frame from the coordinator into the answer frame: it
validates the header, decodes the candidate weights (safetensors, checked against the
architecture's parameter count), picks the lowest-loss candidate when there are several
(IFCA), trains with :func:`~edge_agent.training.local_update` or evaluates with
:func:`~edge_agent.training.evaluate`, and encodes the answer as the task asks. Problems
with the agent's own data come back as a ``task_failed`` answer with the reason.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from edge_agent.training import choose_model, evaluate, local_update
from faultfleet.models.weights import parameter_count
from faultfleet.models.zoo import build_model
from faultfleet.wire.codec import (
    WireError,
    decode_tensors,
    encode_frame,
    encode_tensors,
    parse_envelope,
    split_frame,
)
from faultfleet.wire.messages import (
    TASK_ADAPTER,
    EvaluateTaskMessage,
    EvaluationMessage,
    FitTaskMessage,
    FitUpdateMessage,
    ModelSpec,
    TaskFailedMessage,
)
from signal_pipeline.federation import ClientData

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answer:
    """The frame to publish and what it was about."""

    payload: bytes
    kind: str
    """"fit_update", "evaluation" or "task_failed"."""
    server_round: int
    train_seconds: float = 0.0


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
        Held while training or evaluating, so that agents sharing one host (a lab machine
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

    def parse(self, payload: bytes) -> tuple[FitTaskMessage | EvaluateTaskMessage, bytes]:
        """The task header and body; raises ``WireError`` for a frame it cannot read."""
        header, body = split_frame(payload, max_bytes=self.max_payload_bytes)
        return parse_envelope(TASK_ADAPTER, header), body

    def run(self, task: FitTaskMessage | EvaluateTaskMessage, body: bytes) -> Answer:
        """The answer to ``task``; a ``task_failed`` answer if it cannot be done."""
        problem = self._problem(task)
        if problem is not None:
            return self.failed(task, problem)
        model, n_params = self._architecture(task.model)
        try:
            candidates = decode_tensors(
                body,
                task.encoding,
                dict.fromkeys(task.model_keys, n_params),
                max_bytes=self.max_payload_bytes,
            )
        except WireError as error:
            return self.failed(task, f"unreadable weights: {error}")
        assert self.data is not None
        with self.compute_lock:
            started = time.perf_counter()
            key = task.model_keys[0]
            if len(candidates) > 1:
                key, _ = choose_model(model, candidates, self.data.train, device=self.device)
            if isinstance(task, FitTaskMessage):
                update = local_update(
                    model,
                    candidates[key],
                    self.data.train,
                    task.train.config(),
                    task.seed,
                    self.device,
                )
                if not math.isfinite(update.train_loss):
                    return self.failed(
                        task,
                        f"local training diverged (train loss {update.train_loss}); "
                        "lower train.learning_rate",
                    )
                seconds = time.perf_counter() - started
                header = FitUpdateMessage(
                    task_id=task.task_id,
                    run_id=task.run_id,
                    server_round=task.server_round,
                    agent_id=self.agent_id,
                    model_key=key,
                    encoding=task.encoding,
                    num_samples=update.num_samples,
                    train_loss=update.train_loss,
                    train_seconds=seconds,
                )
                body_out = encode_tensors({"weights": update.weights}, task.encoding)
                return Answer(
                    encode_frame(header, body_out), "fit_update", task.server_round, seconds
                )
            split = self.data.splits()[task.split.value]
            result = evaluate(model, candidates[key], split, device=self.device)
        if not math.isfinite(result.loss):
            return self.failed(
                task, f"the model's {task.split} loss is {result.loss}: it has diverged"
            )
        evaluation = EvaluationMessage(
            task_id=task.task_id,
            run_id=task.run_id,
            server_round=task.server_round,
            agent_id=self.agent_id,
            model_key=key,
            accuracy=result.accuracy,
            loss=result.loss,
            num_samples=result.num_samples,
        )
        return Answer(encode_frame(evaluation), "evaluation", task.server_round)

    def _problem(  # noqa: PLR0911 - one early return per reason keeps the reasons readable
        self, task: FitTaskMessage | EvaluateTaskMessage
    ) -> str | None:
        if task.agent_id != self.agent_id:
            return f"task addressed to {task.agent_id!r}, this agent is {self.agent_id!r}"
        if self.clock() > task.deadline:
            return "the task's deadline passed before the agent could start it"
        if self.data is None:
            return "this agent holds no labelled training data (diagnosis only)"
        if isinstance(task, FitTaskMessage) and len(self.data.train) == 0:
            return "this agent holds no training windows"
        if isinstance(task, EvaluateTaskMessage):
            if len(self.data.splits()[task.split.value]) == 0:
                return f"this agent holds no {task.split} windows"
            if len(task.model_keys) > 1 and len(self.data.train) == 0:
                return "this agent holds no training windows to choose a model with"
        shape = tuple(self.data.train.x.shape[1:])
        if shape != tuple(task.model.sample_shape):
            return (
                f"the model takes windows of shape {task.model.sample_shape}, this agent's "
                f"windows have shape {shape}"
            )
        used = [self.data.train.y]
        if isinstance(task, EvaluateTaskMessage):
            used.append(self.data.splits()[task.split.value].y)
        labels = [int(y.min()) for y in used if len(y)] + [int(y.max()) for y in used if len(y)]
        if labels and (min(labels) < 0 or max(labels) >= task.model.n_classes):
            return (
                f"this agent's labels run from {min(labels)} to {max(labels)}, the model "
                f"predicts classes 0 to {task.model.n_classes - 1}"
            )
        try:
            self._architecture(task.model)
        except ValueError as error:  # an unknown name, windows too short for the model
            return f"cannot build model {task.model.name!r}: {error}"
        return None

    def failed(self, task: FitTaskMessage | EvaluateTaskMessage, reason: str) -> Answer:
        """A ``task_failed`` answer to ``task`` saying ``reason`` (cut to 2000 characters)."""
        logger.warning("task %s of round %d failed: %s", task.task_id, task.server_round, reason)
        message = TaskFailedMessage(
            task_id=task.task_id,
            run_id=task.run_id,
            server_round=task.server_round,
            agent_id=self.agent_id,
            reason=reason if len(reason) <= 2000 else reason[:1997] + "...",
        )
        return Answer(encode_frame(message), "task_failed", task.server_round)

    def _architecture(self, spec: ModelSpec) -> tuple[nn.Module, int]:
        if spec not in self._models:
            model = build_model(spec.name, tuple(spec.sample_shape), spec.n_classes).to(self.device)
            self._models[spec] = (model, parameter_count(model))
        return self._models[spec]
