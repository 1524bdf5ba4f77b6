"""Tests for signal_pipeline.readers._common: shared checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from signal_pipeline.readers._common import (
    check_label,
    check_positive,
    rates_disagree,
    source_name,
    to_float32_signal,
)
from signal_pipeline.recording import RecordingError


def test_integer_samples_become_float32() -> None:
    # Execute
    samples = to_float32_signal(np.array([-3, 0, 7], dtype=np.int64), "f.npy", "the array")

    # Assert
    assert samples.dtype == np.float32
    np.testing.assert_array_equal(samples, [-3.0, 0.0, 7.0])


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        (np.array([True, False]), "dtype bool"),
        (np.array([1 + 2j]), "dtype complex128"),
        (np.array([1.0, 3.5e38]), "magnitude 3.5e\\+38 at index 1, beyond the float32 range"),
    ],
)
def test_unusable_samples_are_refused(values: np.ndarray, problem: str) -> None:
    # Execute / Assert
    with pytest.raises(RecordingError, match=f"^f.npy: the array .*{problem}"):
        to_float32_signal(values, "f.npy", "the array")


def test_float32_maximum_is_kept() -> None:
    # Prepare: float64 a hair above float32's maximum rounds to it, not to Inf
    biggest = float(np.finfo(np.float32).max)

    # Execute
    samples = to_float32_signal(np.array([biggest * (1 + 1e-9)]), "f.csv", "column 'a'")

    # Assert
    assert samples[0] == np.finfo(np.float32).max


def test_source_name() -> None:
    # Execute / Assert
    assert source_name(Path("a/b.mat"), "X097_DE_time") == "a/b.mat[X097_DE_time]"
    assert source_name(Path("a/b.npy"), None) == "a/b.npy"


def test_argument_checks() -> None:
    # Execute / Assert
    assert check_positive(12000, "fs_hz", "f") == 12000.0
    assert check_positive(None, "fs_hz", "f") is None
    assert check_label(np.int64(3), "label", "f") == 3
    assert check_label(2.0, "label", "f") == 2
    with pytest.raises(RecordingError, match="f: fs_hz must be a number, got '12k'"):
        check_positive("12k", "fs_hz", "f")  # type: ignore[arg-type]
    with pytest.raises(RecordingError, match=r"f: label must be a non-negative integer, got 2\.5"):
        check_label(2.5, "label", "f")


def test_rates_disagree_at_one_percent() -> None:
    # Execute / Assert
    assert not rates_disagree(1000.0, 1009.0)
    assert rates_disagree(1000.0, 1011.0)
