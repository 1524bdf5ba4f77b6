"""Tests for signal_pipeline.windowing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view

from signal_pipeline.recording import Recording, RecordingError
from signal_pipeline.windowing import count_windows, sliding_windows, window_recording


@pytest.mark.parametrize(
    ("n_samples", "window_length", "stride", "expected"),
    [
        (10, 4, 3, 3),  # starts 0, 3, 6; samples 0..9 all used
        (10, 4, 4, 2),  # starts 0, 4; samples 8, 9 dropped
        (10, 10, 1, 1),
        (9, 10, 1, 0),
        (0, 1, 1, 0),
        (10, 1, 1, 10),
        (10, 2, 100, 1),
    ],
)
def test_count_windows_hand_checked(
    n_samples: int, window_length: int, stride: int, expected: int
) -> None:
    # Execute / Assert
    assert count_windows(n_samples, window_length, stride) == expected


def test_sliding_windows_of_arange_are_hand_checkable() -> None:
    # Prepare
    signal = np.arange(10, dtype=np.float32)

    # Execute
    windows = sliding_windows(signal, window_length=4, stride=3)

    # Assert
    expected = np.array([[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]], dtype=np.float32)
    np.testing.assert_array_equal(windows, expected)
    assert windows.dtype == np.float32
    assert windows.flags.c_contiguous
    assert windows.flags.owndata


def test_sliding_windows_drops_the_tail() -> None:
    # Prepare
    signal = np.arange(11, dtype=np.float32)

    # Execute
    windows = sliding_windows(signal, window_length=4, stride=4)

    # Assert: samples 8, 9 and 10 do not fill a window
    np.testing.assert_array_equal(windows, [[0, 1, 2, 3], [4, 5, 6, 7]])


def test_sliding_windows_copies_so_writes_do_not_reach_the_signal() -> None:
    # Prepare
    signal = np.arange(8, dtype=np.float32)
    windows = sliding_windows(signal, window_length=4, stride=2)

    # Execute
    windows[:] = -1.0

    # Assert
    np.testing.assert_array_equal(signal, np.arange(8))


@pytest.mark.parametrize(
    "signal",
    [
        np.arange(30, dtype=np.float64),  # converted while copying
        np.arange(30, dtype=np.int16),
        np.arange(60, dtype=np.float32)[::2],  # not contiguous
        np.arange(40, dtype=np.float32)[10:],  # offset view
    ],
    ids=["float64", "int16", "strided", "offset"],
)
def test_sliding_windows_accepts_other_layouts_and_dtypes(signal: np.ndarray) -> None:
    # Execute
    windows = sliding_windows(signal, window_length=7, stride=5)

    # Assert
    expected = sliding_window_view(signal, 7)[::5].astype(np.float32)
    np.testing.assert_array_equal(windows, expected)
    assert windows.dtype == np.float32
    assert not np.shares_memory(windows, signal)


def test_sliding_windows_works_on_read_only_input() -> None:
    # Prepare
    signal = np.arange(10, dtype=np.float32)
    signal.flags.writeable = False

    # Execute
    windows = sliding_windows(signal, window_length=5, stride=5)

    # Assert
    assert windows.flags.writeable
    np.testing.assert_array_equal(windows, [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]])


@pytest.mark.parametrize(
    ("window_length", "stride", "match"),
    [
        (0, 1, "window_length must be at least 1 sample, got 0"),
        (4, 0, "stride must be at least 1 sample, got 0"),
        (4, -2, "stride must be at least 1 sample, got -2"),
        (11, 1, "signal has 10 samples, fewer than window_length=11"),
    ],
)
def test_sliding_windows_rejects_bad_parameters(
    window_length: int, stride: int, match: str
) -> None:
    # Prepare
    signal = np.zeros(10, dtype=np.float32)

    # Execute / Assert
    with pytest.raises(ValueError, match=match):
        sliding_windows(signal, window_length, stride)


def test_sliding_windows_rejects_non_integer_lengths() -> None:
    # Execute / Assert
    with pytest.raises(TypeError, match=r"window_length must be a whole number .* got 4\.0"):
        sliding_windows(np.zeros(10, dtype=np.float32), 4.0, 1)  # type: ignore[arg-type]


def test_sliding_windows_rejects_two_dimensional_signal() -> None:
    # Execute / Assert
    with pytest.raises(ValueError, match=r"signal must be 1-D .* got shape \(2, 5\)"):
        sliding_windows(np.zeros((2, 5), dtype=np.float32), 2, 1)


def test_sliding_windows_rejects_complex_signal() -> None:
    # Execute / Assert
    with pytest.raises(ValueError, match="signal must hold real numbers, got dtype complex"):
        sliding_windows(np.zeros(5, dtype=np.complex64), 2, 1)


@given(
    n_samples=st.integers(1, 300),
    window_length=st.integers(1, 64),
    stride=st.integers(1, 80),
    seed=st.integers(0, 2**32 - 1),
)
def test_sliding_windows_rows_are_the_signal_at_multiples_of_stride(
    n_samples: int, window_length: int, stride: int, seed: int
) -> None:
    # Prepare
    signal = np.random.default_rng(seed).standard_normal(n_samples).astype(np.float32)
    expected_count = count_windows(n_samples, window_length, stride)

    # Execute
    if expected_count == 0:
        with pytest.raises(ValueError, match="fewer than window_length"):
            sliding_windows(signal, window_length, stride)
        return
    windows = sliding_windows(signal, window_length, stride)

    # Assert
    assert windows.shape == (expected_count, window_length)
    for i, row in enumerate(windows):
        np.testing.assert_array_equal(row, signal[i * stride : i * stride + window_length])
    # The dropped tail is shorter than a stride past the last full window.
    last_end = (expected_count - 1) * stride + window_length
    assert last_end <= n_samples < last_end + stride
    assert not np.shares_memory(windows, signal)


def _recording(n_samples: int, fs_hz: float = 1000.0) -> Recording:
    signal = np.arange(n_samples, dtype=np.float32)
    return Recording(signal=signal, fs_hz=fs_hz, source="bench/run-7.mat:DE")


def test_window_recording_windows_the_signal() -> None:
    # Prepare
    recording = _recording(12)

    # Execute
    windows = window_recording(recording, window_length=6, stride=3)

    # Assert
    np.testing.assert_array_equal(
        windows, [[0, 1, 2, 3, 4, 5], [3, 4, 5, 6, 7, 8], [6, 7, 8, 9, 10, 11]]
    )


def test_window_recording_too_short_names_source_lengths_and_remedy() -> None:
    # Prepare: 500 samples at 1 kHz = 0.5 s, window 1024 samples = 1.024 s
    recording = _recording(500)

    # Execute / Assert
    with pytest.raises(RecordingError) as caught:
        window_recording(recording, window_length=1024, stride=512)
    message = str(caught.value)
    assert caught.value.source == "bench/run-7.mat:DE"
    for part in ("bench/run-7.mat:DE", "500 samples", "0.5 s", "1024 samples", "1.024 s"):
        assert part in message
    assert "record longer or use a shorter window_length" in message
