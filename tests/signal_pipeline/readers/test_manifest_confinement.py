"""Property: a manifest entry is accepted only when it resolves inside the manifest's folder.

Paths are drawn from ``..``, ``.``, folder names, a symbolic link inside the folder that
leads out and one that stays in, as relative or absolute paths, ending in a recording that
exists at several places inside and outside the folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from signal_pipeline.readers import load_manifest, write_recording
from signal_pipeline.recording import RecordingError
from tests.signal_pipeline.readers.helpers import sine_recording


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """root/{rec.npz, outside/rec.npz, plant/{rec.npz, a/rec.npz, out -> ../outside,
    in -> a}}; the manifests go in root/plant."""
    root = tmp_path_factory.mktemp("confinement")
    plant = root / "plant"
    for folder in (root, root / "outside", plant, plant / "a"):
        folder.mkdir(exist_ok=True)
        write_recording(sine_recording(fs_hz=12000.0), folder / "rec.npz")
    (plant / "out").symlink_to(root / "outside")
    (plant / "in").symlink_to(plant / "a")
    return root


SEGMENTS = st.lists(st.sampled_from(["..", ".", "a", "plant", "outside", "out", "in"]), max_size=5)


@given(segments=SEGMENTS, absolute=st.booleans())
def test_an_accepted_entry_always_lies_inside_the_manifest_folder(
    tree: Path, segments: list[str], absolute: bool
) -> None:
    # Prepare
    plant = tree / "plant"
    relative = "/".join([*segments, "rec.npz"])
    listed = str(plant / relative) if absolute else relative
    manifest = plant / "m.csv"
    manifest.write_text(f"path,machine_id,label\n{listed},m,0\n")
    resolved = (plant / relative).resolve()

    # Execute
    try:
        (entry,) = load_manifest(manifest)
    except RecordingError as error:
        accepted = None
        message = str(error)
    else:
        accepted = entry.path.resolve()
        message = ""

    # Assert: accepted exactly when the file the system opens lies inside the folder
    exists = (plant / relative).is_file()
    inside = resolved.is_relative_to(plant.resolve())
    assert (accepted is not None) == (exists and inside), message
    if accepted is not None:
        assert accepted == resolved
    if exists and not inside:
        assert "outside the manifest's folder" in message
