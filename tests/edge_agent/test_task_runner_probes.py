"""Tests of the task runner's probes (losses, gradient) and proximal fit terms.

As for fit and evaluate, an answer must equal the reference primitive of
:mod:`edge_agent.training` or :mod:`edge_agent.evaluation` on the same weights, data and
seed; float16 only rounds what travels.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edge_agent.batching import minibatch
from edge_agent.evaluation import evaluate, loss_and_gradient
from edge_agent.training import local_update
from faultfleet.models.zoo import build_model
from faultfleet.tasks import ModelPart, Proximal, Split
from faultfleet.types import FloatArray
from faultfleet.wire.codec import decode_tensors, encode_frame, encode_tensors
from faultfleet.wire.messages import (
    FitUpdateMessage,
    GradientMessage,
    LossesMessage,
    ProximalSpec,
    TensorEncoding,
    TrainSpec,
)
from signal_pipeline.federation import ClientData
from tests.edge_agent.task_frames import (
    CPU,
    HALF_ZLIB,
    LIMIT,
    MODEL,
    N_CLASSES,
    TRAIN,
    answer,
    client,
    failure_reason,
    fit_task,
    frame,
    gradient_task,
    initial_weights,
    losses_task,
    runner_for,
)

KEYS = ("cluster-0", "cluster-1")


@pytest.fixture(scope="module")
def data() -> ClientData:
    return client()


@pytest.fixture(scope="module")
def architecture() -> torch.nn.Module:
    return build_model(MODEL.name, MODEL.sample_shape, N_CLASSES)


@pytest.fixture(scope="module")
def models() -> dict[str, FloatArray]:
    return {KEYS[0]: initial_weights(1), KEYS[1]: initial_weights(2)}


# -- losses ----------------------------------------------------------------------------------


@pytest.mark.parametrize("split", [Split.VAL, Split.TEST, Split.TRAIN])
def test_per_sample_losses_equal_the_reference_for_every_model(
    data: ClientData, architecture: torch.nn.Module, models: dict[str, FloatArray], split: Split
) -> None:
    held = data.splits()[split.value]

    message, body = answer(runner_for(data), frame(losses_task(KEYS, split=split), models))

    assert isinstance(message, LossesMessage)
    assert (message.task_id, message.agent_id, message.num_samples) == ("task-3", "m07", len(held))
    assert message.encoding == TensorEncoding()
    losses = decode_tensors(body, message.encoding, dict.fromkeys(KEYS, len(held)), max_bytes=LIMIT)
    for key, weights in models.items():
        expected = evaluate(architecture, weights, held, device=CPU).losses
        np.testing.assert_array_equal(losses[key], expected)


def test_mean_losses_are_one_float_per_model(
    data: ClientData, architecture: torch.nn.Module, models: dict[str, FloatArray]
) -> None:
    message, body = answer(runner_for(data), frame(losses_task(KEYS, per_sample=False), models))

    assert isinstance(message, LossesMessage)
    assert message.num_samples == len(data.val)
    losses = decode_tensors(body, message.encoding, dict.fromkeys(KEYS, 1), max_bytes=LIMIT)
    for key, weights in models.items():
        expected = evaluate(architecture, weights, data.val, device=CPU).loss
        assert losses[key][0] == np.float32(expected)


def test_losses_stay_float32_when_the_task_is_float16(
    data: ClientData, architecture: torch.nn.Module, models: dict[str, FloatArray]
) -> None:
    message, body = answer(runner_for(data), frame(losses_task(KEYS, encoding=HALF_ZLIB), models))

    assert isinstance(message, LossesMessage)
    assert message.encoding == TensorEncoding(dtype="float32", compression="zlib")
    losses = decode_tensors(
        body, message.encoding, dict.fromkeys(KEYS, len(data.val)), max_bytes=LIMIT
    )
    received = models[KEYS[0]].astype(np.float16).astype(np.float32)
    expected = evaluate(architecture, received, data.val, device=CPU).losses
    np.testing.assert_array_equal(losses[KEYS[0]], expected)


# -- gradients -------------------------------------------------------------------------------


def test_gradients_equal_the_reference_on_the_seeded_minibatch(
    data: ClientData, architecture: torch.nn.Module, models: dict[str, FloatArray]
) -> None:
    batch = minibatch(data.train, 8, 5)

    message, body = answer(runner_for(data), frame(gradient_task(KEYS), models))

    assert isinstance(message, GradientMessage)
    assert (message.task_id, message.num_samples, message.exponents) == ("task-4", 8, {})
    assert list(message.losses) == list(KEYS)
    n_params = len(models[KEYS[0]])
    gradients = decode_tensors(
        body, message.encoding, dict.fromkeys(KEYS, n_params), max_bytes=LIMIT
    )
    for key, weights in models.items():
        loss, gradient = loss_and_gradient(architecture, weights, batch.x, batch.y, device=CPU)
        assert message.losses[key] == loss
        np.testing.assert_array_equal(gradients[key], gradient)


def test_a_batch_larger_than_the_data_is_clipped(data: ClientData) -> None:
    message, _ = answer(
        runner_for(data), frame(gradient_task(batch_size=1000), {"cluster-0": initial_weights(0)})
    )

    assert isinstance(message, GradientMessage)
    assert message.num_samples == len(data.train)


def test_float16_gradients_are_scaled_and_keep_eleven_significant_bits(
    data: ClientData, architecture: torch.nn.Module, models: dict[str, FloatArray]
) -> None:
    batch = minibatch(data.train, 8, 5)

    message, body = answer(runner_for(data), frame(gradient_task(KEYS, encoding=HALF_ZLIB), models))

    assert isinstance(message, GradientMessage)
    assert message.encoding == HALF_ZLIB
    assert set(message.exponents) == set(KEYS)
    n_params = len(models[KEYS[0]])
    gradients = decode_tensors(
        body,
        HALF_ZLIB,
        dict.fromkeys(KEYS, n_params),
        max_bytes=LIMIT,
        exponents=message.exponents,
    )
    for key, weights in models.items():
        received = weights.astype(np.float16).astype(np.float32)
        _, exact = loss_and_gradient(architecture, received, batch.x, batch.y, device=CPU)
        largest = float(np.abs(exact).max())
        # Entries within 2**29 of the largest are normal float16 numbers after scaling.
        np.testing.assert_allclose(gradients[key], exact, rtol=2.0**-11, atol=largest * 2.0**-40)


# -- proximal terms --------------------------------------------------------------------------


@pytest.mark.parametrize("part", ["all", "embedding"])
def test_a_proximal_fit_equals_the_reference_local_update(
    data: ClientData, architecture: torch.nn.Module, part: ModelPart
) -> None:
    start, target = initial_weights(0), initial_weights(5)
    terms = (
        ProximalSpec(tensor="cluster-0", strength=0.5),
        ProximalSpec(tensor="global", strength=2.0, part=part),
    )
    task = fit_task(proximal=terms)

    message, body = answer(runner_for(data), frame(task, {"cluster-0": start, "global": target}))

    expected = local_update(
        architecture,
        start,
        data.train,
        TRAIN.config(),
        11,
        CPU,
        proximal=[Proximal(start, 0.5), Proximal(target, 2.0, part)],
    )
    assert isinstance(message, FitUpdateMessage)
    assert message.model_key == "cluster-0"
    assert message.train_loss == expected.train_loss
    weights = decode_tensors(body, message.encoding, {"weights": len(start)}, max_bytes=LIMIT)
    np.testing.assert_array_equal(weights["weights"], expected.weights)


def test_a_huge_proximal_strength_keeps_the_weights_at_the_target(data: ClientData) -> None:
    start, target = initial_weights(0), initial_weights(5)
    # SGD with learning_rate · strength = 1 jumps onto the target and stays there.
    sgd = TrainSpec(optimizer="sgd", learning_rate=1e-4, epochs=2, batch_size=8)
    task = fit_task(train=sgd, proximal=(ProximalSpec(tensor="target", strength=1e4),))

    message, body = answer(runner_for(data), frame(task, {"cluster-0": start, "target": target}))

    assert isinstance(message, FitUpdateMessage)
    weights = decode_tensors(body, message.encoding, {"weights": len(start)}, max_bytes=LIMIT)
    assert np.abs(start - target).max() > 0.1
    np.testing.assert_allclose(weights["weights"], target, atol=1e-3)


# -- failures --------------------------------------------------------------------------------


def test_a_losses_probe_of_an_empty_split_fails() -> None:
    payload = frame(losses_task(split=Split.TEST), {"cluster-0": initial_weights(0)})

    assert failure_reason(runner_for(client(test=0)), payload) == "this agent holds no test windows"


def test_a_gradient_probe_needs_training_windows() -> None:
    payload = frame(gradient_task(), {"cluster-0": initial_weights(0)})

    assert failure_reason(runner_for(client(train=0)), payload) == (
        "this agent holds no training windows"
    )


def test_a_diverged_model_fails_its_probes(data: ClientData) -> None:
    weights = {"cluster-0": initial_weights(0), "wild": initial_weights(0) * np.float32(1e30)}

    losses = failure_reason(runner_for(data), frame(losses_task(("cluster-0", "wild")), weights))
    gradient = failure_reason(
        runner_for(data), frame(gradient_task(("cluster-0", "wild")), weights)
    )

    assert losses == "model 'wild''s val loss is nan: it has diverged"
    assert gradient == "model 'wild''s loss or gradient is not finite: it has diverged"


def test_a_fit_without_its_proximal_target_has_unreadable_weights(data: ClientData) -> None:
    task = fit_task(proximal=(ProximalSpec(tensor="target", strength=1.0),))
    body = encode_tensors({"cluster-0": initial_weights(0)}, TensorEncoding())

    reason = failure_reason(runner_for(data), encode_frame(task, body))

    assert reason.startswith("unreadable weights: expected tensors ['cluster-0', 'target']")


def test_an_answer_above_the_payload_limit_fails(data: ClientData) -> None:
    runner = runner_for(data)
    task, body = runner.parse(frame(gradient_task(), {"cluster-0": initial_weights(0)}))
    runner.max_payload_bytes = 100_000

    result = runner.run(task, body)

    assert result.kind == "task_failed"
    assert b"above broker.max_payload_bytes=100000" in result.payload
