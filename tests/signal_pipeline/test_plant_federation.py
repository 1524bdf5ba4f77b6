"""A plant's own recordings as a federation: one client per machine, groups by label set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from signal_pipeline.conditions import Condition
from signal_pipeline.machine import MachineProfile
from signal_pipeline.plant_federation import manifest_federation
from signal_pipeline.readers import write_recording
from signal_pipeline.recording import RecordingError
from signal_pipeline.simulator import simulate


def _write_fleet(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    rows = ["path,machine_id,label"]
    for machine_id, labels in (("pump1", (0, 8)), ("pump2", (0, 8)), ("fan1", (4,))):
        machine = MachineProfile.sample(rng)
        for label in labels:
            sim = simulate(Condition.from_label(label), machine, 1.0, rng)
            name = f"{machine_id}-{label}.npz"
            write_recording(sim.to_recording(source=name), folder / name)
            rows.append(f"{name},{machine_id},{label}")
    manifest = folder / "manifest.csv"
    manifest.write_text("\n".join(rows) + "\n")
    return manifest


def test_manifest_federation_has_one_client_per_machine(tmp_path: Path) -> None:
    manifest = _write_fleet(tmp_path)

    federation = manifest_federation(str(manifest), window_length=512)

    assert [c.client_id for c in federation.clients] == ["fan1", "pump1", "pump2"]
    # Groups are the label sets: both pumps hold {0, 8}, the fan {4}.
    assert federation.groups.tolist() == [0, 1, 1]
    pump = federation.clients[1]
    assert set(np.unique(pump.train.y).tolist()) == {0, 8}
    assert pump.train.x.shape[1:] == (1, 512)
    assert federation.n_classes == 9


def test_manifest_federation_reports_recordings_too_short(tmp_path: Path) -> None:
    manifest = _write_fleet(tmp_path)

    with pytest.raises(
        RecordingError, match=r"fan1-4.npz.*window_length=12000 samples.*at least 17143 samples"
    ):
        manifest_federation(str(manifest), window_length=12_000)
