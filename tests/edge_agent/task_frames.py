"""Task frames and a tiny client for the task runner tests (``test_task_runner*.py``).

The client holds random (1, 256) windows of 4 classes and the model is the zoo's "compact"
CNN for them (about 40 k parameters), so a local update takes milliseconds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from edge_agent.task_runner import TaskLimits, TaskRunner
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.types import FloatArray
from faultfleet.wire.codec import (
    encode_frame,
    encode_tensors,
    parse_envelope,
    split_frame,
)
from faultfleet.wire.messages import (
    ANSWER_ADAPTER,
    AnyAnswerMessage,
    AnyTaskMessage,
    EvaluateTaskMessage,
    FitTaskMessage,
    GradientTaskMessage,
    LossesTaskMessage,
    ModelSpec,
    TaskFailedMessage,
    TensorEncoding,
    TrainSpec,
)
from signal_pipeline.federation import ClientData, Dataset
from tests.clocks import WALL_CLOCK_OFFSET_S, FakeClock

CPU = torch.device("cpu")
LIMIT = 8 << 20
NOW = WALL_CLOCK_OFFSET_S
"""Unix time of a fresh :class:`~tests.clocks.FakeClock`: when the tasks are issued."""
N_CLASSES = 4
MODEL = ModelSpec(name="compact", sample_shape=(1, 256), n_classes=N_CLASSES)
TRAIN = TrainSpec(optimizer="adam", learning_rate=1e-3, epochs=2, batch_size=8)
HALF_ZLIB = TensorEncoding(dtype="float16", compression="zlib")
Task = AnyTaskMessage
Answer = AnyAnswerMessage


def windows(n: int, seed: int, length: int = 256) -> Dataset:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 1, length)).astype(np.float32)
    return Dataset(x, rng.integers(0, N_CLASSES, n).astype(np.int64))


def client(train: int = 24, val: int = 8, test: int = 10, length: int = 256) -> ClientData:
    return ClientData(
        "m07",
        0,
        windows(train, 1, length),
        windows(val, 2, length),
        windows(test, 3, length),
    )


def initial_weights(seed: int) -> FloatArray:
    return flatten_weights(build_model(MODEL.name, MODEL.sample_shape, N_CLASSES, seed=seed))


def runner_for(
    data: ClientData | None, agent_id: str = "m07", limits: TaskLimits | None = None
) -> TaskRunner:
    return TaskRunner(
        agent_id, data, CPU, max_payload_bytes=LIMIT, clock=FakeClock(), limits=limits
    )


def _header(task_id: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """Fields every task header of these tests shares."""
    return {
        "task_id": task_id,
        "run_id": "run-1",
        "server_round": 3,
        "agent_id": "m07",
        "model": MODEL,
        "model_keys": keys,
        "issued_at": NOW,
        "deadline_s": 60.0,
    }


def fit_task(keys: tuple[str, ...] = ("cluster-0",), **changes: Any) -> FitTaskMessage:
    fields = _header("task-1", keys) | {"train": TRAIN, "seed": 11}
    return FitTaskMessage(**(fields | changes))


def evaluate_task(keys: tuple[str, ...] = ("cluster-0",), **changes: Any) -> EvaluateTaskMessage:
    return EvaluateTaskMessage(**(_header("task-2", keys) | changes))


def losses_task(keys: tuple[str, ...] = ("cluster-0",), **changes: Any) -> LossesTaskMessage:
    return LossesTaskMessage(**(_header("task-3", keys) | changes))


def gradient_task(keys: tuple[str, ...] = ("cluster-0",), **changes: Any) -> GradientTaskMessage:
    fields = _header("task-4", keys) | {"batch_size": 8, "seed": 5}
    return GradientTaskMessage(**(fields | changes))


def frame(task: Task, weights: dict[str, FloatArray]) -> bytes:
    """The task as the coordinator sends it: its tensors in the task's encoding."""
    return encode_frame(task, encode_tensors(weights, task.encoding))


def answer(runner: TaskRunner, payload: bytes) -> tuple[Answer, bytes]:
    """Parse and run a task frame; the answer's envelope and body as the coordinator reads them."""
    task, body = runner.parse(payload)
    result = runner.run(task, body)
    header, answer_body = split_frame(result.payload, max_bytes=LIMIT)
    message = parse_envelope(ANSWER_ADAPTER, header)
    assert result.kind == message.kind
    assert result.server_round == task.server_round
    return message, answer_body


def failure_reason(runner: TaskRunner, payload: bytes) -> str:
    message, body = answer(runner, payload)
    assert isinstance(message, TaskFailedMessage)
    assert body == b""
    task_id = split_frame(payload, max_bytes=len(payload))[0]["task_id"]
    assert (message.task_id, message.run_id, message.server_round) == (task_id, "run-1", 3)
    return message.reason
