"""Tests for signal_pipeline.readers.arrays (through read_recording/write_recording)."""

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

SAMPLES = np.array([0.5, -1.5, 2.25, 0.0])


# --- .npy -------------------------------------------------------------------------------


def test_npy_vector(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "rec.npy"
    np.save(path, SAMPLES)

    # Execute
    recording = read_recording(path, fs_hz=2000.0, label=0)

    # Assert
    np.testing.assert_array_equal(recording.signal, SAMPLES.astype(np.float32))
    assert (recording.fs_hz, recording.label, recording.channel) == (2000.0, 0, None)


def test_npy_column_of_matrix(tmp_path: Path) -> None:
    # Prepare: rows are samples, columns channels
    path = tmp_path / "rec.npy"
    np.save(path, np.column_stack([SAMPLES, 10 * SAMPLES]).astype(np.int16))

    # Execute
    recording = read_recording(path, fs_hz=2000.0, channel=1)

    # Assert
    np.testing.assert_array_equal(recording.signal, np.array([5, -15, 22, 0], dtype=np.float32))
    assert recording.channel == "1"
    assert recording.source == f"{path}[1]"


@pytest.mark.parametrize(
    ("array", "channel", "problem"),
    [
        (np.zeros((4, 3)), None, r"3 columns; pass channel as a column index 0\.\.2"),
        (np.zeros((4, 3)), 3, "channel=3 is out of range"),
        (np.zeros((4, 3)), "x", "pass an integer column index"),
        (SAMPLES, 0, "the array is 1-D; omit channel"),
        (np.zeros((2, 2, 2)), None, r"shape \(2, 2, 2\)"),
        (np.array(["a", "b"]), None, "dtype <U1; expected integer or floating"),
        (np.zeros(0), None, "empty"),
        (np.array([1.0, np.inf]), None, r"NaN/Inf sample\(s\), first at index 1"),
        (np.array([1.0, 1e300]), None, "beyond the float32 range"),
    ],
)
def test_npy_unusable_array(
    tmp_path: Path, array: np.ndarray, channel: int | str | None, problem: str
) -> None:
    # Prepare
    path = tmp_path / "rec.npy"
    np.save(path, array)

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, problem)):
        read_recording(path, fs_hz=1.0, channel=channel)


def test_npy_needs_a_rate(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "rec.npy"
    np.save(path, SAMPLES)

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "pass fs_hz")):
        read_recording(path)


def test_npy_pickled_objects_are_never_loaded(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "rec.npy"
    np.save(path, np.array([1.0, None], dtype=object), allow_pickle=True)

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "pickled object array")):
        read_recording(path, fs_hz=1.0)


@pytest.mark.parametrize(
    ("content", "problem"),
    [(b"garbage", r"not a \.npy file"), (b"\x93NUMPY\x01\x00", "corrupt or truncated")],
)
def test_npy_corrupt_file(tmp_path: Path, content: bytes, problem: str) -> None:
    # Prepare
    path = tmp_path / "rec.npy"
    path.write_bytes(content)

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, problem)):
        read_recording(path, fs_hz=1.0)


# --- .npz -------------------------------------------------------------------------------


def test_npz_with_stored_rate_speed_label_and_metadata(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "rec.npz"
    np.savez(
        path,
        signal=SAMPLES,
        fs=np.asarray(25600.0),
        rpm=np.asarray(1797.0),
        label=np.asarray(3),
        rotor=np.asarray("overhung"),
        bpfo_hz=np.asarray(107.4),
        spectrum=np.ones(8),
    )

    # Execute
    recording = read_recording(path, machine_id="pump-7")

    # Assert
    np.testing.assert_array_equal(recording.signal, SAMPLES.astype(np.float32))
    assert (recording.fs_hz, recording.rpm, recording.label) == (25600.0, 1797.0, 3)
    assert recording.metadata == {"rotor": "overhung", "bpfo_hz": 107.4}
    assert isinstance(recording.metadata["rotor"], str)
    assert isinstance(recording.metadata["bpfo_hz"], float)
    assert (recording.channel, recording.machine_id) == ("signal", "pump-7")


def test_npz_explicit_arguments_override(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "rec.npz"
    np.savez(path, signal=SAMPLES, fs=np.asarray(1000.0), rpm=np.asarray(600.0), label=1)

    # Execute
    recording = read_recording(path, fs_hz=1005.0, rpm=900.0, label=4)

    # Assert
    assert (recording.fs_hz, recording.rpm, recording.label) == (1005.0, 900.0, 4)


def test_npz_named_array(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "rec.npz"
    np.savez(path, de=SAMPLES, fe=2 * SAMPLES)

    # Execute
    recording = read_recording(path, fs_hz=10.0, channel="fe")

    # Assert
    np.testing.assert_array_equal(recording.signal, (2 * SAMPLES).astype(np.float32))
    assert recording.source == f"{path}[fe]"


@pytest.mark.parametrize(
    ("arrays", "fs_hz", "problem"),
    [
        ({"signal": SAMPLES, "fs": 1000.0}, 1200.0, "fs_hz=1200 disagrees.*fs = 1000 Hz"),
        ({"signal": SAMPLES}, None, "pass fs_hz or store an 'fs' array"),
        ({"de": SAMPLES, "fs": 1.0}, None, r"no array 'signal'; arrays present: de \(4,\), fs"),
        ({"signal": np.zeros((4, 2))}, 1.0, r"shape \(4, 2\); expected a 1-D signal"),
        ({"signal": SAMPLES, "fs": -5.0}, None, "stored 'fs' must be a positive"),
        ({"signal": SAMPLES, "fs": np.ones(3)}, None, "stored 'fs' should be a single number"),
        ({"signal": SAMPLES, "label": -1}, 1.0, "stored 'label' must be a non-negative"),
        ({"signal": [0.0, np.nan]}, 1.0, r"NaN/Inf sample\(s\)"),
    ],
)
def test_npz_unusable_content(
    tmp_path: Path, arrays: dict[str, object], fs_hz: float | None, problem: str
) -> None:
    # Prepare
    path = tmp_path / "rec.npz"
    np.savez(path, **arrays)  # type: ignore[arg-type]

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, problem)):
        read_recording(path, fs_hz=fs_hz)


def test_npz_integer_channel_is_refused(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "rec.npz"
    np.savez(path, signal=SAMPLES)

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "pass the .npz array name")):
        read_recording(path, fs_hz=1.0, channel=0)


def test_npz_pickled_member_is_named(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "rec.npz"
    np.savez(path, signal=SAMPLES, notes=np.array([{"a": 1}], dtype=object))

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "array 'notes': holds Python objects")):
        read_recording(path, fs_hz=1.0)


@pytest.mark.parametrize("keep_bytes", [0, 30, 200])
def test_npz_truncated(tmp_path: Path, keep_bytes: int) -> None:
    # Prepare
    path = tmp_path / "rec.npz"
    np.savez(path, signal=np.arange(500.0), fs=np.asarray(1.0))
    path.write_bytes(path.read_bytes()[:keep_bytes])

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "(corrupt or truncated|not a .npz)")):
        read_recording(path)


def test_written_npz_round_trips_everything(tmp_path: Path) -> None:
    # Prepare
    original = sine_recording(
        fs_hz=48000.0,
        rpm=1750.0,
        label=2,
        metadata={"rotor": "overhung", "bpfo_hz": 104.5, "n_balls": 9, "healthy": False},
    )

    # Execute
    written = write_recording(original, tmp_path / "a" / "b" / "rec.npz")
    again = read_recording(written)

    # Assert
    np.testing.assert_array_equal(again.signal, original.signal)
    assert (again.fs_hz, again.rpm, again.label) == (48000.0, 1750.0, 2)
    assert again.metadata == original.metadata
    assert {type(value) for value in again.metadata.values()} == {str, float, int, bool}


def test_npz_writer_skips_metadata_it_cannot_store(tmp_path: Path) -> None:
    # Prepare
    original = sine_recording(
        metadata={"rotor": "rigid", "band_hz": (100.0, 900.0), "tag": "a\x00"}
    )

    # Execute
    again = read_recording(write_recording(original, tmp_path / "rec.npz"))

    # Assert
    assert again.metadata == {"rotor": "rigid"}


def test_npz_writer_refuses_reserved_metadata_key(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "rec.npz"

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(path, "metadata key 'fs'.*reserved")):
        write_recording(sine_recording(metadata={"fs": 1.0}), path)
    assert list(tmp_path.iterdir()) == []


def test_writer_replaces_existing_file_without_leftovers(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "rec.npz"
    write_recording(sine_recording(n_samples=10), path)

    # Execute
    write_recording(sine_recording(n_samples=20), path)

    # Assert
    assert read_recording(path).n_samples == 20
    assert [p.name for p in tmp_path.iterdir()] == ["rec.npz"]


@settings(max_examples=40)
@given(
    signal=hnp.arrays(
        np.float32,
        st.integers(1, 30),
        elements=st.floats(width=32, allow_nan=False, allow_infinity=False),
    ),
    fs_hz=st.floats(1e-3, 1e7),
    label=st.none() | st.integers(0, 1000),
    metadata=st.dictionaries(
        st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True).filter(
            lambda key: key not in ("signal", "fs", "rpm", "label")
        ),
        # numpy strings drop trailing NULs, so the writer skips such values (tested above)
        st.text(max_size=8).filter(lambda text: not text.endswith("\x00"))
        | st.floats(allow_nan=False)
        | st.integers(-(2**62), 2**62),
        max_size=4,
    ),
)
def test_npz_round_trip_property(
    signal: np.ndarray, fs_hz: float, label: int | None, metadata: dict[str, object]
) -> None:
    # Prepare
    original = Recording(
        signal=signal, fs_hz=fs_hz, source="memory", label=label, metadata=metadata
    )

    with tempfile.TemporaryDirectory() as folder:
        # Execute
        again = read_recording(write_recording(original, Path(folder) / "rec.npz"))

    # Assert
    np.testing.assert_array_equal(again.signal, signal)
    assert (again.fs_hz, again.label) == (fs_hz, label)
    assert again.metadata == metadata
