"""Flat weight vectors: counting, flattening, loading and splitting a stack of them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from faultfleet.models.weights import flatten_weights, load_weights, parameter_count, split_weights


def _tiny_model() -> nn.Module:
    """Conv1d(1→2, k=3) + Linear(4→3) for 4-sample windows: 2·3 + 2 + 4·3 + 3 = 23 parameters."""
    return nn.Sequential(nn.Conv1d(1, 2, 3), nn.Flatten(), nn.Linear(4, 3))


def test_parameter_count_matches_hand_count() -> None:
    # Prepare
    model = _tiny_model()

    # Execute
    count = parameter_count(model)

    # Assert
    assert count == 23


def test_flatten_follows_named_parameter_order() -> None:
    # Prepare
    model = _tiny_model()

    # Execute
    flat = flatten_weights(model)

    # Assert
    assert flat.dtype == np.float32
    assert flat.shape == (23,)
    conv_weight = model.get_parameter("0.weight").detach().numpy().ravel()
    linear_bias = model.get_parameter("2.bias").detach().numpy()
    np.testing.assert_array_equal(flat[:6], conv_weight)
    np.testing.assert_array_equal(flat[-3:], linear_bias)


def test_load_then_flatten_round_trips() -> None:
    # Prepare
    model = _tiny_model()
    weights = (np.arange(23) / 10).astype(np.float32)

    # Execute
    load_weights(model, weights)

    # Assert
    np.testing.assert_array_equal(flatten_weights(model), weights)
    assert float(model.get_parameter("0.bias").detach()[1]) == pytest.approx(0.7)


def test_load_changes_the_model_output() -> None:
    # Prepare
    source, target = _tiny_model(), _tiny_model()
    x = torch.randn(5, 1, 4, generator=torch.Generator().manual_seed(0))

    # Execute
    load_weights(target, flatten_weights(source))

    # Assert
    torch.testing.assert_close(target(x), source(x))


@pytest.mark.parametrize("length", [22, 24, 0])
def test_load_rejects_a_vector_of_the_wrong_length(length: int) -> None:
    # Prepare
    model = _tiny_model()

    # Execute / Assert
    with pytest.raises(ValueError, match=r"do not fit a model with 23 parameters"):
        load_weights(model, np.zeros(length, dtype=np.float32))


def test_load_rejects_a_stack_of_vectors() -> None:
    # Prepare
    model = _tiny_model()

    # Execute / Assert
    with pytest.raises(ValueError, match=r"\(2, 23\)"):
        load_weights(model, np.zeros((2, 23), dtype=np.float32))


def test_split_keeps_a_leading_stack_dimension() -> None:
    # Prepare
    model = _tiny_model()
    stack = torch.arange(4 * 23, dtype=torch.float32).reshape(4, 23)

    # Execute
    named = split_weights(model, stack)

    # Assert
    assert list(named) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert named["0.weight"].shape == (4, 2, 1, 3)
    assert named["0.bias"].shape == (4, 2)
    assert named["2.weight"].shape == (4, 3, 4)
    assert named["2.bias"].shape == (4, 3)
    torch.testing.assert_close(named["2.bias"][1], stack[1, -3:])


def test_split_of_one_vector_matches_the_parameter_shapes() -> None:
    # Prepare
    model = _tiny_model()
    flat = torch.from_numpy(flatten_weights(model))

    # Execute
    named = split_weights(model, flat)

    # Assert
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(named[name], parameter.detach())


def test_split_rejects_a_vector_of_the_wrong_length() -> None:
    # Prepare
    model = _tiny_model()

    # Execute / Assert
    with pytest.raises(ValueError, match=r"length 25 does not fit a model with 23 parameters"):
        split_weights(model, torch.zeros(3, 25))


def test_split_weights_rejects_a_vector_too_short() -> None:
    module = torch.nn.Linear(3, 2)
    with pytest.raises(ValueError, match="length 7 does not fit a model with 8 parameters"):
        split_weights(module, torch.zeros(7))
