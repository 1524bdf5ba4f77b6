"""Tests for signal_pipeline.readers.audio (through read_recording/write_recording)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.io import wavfile

from signal_pipeline.readers import read_recording, write_recording
from signal_pipeline.recording import RecordingError
from tests.signal_pipeline.readers.helpers import names, sine_recording


def _wav(tmp_path: Path, rate_hz: int, data: np.ndarray, name: str = "rec.wav") -> Path:
    path = tmp_path / name
    wavfile.write(path, rate_hz, data)
    return path


def test_int16_is_scaled_to_full_scale(tmp_path: Path) -> None:
    # Prepare
    path = _wav(tmp_path, 8000, np.array([-32768, -16384, 0, 16384, 32767], dtype=np.int16))

    # Execute
    recording = read_recording(path, rpm=1500.0, label=2)

    # Assert
    expected = np.array([-1.0, -0.5, 0.0, 0.5, 32767 / 32768], dtype=np.float32)
    np.testing.assert_array_equal(recording.signal, expected)
    assert recording.fs_hz == 8000.0
    assert (recording.rpm, recording.label) == (1500.0, 2)
    assert recording.channel is None
    assert recording.metadata == {"wav_sample_format": "int16"}


def test_int32_full_scale_stays_below_one(tmp_path: Path) -> None:
    # Prepare
    info = np.iinfo(np.int32)
    path = _wav(tmp_path, 8000, np.array([info.min, 0, info.max], dtype=np.int32))

    # Execute
    recording = read_recording(path)

    # Assert
    assert recording.signal[0] == -1.0
    assert recording.signal.max() < 1.0


def test_uint8_is_centred(tmp_path: Path) -> None:
    # Prepare
    path = _wav(tmp_path, 8000, np.array([0, 128, 192], dtype=np.uint8))

    # Execute
    recording = read_recording(path)

    # Assert
    np.testing.assert_array_equal(recording.signal, np.array([-1.0, 0.0, 0.5], dtype=np.float32))


def test_float32_is_kept_as_is(tmp_path: Path) -> None:
    # Prepare
    samples = np.array([3.5, -7.25, 0.125], dtype=np.float32)
    path = _wav(tmp_path, 51200, samples)

    # Execute
    recording = read_recording(path, fs_hz=51200.0)

    # Assert
    np.testing.assert_array_equal(recording.signal, samples)


@pytest.mark.parametrize("channel", [1, "1"])
def test_stereo_channel_by_index(tmp_path: Path, channel: int | str) -> None:
    # Prepare
    path = _wav(tmp_path, 8000, np.array([[0, 16384], [0, -16384]], dtype=np.int16))

    # Execute
    recording = read_recording(path, channel=channel)

    # Assert
    np.testing.assert_array_equal(recording.signal, np.array([0.5, -0.5], dtype=np.float32))
    assert recording.channel == "1"
    assert recording.source == f"{path}[1]"


@pytest.mark.parametrize(
    ("channel", "problem"),
    [
        (None, "has 2 channels; pass channel as an integer index 0..1"),
        (2, "channel=2 is out of range: the file has 2 channel"),
        ("left", "WAV channels are numbered"),
    ],
)
def test_stereo_channel_errors(tmp_path: Path, channel: int | str | None, problem: str) -> None:
    # Prepare
    path = _wav(tmp_path, 8000, np.zeros((4, 2), dtype=np.int16))

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, problem)):
        read_recording(path, channel=channel)


def test_rate_that_disagrees_with_header(tmp_path: Path) -> None:
    # Prepare
    path = _wav(tmp_path, 8000, np.zeros(4, dtype=np.int16))

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "fs_hz=8001 disagrees.*8000 Hz")):
        read_recording(path, fs_hz=8001.0)


def test_nan_samples_are_refused(tmp_path: Path) -> None:
    # Prepare
    path = _wav(tmp_path, 8000, np.array([0.0, np.nan, 1.0], dtype=np.float32))

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, r"NaN/Inf sample\(s\), first at index 1")):
        read_recording(path)


def test_empty_wav_is_refused(tmp_path: Path) -> None:
    # Prepare
    path = _wav(tmp_path, 8000, np.zeros(0, dtype=np.int16))

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "empty")):
        read_recording(path)


def test_garbage_bytes_are_a_clear_error(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "noise.wav"
    path.write_bytes(np.random.default_rng(1).bytes(300))

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "cannot parse it as a WAV")):
        read_recording(path)


def test_truncated_wav_is_not_silently_cut(tmp_path: Path) -> None:
    # Prepare: header says 100 frames, only a few are there
    path = _wav(tmp_path, 8000, np.zeros(100, dtype=np.int16))
    path.write_bytes(path.read_bytes()[:60])

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "is truncated")):
        read_recording(path)


def test_written_wav_reads_back(tmp_path: Path) -> None:
    # Prepare
    original = sine_recording(n_samples=100, fs_hz=12000.0, rpm=1800.0)

    # Execute
    written = write_recording(original, tmp_path / "deep" / "rec.wav")
    again = read_recording(written)

    # Assert
    np.testing.assert_array_equal(again.signal, original.signal)
    assert again.fs_hz == 12000.0
    assert again.rpm is None  # WAV does not store rpm
    assert again.metadata == {"wav_sample_format": "float32"}


def test_wav_needs_an_integer_rate(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "rec.wav"

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "integer sampling rate.*1000.5 Hz")):
        write_recording(sine_recording(fs_hz=1000.5), path)
    assert not path.exists()
