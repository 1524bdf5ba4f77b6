"""Tests for signal_pipeline.readers.dispatch: suffix dispatch and argument checks."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from signal_pipeline.readers import (
    SUPPORTED_SUFFIXES,
    WRITABLE_SUFFIXES,
    read_recording,
    write_recording,
)
from signal_pipeline.recording import RecordingError
from tests.signal_pipeline.readers.helpers import names, sine_recording


def test_supported_suffixes() -> None:
    # Assert
    assert SUPPORTED_SUFFIXES == (".mat", ".csv", ".wav", ".npy", ".npz")
    assert set(WRITABLE_SUFFIXES) <= set(SUPPORTED_SUFFIXES)


def test_suffix_is_case_insensitive(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "REC.NPY"
    with path.open("wb") as handle:
        np.save(handle, np.array([1, 2], dtype=np.float32))

    # Execute
    recording = read_recording(str(path), fs_hz=10.0)

    # Assert
    np.testing.assert_array_equal(recording.signal, np.array([1, 2], dtype=np.float32))


@pytest.mark.parametrize("name", ["rec.tdms", "rec"])
def test_unknown_suffix_lists_supported(tmp_path: Path, name: str) -> None:
    # Prepare
    path = tmp_path / name
    path.write_bytes(b"\x00")

    # Execute / Assert
    with pytest.raises(
        RecordingError, match=names(path, r"unsupported file type.*\.mat, \.csv, \.wav, \.npy")
    ):
        read_recording(path)


def test_unknown_write_suffix_lists_writable(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "rec.mat"

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, r"writable: \.npz, \.wav, \.csv")):
        write_recording(sine_recording(), path)


def test_time_column_only_for_csv(tmp_path: Path) -> None:
    # Prepare
    path = write_recording(sine_recording(), tmp_path / "rec.npz")

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "time_column='t' applies only to .csv")):
        read_recording(path, time_column="t")


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"fs_hz": -1.0}, "fs_hz must be a positive finite number"),
        ({"fs_hz": float("nan")}, "fs_hz must be a positive finite number"),
        ({"rpm": 0.0}, "rpm must be a positive finite number"),
        ({"label": -2}, "label must be a non-negative integer"),
        ({"label": True}, "label must be a non-negative integer"),
    ],
)
def test_bad_arguments_are_named(tmp_path: Path, arguments: dict[str, float], problem: str) -> None:
    # Prepare
    path = write_recording(sine_recording(), tmp_path / "rec.npz")

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, problem)):
        read_recording(path, **arguments)  # type: ignore[arg-type]


def test_missing_file_is_named_for_every_format(tmp_path: Path) -> None:
    for suffix in SUPPORTED_SUFFIXES:
        # Prepare
        path = tmp_path / f"absent{suffix}"

        # Execute / Assert
        with pytest.raises(RecordingError, match=names(path, "does not exist")):
            read_recording(path, fs_hz=1.0)


def test_folder_is_not_a_recording(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "folder.npz"
    path.mkdir()

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "is a folder")):
        read_recording(path)


@pytest.mark.parametrize("suffix", WRITABLE_SUFFIXES)
def test_every_writer_round_trips_signal_and_rate(tmp_path: Path, suffix: str) -> None:
    # Prepare
    original = sine_recording(n_samples=128, fs_hz=12000.0)
    channel = "acceleration" if suffix == ".csv" else None
    time_column = "time_s" if suffix == ".csv" else None

    # Execute
    written = write_recording(original, tmp_path / "new" / f"rec{suffix}")
    again = read_recording(written, channel=channel, time_column=time_column)

    # Assert
    assert written.is_file()
    np.testing.assert_array_equal(again.signal, original.signal)
    assert again.fs_hz == pytest.approx(original.fs_hz, rel=1e-6)


@pytest.mark.parametrize("suffix", WRITABLE_SUFFIXES)
def test_a_written_recording_is_readable_by_others_under_umask_022(
    tmp_path: Path, suffix: str
) -> None:
    # Prepare: the usual umask of a plant engineer's shell
    previous = os.umask(0o022)

    # Execute
    try:
        path = write_recording(sine_recording(), tmp_path / f"rec{suffix}")
    finally:
        os.umask(previous)

    # Assert: the agent's service user (another user of the group or not) may read it
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
