"""Train / validation / test splits that cannot leak samples between splits.

Windowing first and shuffling windows afterwards puts overlapping windows — sharing most of
their samples — into both training and test data, so test accuracy measures memory, not
generalisation. Here every split is decided *before* windowing, in one of two ways:

* :func:`split_windows_by_time` cuts each recording into contiguous time segments, in
  time order ``train | val | test``, with an optional unused guard band of ``gap`` samples
  between consecutive segments, and windows each segment on its own. Testing on the latest
  part of a recording mimics deployment, where the model only ever sees the future.
* :func:`split_windows_by_recording` assigns whole recordings to splits (stratified by
  label), the stricter choice when recordings of the same machine and condition exist.

Either way no window of one split shares a sample with a window of another split.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from faultfleet.types import FloatArray, IntArray
from signal_pipeline.recording import Recording, RecordingError
from signal_pipeline.segments import (
    SPLIT_NAMES,
    Segment,
    SplitFractions,
    minimum_recording_samples,
    time_segments,
)
from signal_pipeline.windowing import count_windows, sliding_windows, window_recording

__all__ = [
    "SPLIT_NAMES",
    "Segment",
    "SplitFractions",
    "WindowedSplit",
    "concatenate_splits",
    "minimum_recording_samples",
    "split_recordings",
    "split_windows_by_recording",
    "split_windows_by_time",
    "time_segments",
]


@dataclass(frozen=True)
class WindowedSplit:
    """Windows of one split with where each came from.

    Parameters
    ----------
    windows : array of shape (n_windows, window_length), float32
    starts : array of shape (n_windows,), int64
        Absolute start sample of each window within its recording.
    recording_index : array of shape (n_windows,), int64
        Position of each window's recording in the sequence that was split.
    """

    windows: FloatArray
    starts: IntArray
    recording_index: IntArray

    def __post_init__(self) -> None:
        n = self.windows.shape[0]
        if (
            self.windows.ndim != 2
            or self.starts.shape != (n,)
            or self.recording_index.shape != (n,)
        ):
            raise ValueError(
                f"WindowedSplit needs windows (n, window_length), starts (n,) and "
                f"recording_index (n,), got shapes {self.windows.shape}, "
                f"{self.starts.shape} and {self.recording_index.shape}"
            )

    def __len__(self) -> int:
        return int(self.windows.shape[0])


def _assemble(parts: list[tuple[FloatArray, IntArray, int]], window_length: int) -> WindowedSplit:
    """Concatenate (windows, starts, recording index) triples into one WindowedSplit."""
    if not parts:
        empty = np.empty(0, dtype=np.int64)
        return WindowedSplit(np.empty((0, window_length), dtype=np.float32), empty, empty.copy())
    return WindowedSplit(
        windows=np.concatenate([windows for windows, _, _ in parts]),
        starts=np.concatenate([starts for _, starts, _ in parts]),
        recording_index=np.concatenate(
            [np.full(len(starts), index, dtype=np.int64) for _, starts, index in parts]
        ),
    )


def concatenate_splits(parts: Sequence[WindowedSplit], window_length: int) -> WindowedSplit:
    """Windows of several splits in one, each part's ``recording_index`` set to its position.

    Use it to merge splits made separately per recording (for example with different
    fractions); ``window_length`` gives the shape of the result when ``parts`` is empty.
    """
    return _assemble([(p.windows, p.starts, index) for index, p in enumerate(parts)], window_length)


def _check_recordings(recordings: Sequence[Recording]) -> None:
    if len(recordings) == 0:
        raise ValueError("recordings is empty; pass at least one Recording")


def split_windows_by_time(
    recordings: Sequence[Recording],
    window_length: int,
    stride: int,
    fractions: SplitFractions,
    *,
    gap: int = 0,
) -> dict[str, WindowedSplit]:
    """Split every recording in time (see :func:`time_segments`), then window each segment.

    Parameters
    ----------
    recordings : sequence of Recording
    window_length : int
        Samples per window, >= 1.
    stride : int
        Samples between consecutive window starts within a segment, >= 1.
    fractions : SplitFractions
    gap : int, default 0
        Unused samples between consecutive segments of a recording.

    Returns
    -------
    dict mapping each name in :data:`SPLIT_NAMES` to its WindowedSplit
        Windows of a segment start at the segment's first sample and lie wholly inside
        it; a segment shorter than one window contributes none.

    Raises
    ------
    RecordingError
        If a recording is too short for its train segment to hold one window; the
        message gives the minimum length.
    """
    _check_recordings(recordings)
    needed = minimum_recording_samples(window_length, fractions, gap=gap)
    parts: dict[str, list[tuple[FloatArray, IntArray, int]]] = {n: [] for n in SPLIT_NAMES}
    for index, recording in enumerate(recordings):
        if recording.n_samples < needed:
            raise RecordingError(
                recording.source,
                f"recording is {recording.n_samples} samples ({recording.duration_s:.6g} s) "
                f"long; for its train segment (fractions.train={fractions.train:g}, "
                f"gap={gap}) to hold one window of window_length={window_length} samples it "
                f"must be at least {needed} samples ({needed / recording.fs_hz:.6g} s at "
                f"{recording.fs_hz:g} Hz) long; "
                "record longer, use a shorter window_length or gap, or a larger train fraction",
            )
        for name, segment in time_segments(recording.n_samples, fractions, gap=gap).items():
            n_windows = count_windows(segment.length, window_length, stride)
            if n_windows == 0:
                continue
            windows = sliding_windows(
                recording.signal[segment.start : segment.stop], window_length, stride
            )
            starts = segment.start + stride * np.arange(n_windows, dtype=np.int64)
            parts[name].append((windows, starts, index))
    return {name: _assemble(parts[name], window_length) for name in SPLIT_NAMES}


def _allocate(n: int, fractions: SplitFractions) -> dict[str, int]:
    """Whole-item counts per split: largest remainder, then train >= 1 and test >= 1."""
    ideal = {name: n * share for name, share in fractions.as_dict().items()}
    counts = {name: math.floor(value) for name, value in ideal.items()}
    by_remainder = sorted(SPLIT_NAMES, key=lambda name: -(ideal[name] - counts[name]))
    for name in by_remainder[: max(n - sum(counts.values()), 0)]:
        counts[name] += 1
    if counts["train"] == 0 and n >= 1:
        donor = "val" if counts["val"] >= counts["test"] else "test"
        counts[donor] -= 1
        counts["train"] += 1
    if n >= 2 and fractions.test > 0 and counts["test"] == 0:
        # Take from the larger of train and val, but never leave train empty.
        train_keeps = counts["train"] == 1 or counts["val"] >= counts["train"]
        donor = "val" if counts["val"] > 0 and train_keeps else "train"
        counts[donor] -= 1
        counts["test"] += 1
    return counts


def split_recordings(
    recordings: Sequence[Recording], fractions: SplitFractions, rng: np.random.Generator
) -> dict[str, list[int]]:
    """Assign whole recordings to splits, stratified by label.

    Recordings are grouped by ``label`` (unlabelled ones form a group of their own); each
    group is shuffled with ``rng`` and divided by ``fractions`` using largest remainders,
    then adjusted so that every group puts at least one recording into train and, when it
    has two or more and ``fractions.test > 0``, at least one into test.

    Parameters
    ----------
    recordings : sequence of Recording
    fractions : SplitFractions
    rng : numpy.random.Generator
        Source of the shuffle; the same generator state gives the same assignment.

    Returns
    -------
    dict mapping each name in :data:`SPLIT_NAMES` to a sorted list of recording indices
        Every index in ``range(len(recordings))`` appears in exactly one list.
    """
    _check_recordings(recordings)
    groups: dict[int | None, list[int]] = {}
    for index, recording in enumerate(recordings):
        groups.setdefault(recording.label, []).append(index)
    assignment: dict[str, list[int]] = {name: [] for name in SPLIT_NAMES}
    for label in sorted(groups, key=lambda label: (label is None, label or 0)):
        members = [int(i) for i in rng.permutation(groups[label])]
        position = 0
        for name, count in _allocate(len(members), fractions).items():
            assignment[name].extend(members[position : position + count])
            position += count
    return {name: sorted(indices) for name, indices in assignment.items()}


def split_windows_by_recording(
    recordings: Sequence[Recording],
    window_length: int,
    stride: int,
    fractions: SplitFractions,
    rng: np.random.Generator,
) -> dict[str, WindowedSplit]:
    """Assign whole recordings to splits (:func:`split_recordings`), then window them.

    Parameters
    ----------
    recordings : sequence of Recording
        Each must hold at least one window.
    window_length, stride : int
        As in :func:`signal_pipeline.windowing.sliding_windows`.
    fractions : SplitFractions
    rng : numpy.random.Generator

    Returns
    -------
    dict mapping each name in :data:`SPLIT_NAMES` to its WindowedSplit

    Raises
    ------
    RecordingError
        If any recording is shorter than one window (checked for all, whatever the split).
    """
    _check_recordings(recordings)
    windowed = [window_recording(recording, window_length, stride) for recording in recordings]
    assignment = split_recordings(recordings, fractions, rng)
    result: dict[str, WindowedSplit] = {}
    for name in SPLIT_NAMES:
        parts = [
            (windowed[i], stride * np.arange(len(windowed[i]), dtype=np.int64), i)
            for i in assignment[name]
        ]
        result[name] = _assemble(parts, window_length)
    return result
