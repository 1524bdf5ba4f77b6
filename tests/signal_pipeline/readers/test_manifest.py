"""Tests for signal_pipeline.readers.manifest."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from scipy.io import savemat

from signal_pipeline.readers import (
    ManifestEntry,
    load_manifest,
    read_manifest,
    write_recording,
)
from signal_pipeline.recording import RecordingError
from tests.signal_pipeline.readers.helpers import names, sine_recording


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """Recordings at 12 kHz (npz, csv, mat) and one at 48 kHz, under tmp_path/data."""
    folder = tmp_path / "data"
    write_recording(sine_recording(fs_hz=12000.0, rpm=1797.0), folder / "a.npz")
    write_recording(sine_recording(fs_hz=12000.0), folder / "b.csv")
    savemat(folder / "97.mat", {"X097_DE_time": np.ones((8, 1)), "X097RPM": np.array([[1796]])})
    write_recording(sine_recording(fs_hz=48000.0), folder / "fast.npz")
    return folder


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


CSV_MANIFEST = """path,machine_id,label,fs_hz,rpm,channel,time_column
data/a.npz,rig-a,0,,,,
data/b.csv,rig-a,1,,1500,acceleration,time_s
data/97.mat,rig-b,2,12000,,DE,
"""

TOML_MANIFEST = """
[[recording]]
path = "data/a.npz"
machine_id = "rig-a"
label = 0

[[recording]]
path = "data/b.csv"
machine_id = "rig-a"
label = 1
rpm = 1500
channel = "acceleration"
time_column = "time_s"

[[recording]]
path = "data/97.mat"
machine_id = "rig-b"
label = 2
fs_hz = 12000
channel = "DE"
"""


@pytest.mark.parametrize(("name", "text"), [("m.csv", CSV_MANIFEST), ("m.toml", TOML_MANIFEST)])
def test_load_manifest_resolves_paths_and_types(
    tmp_path: Path, data_dir: Path, name: str, text: str
) -> None:
    # Prepare
    manifest = _write(tmp_path, name, text)

    # Execute
    entries = load_manifest(manifest)

    # Assert
    assert entries == [
        ManifestEntry(path=data_dir / "a.npz", machine_id="rig-a", label=0),
        ManifestEntry(
            path=data_dir / "b.csv",
            machine_id="rig-a",
            label=1,
            rpm=1500.0,
            channel="acceleration",
            time_column="time_s",
        ),
        ManifestEntry(
            path=data_dir / "97.mat", machine_id="rig-b", label=2, fs_hz=12000.0, channel="DE"
        ),
    ]


@pytest.mark.parametrize(("name", "text"), [("m.csv", CSV_MANIFEST), ("m.toml", TOML_MANIFEST)])
def test_read_manifest_reads_every_entry(
    tmp_path: Path, data_dir: Path, name: str, text: str
) -> None:
    # Prepare
    manifest = _write(tmp_path, name, text)

    # Execute
    recordings = read_manifest(manifest)

    # Assert
    assert [(r.machine_id, r.label) for r in recordings] == [
        ("rig-a", 0),
        ("rig-a", 1),
        ("rig-b", 2),
    ]
    assert [r.rpm for r in recordings] == [1797.0, 1500.0, 1796.0]
    assert recordings[1].fs_hz == pytest.approx(12000.0)
    assert recordings[2].channel == "X097_DE_time"


def test_absolute_paths_and_digit_channels(tmp_path: Path, data_dir: Path) -> None:
    # Prepare: the manifest names a file of its folder absolutely
    text = f"path,machine_id,label,channel\n{data_dir / 'b.csv'},m,3,1\n"
    manifest = _write(tmp_path, "m.csv", text)

    # Execute
    (entry,) = load_manifest(manifest)

    # Assert
    assert entry.path == data_dir / "b.csv"
    assert entry.channel == 1


@pytest.mark.parametrize("listed", ["../data/b.csv", "ABSOLUTE", "link/b.csv", "~/b.csv"])
def test_a_file_outside_the_manifest_folder_is_refused_naming_path_and_setting(
    tmp_path: Path, data_dir: Path, listed: str
) -> None:
    # Prepare: the manifest lives in its own folder; data/ is beside it, not below
    folder = tmp_path / "plant"
    folder.mkdir()
    (folder / "link").symlink_to(data_dir)  # a link inside the folder that leads out
    listed = str(data_dir / "b.csv") if listed == "ABSOLUTE" else listed
    manifest = _write(folder, "m.csv", f"path,machine_id,label\n{listed},m,0\n")

    # Execute / Assert
    with pytest.raises(
        RecordingError,
        match=names(manifest, rf"row 1: listed file '{re.escape(listed)}' resolves to .*outside")
        + r".*manifest_outside_folder = true.*--manifest-outside-folder",
    ):
        load_manifest(manifest)
    with pytest.raises(RecordingError, match="outside the manifest's folder"):
        read_manifest(manifest)


def test_a_setting_allows_files_outside_the_manifest_folder(tmp_path: Path, data_dir: Path) -> None:
    # Prepare
    folder = tmp_path / "plant"
    folder.mkdir()
    manifest = _write(folder, "m.csv", "path,machine_id,label\n../data/a.npz,m,0\n")

    # Execute
    (entry,) = load_manifest(manifest, allow_outside_folder=True)
    (recording,) = read_manifest(manifest, allow_outside_folder=True)

    # Assert
    assert entry.path.resolve() == (data_dir / "a.npz").resolve()
    assert recording.label == 0


def test_mixed_rates_within_a_machine_are_refused(tmp_path: Path, data_dir: Path) -> None:
    # Prepare
    manifest = _write(
        tmp_path, "m.csv", "path,machine_id,label\ndata/a.npz,rig-a,0\ndata/fast.npz,rig-a,1\n"
    )

    # Execute / Assert
    with pytest.raises(
        RecordingError,
        match=names(
            manifest,
            r"machine 'rig-a' mixes sampling rates \(12000 Hz: .*a\.npz.*; 48000 Hz: "
            r".*fast\.npz.*\); resample .* or give each rate its own machine_id",
        ),
    ):
        read_manifest(manifest)


def test_different_machines_may_have_different_rates(tmp_path: Path, data_dir: Path) -> None:
    # Prepare
    manifest = _write(
        tmp_path, "m.csv", "path,machine_id,label\ndata/a.npz,rig-a,0\ndata/fast.npz,rig-b,1\n"
    )

    # Execute
    recordings = read_manifest(manifest)

    # Assert
    assert [r.fs_hz for r in recordings] == [12000.0, 48000.0]


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("m.csv", "path,machine_id,label,gain\n", "header: unknown field.*'gain'.*allowed: path,"),
        ("m.csv", "path,label\ndata/a.npz,0\n", "header lacks required column.*machine_id"),
        ("m.csv", "path,machine_id,label\n", "lists no recordings"),
        ("m.csv", "", "lists no recordings"),
        ("m.csv", "path,machine_id,label\ndata/a.npz,m,\n", "row 1: missing required.*'label'"),
        ("m.csv", "path,machine_id,label\ndata/a.npz,m,0\ndata/b.csv,,1\n", "row 2: missing"),
        ("m.csv", "path,machine_id,label\ndata/a.npz,m,-1\n", "row 1: label must be a non-neg"),
        ("m.csv", "path,machine_id,label\ndata/a.npz,m,1.5\n", "row 1: label must be a non-neg"),
        ("m.csv", "path,machine_id,label,fs_hz\ndata/a.npz,m,1,fast\n", "row 1: fs_hz must be"),
        ("m.csv", "path,machine_id,label\ndata/a.npz,m,0,9\n", "row 1 has 4 cells"),
        (
            "m.csv",
            "path,machine_id,label\ndata/a.npz,m,0\ndata/nope.npz,m,0\n",
            "row 2: listed file 'data/nope.npz' does not exist",
        ),
        (
            "m.csv",
            "path,machine_id,label\ndata/a.npz,m,0\ndata/a.npz,m,1\n",
            "row 2 repeats row 1",
        ),
        (
            "m.toml",
            "[[recording]]\npath = 'data/a.npz'\nlabel = 0\n",
            "entry 1: missing.*'machine_id'",
        ),
        (
            "m.toml",
            "[[recording]]\npath='data/a.npz'\nmachine_id='m'\nlabel=0\nfs=1\n",
            "entry 1: unknown field.*'fs'.*allowed: path, machine_id, label, fs_hz",
        ),
        ("m.toml", "[[recording]]\npath='data/a.npz'\nmachine_id=3\nlabel=0\n", "machine_id must"),
        ("m.toml", "[[recording]]\npath='data/a.npz'\nmachine_id='m'\nlabel=true\n", "label must"),
        ("m.toml", "[settings]\nx = 1\n", "unknown top-level key.*settings"),
        ("m.toml", "recording = 3\n", "array of tables"),
        ("m.toml", "title = \n", "not valid TOML"),
        ("m.toml", "", "lists no recordings"),
        ("m.json", "{}", "unsupported manifest type '.json'; use .csv or .toml"),
    ],
)
def test_manifest_errors_name_manifest_row_and_field(
    tmp_path: Path, data_dir: Path, name: str, text: str, problem: str
) -> None:
    # Prepare
    manifest = _write(tmp_path, name, text)

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(manifest, problem)):
        read_manifest(manifest)


def test_unreadable_entry_names_manifest_entry_and_file(tmp_path: Path, data_dir: Path) -> None:
    # Prepare: the .mat entry lacks fs_hz
    manifest = _write(tmp_path, "m.csv", "path,machine_id,label\ndata/97.mat,m,0\n")

    # Execute / Assert
    with pytest.raises(
        RecordingError, match=names(manifest, r"row 1 cannot be read: .*97\.mat.*pass fs_hz")
    ):
        read_manifest(manifest)


def test_missing_manifest_is_named(tmp_path: Path) -> None:
    # Prepare
    manifest = tmp_path / "absent.toml"

    # Execute / Assert
    with pytest.raises(RecordingError, match=names(manifest, "does not exist")):
        load_manifest(manifest)
