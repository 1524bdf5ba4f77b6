"""Tests for signal_pipeline.readers.cwru (through read_recording)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.io import savemat

from signal_pipeline.readers import read_recording
from signal_pipeline.recording import RecordingError
from tests.signal_pipeline.readers.helpers import names

DE = np.linspace(-1.0, 1.0, 50)
FE = np.linspace(2.0, 3.0, 50)


@pytest.fixture
def cwru_file(tmp_path: Path) -> Path:
    """A CWRU-like file: column vectors X097_DE_time, X097_FE_time and scalar X097RPM."""
    path = tmp_path / "97.mat"
    savemat(
        path,
        {"X097_DE_time": DE[:, None], "X097_FE_time": FE[:, None], "X097RPM": np.array([[1796]])},
    )
    return path


@pytest.fixture
def two_record_file(tmp_path: Path) -> Path:
    """Like CWRU 99.mat: records X098 and X099 in one file."""
    path = tmp_path / "99.mat"
    savemat(
        path,
        {
            "X098_DE_time": DE[:, None],
            "X099_DE_time": FE[:, None],
            "X098RPM": np.array([[1750]]),
            "X099RPM": np.array([[1772]]),
        },
    )
    return path


def test_reads_drive_end_by_default(cwru_file: Path) -> None:
    # Execute
    recording = read_recording(cwru_file, fs_hz=12000, label=1, machine_id="rig")

    # Assert
    np.testing.assert_array_equal(recording.signal, DE.astype(np.float32))
    assert recording.signal.dtype == np.float32
    assert recording.fs_hz == 12000
    assert recording.rpm == 1796
    assert recording.channel == "X097_DE_time"
    assert recording.source == f"{cwru_file}[X097_DE_time]"
    assert (recording.label, recording.machine_id) == (1, "rig")
    assert recording.metadata == {"cwru_record": "097", "cwru_sensor": "DE"}


@pytest.mark.parametrize("channel", ["FE", "fe", "X097_FE", "x097_fe", "X097_FE_time"])
def test_channel_selects_sensor_in_any_spelling(cwru_file: Path, channel: str) -> None:
    # Execute
    recording = read_recording(cwru_file, fs_hz=12000, channel=channel)

    # Assert
    np.testing.assert_array_equal(recording.signal, FE.astype(np.float32))
    assert recording.channel == "X097_FE_time"


def test_explicit_rpm_overrides_the_file(cwru_file: Path) -> None:
    # Execute
    recording = read_recording(cwru_file, fs_hz=48000, rpm=1730.0)

    # Assert
    assert recording.rpm == 1730.0


def test_missing_sampling_rate_says_which_rates_cwru_uses(cwru_file: Path) -> None:
    # Execute / Assert
    with pytest.raises(RecordingError, match=names(cwru_file, "12000 Hz or 48000 Hz.*fs_hz")):
        read_recording(cwru_file)


def test_absent_channel_lists_channels_present(cwru_file: Path) -> None:
    # Execute / Assert
    with pytest.raises(
        RecordingError, match=names(cwru_file, "no BA channel.*X097_DE_time, X097_FE_time")
    ):
        read_recording(cwru_file, fs_hz=12000, channel="BA")


def test_unknown_channel_name_lists_channels_present(cwru_file: Path) -> None:
    # Execute / Assert
    with pytest.raises(RecordingError, match=names(cwru_file, "'vib'.*X097_DE_time")):
        read_recording(cwru_file, fs_hz=12000, channel="vib")


def test_integer_channel_is_refused(cwru_file: Path) -> None:
    # Execute / Assert
    with pytest.raises(RecordingError, match=names(cwru_file, "not an integer index")):
        read_recording(cwru_file, fs_hz=12000, channel=0)


def test_two_records_need_disambiguation(two_record_file: Path) -> None:
    # Execute / Assert
    with pytest.raises(
        RecordingError, match=names(two_record_file, "channel='X098_DE' or 'X099_DE'")
    ):
        read_recording(two_record_file, fs_hz=48000)


@pytest.mark.parametrize("channel", ["X099_DE", "X099_DE_time"])
def test_two_records_read_the_chosen_one_with_its_rpm(two_record_file: Path, channel: str) -> None:
    # Execute
    recording = read_recording(two_record_file, fs_hz=48000, channel=channel)

    # Assert
    np.testing.assert_array_equal(recording.signal, FE.astype(np.float32))
    assert recording.rpm == 1772
    assert recording.metadata["cwru_record"] == "099"


def test_file_without_rpm_gives_none(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "no_rpm.mat"
    savemat(path, {"X100_DE_time": DE[:, None]})

    # Execute
    recording = read_recording(path, fs_hz=12000)

    # Assert
    assert recording.rpm is None


def test_matlab_v73_file_asks_to_resave_as_v7(tmp_path: Path) -> None:
    # Prepare: a v7.3 file starts with a 128-byte text header, then HDF5 data
    path = tmp_path / "big.mat"
    header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 HDF5 schema 1.00 ."
    path.write_bytes(header.ljust(116, b" ") + bytes(8) + b"\x00\x02IM" + b"\x89HDF" * 64)

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, r"v7\.3 \(HDF5\).*'-v7'")):
        read_recording(path, fs_hz=12000)


def test_garbage_bytes_are_a_clear_error(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "garbage.mat"
    path.write_bytes(np.random.default_rng(0).bytes(600))

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "cannot parse it as a MATLAB .mat")):
        read_recording(path, fs_hz=12000)


def test_truncated_file_is_a_clear_error(cwru_file: Path) -> None:
    # Prepare
    cwru_file.write_bytes(cwru_file.read_bytes()[:300])

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(cwru_file, "corrupt, truncated")):
        read_recording(cwru_file, fs_hz=12000)


def test_missing_file_is_named(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "absent.mat"

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "does not exist")):
        read_recording(path, fs_hz=12000)


def test_non_cwru_file_reads_the_named_vector(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "lab.mat"
    savemat(path, {"vibration": DE[None, :], "note": "bench 3"})

    # Execute
    recording = read_recording(path, fs_hz=25600, channel="vibration")

    # Assert
    np.testing.assert_array_equal(recording.signal, DE.astype(np.float32))
    assert recording.channel == "vibration"
    assert recording.rpm is None


def test_non_cwru_file_without_channel_lists_variables(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "lab.mat"
    savemat(path, {"vibration": DE[:, None]})

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, r"variables found: vibration \(50, 1\)")):
        read_recording(path, fs_hz=25600)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (np.ones((4, 3)), r"shape \(4, 3\)"),
        ("text", "not numbers"),
        (np.zeros((0, 1)), "empty"),
        (np.array([[0.1], [np.nan]]), "NaN/Inf"),
    ],
)
def test_unusable_variable_is_refused(tmp_path: Path, value: object, problem: str) -> None:
    # Prepare
    path = tmp_path / "bad.mat"
    savemat(path, {"X097_DE_time": value})

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, problem)):
        read_recording(path, fs_hz=12000)


def test_unusable_rpm_variable_is_refused(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "bad_rpm.mat"
    savemat(path, {"X097_DE_time": DE[:, None], "X097RPM": np.array([[0]])})

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "'X097RPM' holds rpm 0.0")):
        read_recording(path, fs_hz=12000)
