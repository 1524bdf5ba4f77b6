"""Tests of the task runner's ``task_failed`` answers: each names what went wrong.

A task the agent cannot do must still be answered, so the coordinator need not wait for the
round's deadline.
"""

from __future__ import annotations

import numpy as np
import pytest

from edge_agent.task_runner import TaskRunner
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.tasks import Split
from faultfleet.wire.codec import (
    RejectReason,
    WireError,
    encode_frame,
    encode_tensors,
)
from faultfleet.wire.messages import (
    FitUpdateMessage,
    ModelSpec,
    TensorEncoding,
    TrainSpec,
)
from signal_pipeline.federation import ClientData, Dataset
from tests.edge_agent.task_frames import (
    CPU,
    HALF_ZLIB,
    N_CLASSES,
    client,
    evaluate_task,
    failure_reason,
    fit_task,
    frame,
    initial_weights,
    runner_for,
)


@pytest.fixture(scope="module")
def data() -> ClientData:
    return client()


def test_a_task_for_another_agent_fails(data: ClientData) -> None:
    payload = frame(fit_task(agent_id="m08"), {"cluster-0": initial_weights(0)})

    reason = failure_reason(runner_for(data), payload)

    assert reason == "task addressed to 'm08', this agent is 'm07'"


def test_an_agent_without_data_fails_every_task() -> None:
    weights = {"cluster-0": initial_weights(0)}

    for payload in (frame(fit_task(), weights), frame(evaluate_task(), weights)):
        reason = failure_reason(runner_for(None), payload)

        assert reason == "this agent holds no labelled training data (diagnosis only)"


def test_an_agent_without_training_windows_cannot_fit() -> None:
    runner = runner_for(client(train=0))

    reason = failure_reason(runner, frame(fit_task(), {"cluster-0": initial_weights(0)}))

    assert reason == "this agent holds no training windows"


def test_an_evaluation_of_an_empty_split_fails() -> None:
    runner = runner_for(client(val=0))
    payload = frame(evaluate_task(split=Split.VAL), {"cluster-0": initial_weights(0)})

    reason = failure_reason(runner, payload)

    assert reason == "this agent holds no val windows"


def test_choosing_among_candidates_needs_training_windows() -> None:
    runner = runner_for(client(train=0))
    weights = {"a": initial_weights(0), "b": initial_weights(1)}

    reason = failure_reason(runner, frame(evaluate_task(keys=("a", "b")), weights))

    assert reason == "this agent holds no training windows to choose a model with"


def test_a_model_for_other_window_shapes_fails(data: ClientData) -> None:
    other = ModelSpec(name="compact", sample_shape=(1, 512), n_classes=N_CLASSES)
    weights = flatten_weights(build_model("compact", (1, 512), N_CLASSES))

    reason = failure_reason(runner_for(data), frame(fit_task(model=other), {"cluster-0": weights}))

    assert reason == (
        "the model takes windows of shape (1, 512), this agent's windows have shape (1, 256)"
    )


@pytest.mark.parametrize(
    ("name", "length", "message"),
    [
        ("resnet", 256, "unknown model name='resnet'"),
        ("compact", 64, "window_length=64 is too short for model 'compact'"),
    ],
)
def test_a_model_the_agent_cannot_build_fails(name: str, length: int, message: str) -> None:
    spec = ModelSpec(name=name, sample_shape=(1, length), n_classes=N_CLASSES)
    payload = encode_frame(fit_task(model=spec), b"")

    reason = failure_reason(runner_for(client(length=length)), payload)

    assert reason.startswith(f"cannot build model {name!r}")
    assert message in reason


def test_labels_beyond_the_models_classes_fail(data: ClientData) -> None:
    small = ModelSpec(name="compact", sample_shape=(1, 256), n_classes=2)
    weights = flatten_weights(build_model("compact", (1, 256), 2))

    reason = failure_reason(runner_for(data), frame(fit_task(model=small), {"cluster-0": weights}))

    assert reason == "this agent's labels run from 0 to 3, the model predicts classes 0 to 1"


def test_negative_labels_fail() -> None:
    data = client()
    labels = data.train.y.copy()
    labels[0] = -1
    odd = ClientData("m07", 0, Dataset(data.train.x, labels), data.val, data.test)

    reason = failure_reason(runner_for(odd), frame(fit_task(), {"cluster-0": initial_weights(0)}))

    assert reason == "this agent's labels run from -1 to 3, the model predicts classes 0 to 3"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"garbage", "not safetensors"),
        (encode_tensors({"cluster-0": np.ones(10, np.float32)}, TensorEncoding()), "model needs"),
        (encode_tensors({"cluster-9": np.ones(10, np.float32)}, TensorEncoding()), "expected"),
        (encode_tensors({"cluster-0": np.ones(10, np.float16)}, HALF_ZLIB), "not safetensors"),
    ],
)
def test_unreadable_weights_fail(data: ClientData, body: bytes, message: str) -> None:
    payload = encode_frame(fit_task(), body)

    reason = failure_reason(runner_for(data), payload)

    assert reason.startswith("unreadable weights: ")
    assert message in reason


def test_non_finite_weights_fail(data: ClientData) -> None:
    weights = initial_weights(0)
    weights[5] = np.nan

    reason = failure_reason(runner_for(data), frame(fit_task(), {"cluster-0": weights}))

    assert reason == "unreadable weights: tensor 'cluster-0' holds 1 NaN or infinite values"


def test_diverged_training_fails_instead_of_sending_nan(data: ClientData) -> None:
    wild = TrainSpec(optimizer="sgd", learning_rate=1e30, epochs=1, batch_size=8)

    reason = failure_reason(
        runner_for(data), frame(fit_task(train=wild), {"cluster-0": initial_weights(0)})
    )

    assert reason.startswith("local training diverged (train loss nan)")


def test_a_diverged_model_fails_its_evaluation(data: ClientData) -> None:
    huge = initial_weights(0) * np.float32(1e30)

    reason = failure_reason(runner_for(data), frame(evaluate_task(), {"cluster-0": huge}))

    assert reason == "the model's test loss is nan: it has diverged"


def test_frames_the_agent_cannot_read_raise_wire_errors(data: ClientData) -> None:
    runner = runner_for(data)
    update = encode_frame(
        FitUpdateMessage(
            task_id="t",
            run_id="r",
            server_round=1,
            agent_id="m07",
            model_key="k",
            num_samples=1,
            train_loss=0.1,
        )
    )

    with pytest.raises(WireError) as malformed:
        runner.parse(b"not a frame")
    with pytest.raises(WireError) as schema:
        runner.parse(update)
    with pytest.raises(WireError) as oversized:
        TaskRunner("m07", data, CPU, max_payload_bytes=1024).parse(b"FFW1" + bytes(2000))

    assert malformed.value.reason is RejectReason.MALFORMED
    assert schema.value.reason is RejectReason.SCHEMA
    assert oversized.value.reason is RejectReason.OVERSIZED
