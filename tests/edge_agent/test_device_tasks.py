"""Tests of the probe primitives: per-sample losses, seeded mini-batches, loss and gradient."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn
from torch.func import functional_call

from edge_agent.batching import minibatch
from edge_agent.evaluation import evaluate, loss_and_gradient, per_sample_losses
from faultfleet.models.mlp import Mlp
from faultfleet.models.weights import flatten_weights, split_weights
from faultfleet.tasks import GradientTask
from faultfleet.types import Float64Array, FloatArray
from signal_pipeline.federation import Dataset
from tests.edge_agent.test_training import tiny_cnn, toy_dataset

CPU = torch.device("cpu")


def tiny_mlp() -> nn.Module:
    """Flatten → Linear(4, 5) → ReLU → Linear(5, 3): 43 parameters."""
    torch.manual_seed(3)
    return Mlp((1, 4), 3, (5,))


def three_class_data(n: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 1, 4)).astype(np.float32)
    return Dataset(x, rng.integers(0, 3, n).astype(np.int64))


def indexed_data(n: int) -> Dataset:
    """Sample i holds the value i, so a subset shows which samples it took."""
    x = np.arange(n, dtype=np.float32).reshape(n, 1, 1)
    return Dataset(x, np.zeros(n, dtype=np.int64))


def central_differences(model: nn.Module, weights: FloatArray, data: Dataset) -> Float64Array:
    """The gradient of the mean cross-entropy by central differences, all in float64."""
    model64 = copy.deepcopy(model).double()
    x, y = torch.from_numpy(data.x.astype(np.float64)), torch.from_numpy(data.y)

    def loss(w: Float64Array) -> float:
        params = split_weights(model64, torch.from_numpy(w))
        with torch.no_grad():
            logits = functional_call(model64, params, (x,))
            return float(nn.functional.cross_entropy(logits, y).item())

    step = 1e-6
    w64 = weights.astype(np.float64)
    gradient = np.empty_like(w64)
    for i in range(len(w64)):
        up, down = w64.copy(), w64.copy()
        up[i] += step
        down[i] -= step
        gradient[i] = (loss(up) - loss(down)) / (2 * step)
    return gradient


def test_gradient_equals_central_differences() -> None:
    model, data = tiny_mlp(), three_class_data(6, 0)
    weights = flatten_weights(model)

    _, gradient = loss_and_gradient(model, weights, data.x, data.y, device=CPU)

    assert gradient.shape == weights.shape
    assert gradient.dtype == np.float32
    assert np.abs(gradient).max() > 1e-2
    np.testing.assert_allclose(
        gradient, central_differences(model, weights, data), rtol=1e-4, atol=1e-6
    )


def test_loss_equals_evaluate_on_the_same_batch() -> None:
    model, weights = tiny_cnn(), flatten_weights(tiny_cnn(5))
    batch = minibatch(toy_dataset(20, 1), 8, seed=4)

    loss, _ = loss_and_gradient(model, weights, batch.x, batch.y, device=CPU)

    assert loss == pytest.approx(evaluate(model, weights, batch, device=CPU).loss, rel=1e-6)


def test_loss_and_gradient_leave_the_model_and_weights_alone() -> None:
    model, data = tiny_mlp(), three_class_data(5, 1)
    model.train()
    before = flatten_weights(model)
    weights = flatten_weights(tiny_mlp()) + 0.5
    sent = weights.copy()

    loss_and_gradient(model, weights, data.x, data.y, device=CPU)

    np.testing.assert_array_equal(flatten_weights(model), before)
    np.testing.assert_array_equal(weights, sent)
    assert all(p.grad is None for p in model.parameters())
    assert model.training


def test_loss_and_gradient_rejects_an_empty_batch() -> None:
    model, empty = tiny_mlp(), three_class_data(0, 0)

    with pytest.raises(ValueError, match="non-empty batch"):
        loss_and_gradient(model, flatten_weights(model), empty.x, empty.y, device=CPU)


def test_per_sample_losses_are_evaluates_losses() -> None:
    model, weights, data = tiny_cnn(), flatten_weights(tiny_cnn(2)), toy_dataset(9, 3)

    losses = per_sample_losses(model, weights, data, batch_size=4, device=CPU)

    assert losses.shape == (9,)
    assert losses.dtype == np.float32
    np.testing.assert_array_equal(losses, evaluate(model, weights, data, device=CPU).losses)


def test_minibatch_is_seeded_and_draws_without_replacement() -> None:
    data = indexed_data(10)

    first, again, other = (minibatch(data, 6, seed) for seed in (7, 7, 8))

    np.testing.assert_array_equal(first.x, again.x)
    assert not np.array_equal(first.x, other.x)
    assert len(first) == 6
    assert len(np.unique(first.x)) == 6


def test_minibatch_clips_the_batch_size_to_the_data() -> None:
    batch = minibatch(indexed_data(5), 100, seed=0)

    np.testing.assert_array_equal(np.sort(batch.x.ravel()), np.arange(5))


@pytest.mark.parametrize(
    ("data", "batch_size", "message"),
    [(indexed_data(0), 4, "non-empty dataset"), (indexed_data(3), 0, "batch_size must be")],
)
def test_minibatch_rejects_bad_arguments(data: Dataset, batch_size: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        minibatch(data, batch_size, seed=0)


def test_gradient_task_rejects_a_batch_size_below_one() -> None:
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        GradientTask("a", {}, batch_size=0, seed=0)
