"""Tests for signal_pipeline.splitting."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from faultfleet.types import IntArray
from signal_pipeline.recording import Recording, RecordingError
from signal_pipeline.splitting import (
    SPLIT_NAMES,
    Segment,
    SplitFractions,
    WindowedSplit,
    concatenate_splits,
    minimum_recording_samples,
    split_recordings,
    split_windows_by_recording,
    split_windows_by_time,
    time_segments,
)
from signal_pipeline.windowing import count_windows


def _recording(
    n_samples: int, *, offset: int = 0, label: int | None = None, name: str = "rec"
) -> Recording:
    """A recording whose sample i equals offset + i, so every window shows where it began."""
    signal = (offset + np.arange(n_samples)).astype(np.float32)
    return Recording(signal=signal, fs_hz=1000.0, source=name, label=label)


@st.composite
def split_fractions(draw: st.DrawFn) -> SplitFractions:
    train = draw(st.integers(1, 10))
    val = draw(st.integers(0, 10))
    test = draw(st.integers(0, 10))
    total = train + val + test
    return SplitFractions(train / total, val / total, test / total)


# --- SplitFractions and Segment -------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"train": 0.8, "val": -0.1, "test": 0.3},
            r"SplitFractions\.val must be .* >= 0, got -0\.1",
        ),
        ({"train": float("nan")}, r"SplitFractions\.train must be a finite number"),
        ({"train": 0.0, "val": 0.5, "test": 0.5}, r"SplitFractions\.train must be > 0, got 0\.0"),
        ({"train": 0.7, "val": 0.2, "test": 0.2}, r"must sum to 1, got .* = 1\.1; rescale"),
    ],
)
def test_split_fractions_rejects_bad_values(kwargs: dict[str, float], match: str) -> None:
    # Execute / Assert
    with pytest.raises(ValueError, match=match):
        SplitFractions(**kwargs)


def test_split_fractions_accepts_rounding_error_in_the_sum() -> None:
    # Execute
    fractions = SplitFractions(0.1 + 0.2, 0.3, 0.4)  # 0.30000000000000004

    # Assert
    assert fractions.as_dict() == {"train": 0.1 + 0.2, "val": 0.3, "test": 0.4}


def test_segment_rejects_reversed_interval() -> None:
    # Execute / Assert
    with pytest.raises(ValueError, match=r"0 <= start <= stop, got \[5, 3\)"):
        Segment(5, 3)


# --- time_segments -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n_samples", "fractions", "gap", "expected"),
    [
        (100, SplitFractions(), 0, [(0, 70), (70, 85), (85, 100)]),
        (110, SplitFractions(), 5, [(0, 70), (75, 90), (95, 110)]),
        (100, SplitFractions(0.8, 0.0, 0.2), 10, [(0, 72), (72, 72), (82, 100)]),
        (100, SplitFractions(1.0, 0.0, 0.0), 10, [(0, 100), (100, 100), (100, 100)]),
        (0, SplitFractions(), 0, [(0, 0), (0, 0), (0, 0)]),
    ],
)
def test_time_segments_hand_checked(
    n_samples: int, fractions: SplitFractions, gap: int, expected: list[tuple[int, int]]
) -> None:
    # Execute
    segments = time_segments(n_samples, fractions, gap=gap)

    # Assert
    assert list(segments) == list(SPLIT_NAMES)
    assert [(s.start, s.stop) for s in segments.values()] == expected


@pytest.mark.parametrize(
    ("n_samples", "gap", "match"),
    [
        (-1, 0, "n_samples must be >= 0 samples, got -1"),
        (100, -3, "gap must be >= 0 samples, got -3"),
        (9, 5, "n_samples=9 cannot hold 2 guard gap.* of gap=5 samples; use a smaller gap"),
    ],
)
def test_time_segments_rejects_bad_lengths(n_samples: int, gap: int, match: str) -> None:
    # Execute / Assert
    with pytest.raises(ValueError, match=match):
        time_segments(n_samples, SplitFractions(), gap=gap)


@given(n_samples=st.integers(0, 5000), fractions=split_fractions(), gap=st.integers(0, 50))
def test_time_segments_tile_the_recording_in_time_order(
    n_samples: int, fractions: SplitFractions, gap: int
) -> None:
    # Prepare
    n_gaps = sum(f > 0 for f in fractions.as_dict().values()) - 1
    if n_samples < n_gaps * gap:
        return

    # Execute
    segments = [time_segments(n_samples, fractions, gap=gap)[name] for name in SPLIT_NAMES]

    # Assert: in order, non-overlapping, inside [0, n); lengths close to the fractions
    assert segments[0].start == 0
    for earlier, later in itertools.pairwise(segments):
        assert later.start >= earlier.stop
    assert segments[-1].stop <= n_samples
    usable = n_samples - n_gaps * gap
    assert sum(s.length for s in segments) == usable
    for segment, share in zip(segments, fractions.as_dict().values(), strict=True):
        assert abs(segment.length - share * usable) <= 1.0
        assert share > 0 or segment.length == 0


# --- minimum_recording_samples and split_windows_by_time -----------------------------


@pytest.mark.parametrize(("gap", "expected"), [(0, 100), (5, 110)])
def test_minimum_recording_samples_hand_checked(gap: int, expected: int) -> None:
    # Execute
    needed = minimum_recording_samples(70, SplitFractions(), gap=gap)

    # Assert: round(0.7 * 100) = 70 but round(0.7 * 99) = 69
    assert needed == expected
    assert time_segments(needed, SplitFractions(), gap=gap)["train"].length == 70
    assert time_segments(needed - 1, SplitFractions(), gap=gap)["train"].length == 69


def test_split_windows_by_time_hand_checked() -> None:
    # Prepare: segments train [0, 70), val [70, 85), test [85, 100)
    recording = _recording(100)

    # Execute
    splits = split_windows_by_time(
        [recording], window_length=10, stride=10, fractions=SplitFractions()
    )

    # Assert
    np.testing.assert_array_equal(splits["train"].starts, [0, 10, 20, 30, 40, 50, 60])
    np.testing.assert_array_equal(splits["val"].starts, [70])
    np.testing.assert_array_equal(splits["test"].starts, [85])
    np.testing.assert_array_equal(splits["test"].windows, [np.arange(85, 95)])
    for split in splits.values():
        np.testing.assert_array_equal(split.recording_index, np.zeros(len(split)))
        assert split.windows.dtype == np.float32


def test_split_windows_by_time_short_segment_gives_no_windows() -> None:
    # Prepare: val [70, 85) and test [85, 100) are shorter than a window of 20
    recording = _recording(100)

    # Execute
    splits = split_windows_by_time(
        [recording], window_length=20, stride=20, fractions=SplitFractions()
    )

    # Assert
    np.testing.assert_array_equal(splits["train"].starts, [0, 20, 40])
    for name in ("val", "test"):
        assert splits[name].windows.shape == (0, 20)
        assert splits[name].starts.shape == (0,)
        assert splits[name].recording_index.dtype == np.int64


def test_split_windows_by_time_rejects_recording_too_short_for_train() -> None:
    # Prepare
    recordings = [_recording(200, name="long.mat"), _recording(99, name="short.mat")]

    # Execute / Assert
    with pytest.raises(
        RecordingError,
        match=r"short\.mat: recording is 99 samples .* at least 100 samples \(0\.1 s",
    ):
        split_windows_by_time(recordings, window_length=70, stride=10, fractions=SplitFractions())


def test_split_windows_by_time_rejects_empty_input() -> None:
    # Execute / Assert
    with pytest.raises(ValueError, match="recordings is empty"):
        split_windows_by_time([], window_length=4, stride=4, fractions=SplitFractions())


def _assert_apart(first: IntArray, second: IntArray, window_length: int, gap: int) -> None:
    """Every interval [s, s + L) of one set is disjoint from, and >= gap from, the other's."""
    a = first[:, np.newaxis]
    b = second[np.newaxis, :]
    separation = np.maximum(b - (a + window_length), a - (b + window_length))
    assert np.all(separation >= gap)


@given(
    window_length=st.integers(1, 40),
    stride=st.integers(1, 50),
    fractions=split_fractions(),
    gap=st.integers(0, 30),
    extra_samples=st.lists(st.integers(0, 400), min_size=1, max_size=3),
)
def test_split_windows_by_time_never_leaks(
    window_length: int,
    stride: int,
    fractions: SplitFractions,
    gap: int,
    extra_samples: list[int],
) -> None:
    # Prepare: recordings of arbitrary length, each at least the minimum
    needed = minimum_recording_samples(window_length, fractions, gap=gap)
    recordings = [
        _recording(needed + extra, offset=100_000 * i) for i, extra in enumerate(extra_samples)
    ]

    # Execute
    splits = split_windows_by_time(recordings, window_length, stride, fractions, gap=gap)

    # Assert
    assert len(splits["train"]) >= len(recordings)
    for r, recording in enumerate(recordings):
        segments = time_segments(recording.n_samples, fractions, gap=gap)
        starts: dict[str, IntArray] = {}
        for name, split in splits.items():
            mine = split.recording_index == r
            starts[name] = split.starts[mine]
            # windows lie inside their segment, one every stride from its start ...
            segment = segments[name]
            expected = segment.start + stride * np.arange(
                count_windows(segment.length, window_length, stride)
            )
            np.testing.assert_array_equal(starts[name], expected)
            # ... and hold the signal at their start
            sample_index = starts[name][:, np.newaxis] + np.arange(window_length)
            np.testing.assert_array_equal(split.windows[mine], recording.signal[sample_index])
        # no sample of a val or test window is in a train window (nor val in test)
        _assert_apart(starts["train"], starts["test"], window_length, gap)
        _assert_apart(starts["train"], starts["val"], window_length, gap)
        _assert_apart(starts["val"], starts["test"], window_length, gap)


# --- split_recordings and split_windows_by_recording ---------------------------------


def test_split_recordings_proportions_for_one_label() -> None:
    # Prepare
    recordings = [_recording(10, label=3) for _ in range(20)]

    # Execute
    assignment = split_recordings(recordings, SplitFractions(), np.random.default_rng(0))

    # Assert
    assert [len(assignment[name]) for name in SPLIT_NAMES] == [14, 3, 3]
    assert sorted(itertools.chain(*assignment.values())) == list(range(20))


def test_split_recordings_puts_rare_labels_in_train_and_test() -> None:
    # Prepare: label 1 has 2 recordings, label 2 has 1, label 0 has 7
    labels = [0, 1, 0, 0, 2, 0, 1, 0, 0, 0]
    recordings = [_recording(10, label=label) for label in labels]

    # Execute
    assignment = split_recordings(recordings, SplitFractions(), np.random.default_rng(1))

    # Assert
    labels_in = {name: {labels[i] for i in assignment[name]} for name in SPLIT_NAMES}
    assert labels_in["train"] == {0, 1, 2}
    assert labels_in["test"] == {0, 1}


def test_split_recordings_is_deterministic_for_a_seed() -> None:
    # Prepare
    recordings = [_recording(10, label=i % 3) for i in range(30)]

    # Execute
    first = split_recordings(recordings, SplitFractions(), np.random.default_rng(42))
    second = split_recordings(recordings, SplitFractions(), np.random.default_rng(42))

    # Assert
    assert first == second


@given(
    labels=st.lists(st.one_of(st.none(), st.integers(0, 4)), min_size=1, max_size=40),
    fractions=split_fractions(),
    seed=st.integers(0, 2**32 - 1),
)
def test_split_recordings_partitions_and_keeps_labels_in_train_and_test(
    labels: list[int | None], fractions: SplitFractions, seed: int
) -> None:
    # Prepare
    recordings = [_recording(4, label=label) for label in labels]

    # Execute
    assignment = split_recordings(recordings, fractions, np.random.default_rng(seed))

    # Assert: each recording in exactly one split
    assert sorted(itertools.chain(*assignment.values())) == list(range(len(labels)))
    for label in set(labels):
        in_train = [i for i in assignment["train"] if labels[i] == label]
        in_test = [i for i in assignment["test"] if labels[i] == label]
        assert in_train
        if labels.count(label) >= 2 and fractions.test > 0:
            assert in_test


def test_split_windows_by_recording_keeps_recordings_whole() -> None:
    # Prepare
    recordings = [_recording(25, offset=1000 * i, label=i % 2) for i in range(8)]

    # Execute
    splits = split_windows_by_recording(
        recordings,
        window_length=10,
        stride=5,
        fractions=SplitFractions(),
        rng=np.random.default_rng(3),
    )
    assignment = split_recordings(recordings, SplitFractions(), np.random.default_rng(3))

    # Assert: 4 windows per recording, starting at 0, 5, 10, 15, grouped by recording
    for name in SPLIT_NAMES:
        split = splits[name]
        assert isinstance(split, WindowedSplit)
        np.testing.assert_array_equal(np.unique(split.recording_index), assignment[name])
        np.testing.assert_array_equal(split.starts, np.tile([0, 5, 10, 15], len(assignment[name])))
        for start, index, window in zip(
            split.starts, split.recording_index, split.windows, strict=True
        ):
            np.testing.assert_array_equal(window, recordings[index].signal[start : start + 10])


def test_split_windows_by_recording_rejects_short_recording() -> None:
    # Prepare
    recordings = [_recording(25), _recording(5, name="tiny.csv")]

    # Execute / Assert
    with pytest.raises(RecordingError, match=r"tiny\.csv: recording is 5 samples"):
        split_windows_by_recording(recordings, 10, 5, SplitFractions(), np.random.default_rng(0))


def test_concatenate_splits_renumbers_recordings_by_position() -> None:
    # Prepare
    first = WindowedSplit(
        np.zeros((2, 4), np.float32), np.array([0, 4]), np.array([7, 7], dtype=np.int64)
    )
    second = WindowedSplit(
        np.ones((1, 4), np.float32), np.array([8]), np.array([3], dtype=np.int64)
    )

    # Execute
    merged = concatenate_splits([first, second], window_length=4)
    empty = concatenate_splits([], window_length=4)

    # Assert
    assert merged.recording_index.tolist() == [0, 0, 1]
    assert merged.starts.tolist() == [0, 4, 8]
    np.testing.assert_array_equal(merged.windows[2], np.ones(4, np.float32))
    assert empty.windows.shape == (0, 4)
