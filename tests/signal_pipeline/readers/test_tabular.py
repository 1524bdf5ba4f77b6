"""Tests for signal_pipeline.readers.tabular (through read_recording/write_recording)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from signal_pipeline.readers import read_recording, write_recording
from signal_pipeline.recording import Recording, RecordingError
from tests.signal_pipeline.readers.helpers import names, sine_recording


def _write(tmp_path: Path, text: str, name: str = "data.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_headerless_single_column_with_rate(tmp_path: Path) -> None:
    # Prepare
    path = _write(tmp_path, "0.5\n-0.25\n1e-3\n")

    # Execute
    recording = read_recording(path, fs_hz=100.0, rpm=600.0)

    # Assert
    np.testing.assert_array_equal(recording.signal, np.array([0.5, -0.25, 1e-3], dtype=np.float32))
    assert (recording.fs_hz, recording.rpm) == (100.0, 600.0)
    assert recording.channel is None
    assert recording.source == str(path)


def test_time_column_gives_the_rate(tmp_path: Path) -> None:
    # Prepare
    path = _write(tmp_path, "t,acc\n0.0,1\n0.001,2\n0.002,3\n0.003,4\n")

    # Execute
    recording = read_recording(path, time_column="t")

    # Assert
    assert recording.fs_hz == pytest.approx(1000.0, rel=1e-12)
    np.testing.assert_array_equal(recording.signal, np.array([1, 2, 3, 4], dtype=np.float32))
    assert recording.channel == "acc"
    assert recording.source == f"{path}[acc]"


@pytest.mark.parametrize("channel", ["acc_y", 2, "2"])
def test_channel_by_name_or_index(tmp_path: Path, channel: str | int) -> None:
    # Prepare
    path = _write(tmp_path, "t,acc_x,acc_y\n0,1,10\n0.5,2,20\n")

    # Execute
    recording = read_recording(path, channel=channel, time_column=0)

    # Assert
    np.testing.assert_array_equal(recording.signal, np.array([10, 20], dtype=np.float32))
    assert recording.fs_hz == 2.0
    assert recording.channel == "acc_y"


def test_headerless_column_by_index_and_semicolons(tmp_path: Path) -> None:
    # Prepare
    path = _write(tmp_path, "1;10\n2;20\n")

    # Execute
    recording = read_recording(path, fs_hz=10.0, channel=1)

    # Assert
    np.testing.assert_array_equal(recording.signal, np.array([10, 20], dtype=np.float32))
    assert recording.channel == "1"


def test_several_columns_without_channel_lists_them(tmp_path: Path) -> None:
    # Prepare
    path = _write(tmp_path, "t,acc_x,acc_y\n0,1,10\n0.5,2,20\n")

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "1: 'acc_x', 2: 'acc_y'.*pass channel")):
        read_recording(path, time_column="t")


@pytest.mark.parametrize(
    ("channel", "problem"),
    [("acc_z", "'acc_z' is not a column"), (5, "out of range: the file has 2 column")],
)
def test_unknown_column_is_named(tmp_path: Path, channel: str | int, problem: str) -> None:
    # Prepare
    path = _write(tmp_path, "t,acc\n0,1\n1,2\n")

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, problem)):
        read_recording(path, fs_hz=1.0, channel=channel)


def test_non_monotonic_timestamp_names_the_line(tmp_path: Path) -> None:
    # Prepare: line 4 goes back in time
    path = _write(tmp_path, "t,acc\n0.0,1\n0.1,2\n0.1,3\n0.3,4\n")

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "increase strictly, but line 4")):
        read_recording(path, time_column="t")


def test_uneven_timestamps_say_how_to_resample(tmp_path: Path) -> None:
    # Prepare
    path = _write(tmp_path, "t,acc\n0.0,1\n0.1,2\n0.25,3\n0.3,4\n")

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "not uniformly spaced.*resample")):
        read_recording(path, time_column="t")


def test_rate_and_time_column_that_disagree(tmp_path: Path) -> None:
    # Prepare
    path = _write(tmp_path, "t,acc\n0.0,1\n0.001,2\n0.002,3\n")

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "fs_hz=1020 disagrees.*1000 Hz")):
        read_recording(path, fs_hz=1020.0, time_column="t")


def test_rate_and_time_column_that_agree_use_fs_hz(tmp_path: Path) -> None:
    # Prepare
    path = _write(tmp_path, "t,acc\n0.0,1\n0.001,2\n0.002,3\n")

    # Execute
    recording = read_recording(path, fs_hz=1005.0, time_column="t")

    # Assert
    assert recording.fs_hz == 1005.0


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("t,acc\n0,1\n1,two\n", r"line 3, column 'acc' holds 'two'"),
        ("t,acc\n0,1\n1,\n", r"line 3, column 'acc' holds an empty cell"),
        ("t,acc\n0,1\n1,nan\n", r"NaN/Inf value\(s\), first at line 3"),
        ("t,acc\n0,1\n1,2,3\n", "line 3 has 3 cells but the header has 2"),
        ("t,acc\n", "no data rows"),
        ("", "no data rows"),
    ],
)
def test_bad_content_names_file_and_place(tmp_path: Path, text: str, problem: str) -> None:
    # Prepare
    path = _write(tmp_path, text)

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, problem)):
        read_recording(path, fs_hz=1.0, channel="acc")


def test_unknown_rate_asks_for_fs_or_time_column(tmp_path: Path) -> None:
    # Prepare
    path = _write(tmp_path, "1\n2\n")

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "pass fs_hz, or time_column")):
        read_recording(path)


def test_single_row_cannot_give_a_rate(tmp_path: Path) -> None:
    # Prepare
    path = _write(tmp_path, "t,acc\n0,1\n")

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "single row.*pass fs_hz")):
        read_recording(path, time_column="t")


def test_same_column_for_time_and_channel(tmp_path: Path) -> None:
    # Prepare
    path = _write(tmp_path, "t,acc\n0,1\n1,2\n")

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "both select column 't'")):
        read_recording(path, time_column="t", channel="t")


def test_binary_file_is_not_text(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "data.csv"
    path.write_bytes(b"\xff\xfe\x00garbage\x9c")

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "not UTF-8 text")):
        read_recording(path, fs_hz=1.0)


def test_written_csv_reads_back(tmp_path: Path) -> None:
    # Prepare
    original = sine_recording(n_samples=200, fs_hz=12000.0)

    # Execute
    written = write_recording(original, tmp_path / "out" / "rec.csv")
    again = read_recording(written, time_column="time_s", channel="acceleration")

    # Assert
    assert written == tmp_path / "out" / "rec.csv"
    assert written.read_text().startswith("time_s,acceleration\n0,")
    np.testing.assert_array_equal(again.signal, original.signal)
    assert again.fs_hz == pytest.approx(12000.0, rel=1e-9)


@settings(max_examples=40)
@given(
    signal=hnp.arrays(
        np.float32,
        st.integers(2, 40),
        elements=st.floats(width=32, allow_nan=False, allow_infinity=False),
    ),
    fs_hz=st.floats(1.0, 1e6),
)
def test_csv_round_trip_keeps_samples_and_rate(signal: np.ndarray, fs_hz: float) -> None:
    # Prepare
    original = Recording(signal=signal, fs_hz=fs_hz, source="memory")

    with tempfile.TemporaryDirectory() as folder:
        # Execute
        path = write_recording(original, Path(folder) / "rec.csv")
        again = read_recording(path, time_column="time_s", channel="acceleration")

    # Assert
    np.testing.assert_array_equal(again.signal, original.signal)
    assert again.fs_hz == pytest.approx(fs_hz, rel=1e-6)
