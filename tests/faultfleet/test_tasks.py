"""Tests of the fit result's update: given, or derived from the model the client started from."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from faultfleet.tasks import FitResult

BASE = np.array([1.0, 2.0, 3.0], dtype=np.float32)
TRAINED = np.array([1.5, 1.0, 3.25], dtype=np.float32)


def test_a_derived_delta_equals_the_given_one_bit_for_bit() -> None:
    given = FitResult("a", "global", TRAINED, TRAINED - BASE, 10, 0.5)
    derived = FitResult("a", "global", TRAINED, None, 10, 0.5, base=BASE)

    assert derived.delta.tobytes() == given.delta.tobytes()
    assert derived.delta.dtype == np.float32


def test_a_derived_delta_is_made_anew_on_each_read_and_never_kept() -> None:
    result = FitResult("a", "global", TRAINED, None, 10, 0.5, base=BASE)

    first, second = result.delta, result.delta

    assert first is not second
    assert not np.shares_memory(first, TRAINED)


def test_a_result_needs_its_delta_or_its_base() -> None:
    with pytest.raises(ValueError, match="needs its delta or its base"):
        FitResult("a", "global", TRAINED, None, 10, 0.5)


def test_a_result_is_immutable() -> None:
    result = FitResult("a", "global", TRAINED, None, 10, 0.5, base=BASE)

    with pytest.raises(AttributeError, match="immutable"):
        result.num_samples = 11


@pytest.mark.parametrize("derived", [False, True])
def test_a_result_pickles_with_its_fields(derived: bool) -> None:
    result = (
        FitResult("a", "k", TRAINED, None, 10, 0.5, base=BASE)
        if derived
        else FitResult("a", "k", TRAINED, TRAINED - BASE, 10, 0.5)
    )

    copy = pickle.loads(pickle.dumps(result))

    fields = (copy.client_id, copy.model_key, copy.num_samples, copy.train_loss)
    assert fields == ("a", "k", 10, 0.5)
    np.testing.assert_array_equal(copy.weights, TRAINED)
    np.testing.assert_array_equal(copy.delta, TRAINED - BASE)
    assert "client_id='a'" in repr(copy)
