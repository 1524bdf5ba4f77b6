"""New labels reach training: appended manifests, labelled live windows, campaign by campaign."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edge_agent.labelled_data import FRACTIONS, LabelledData, labelled_windows, split_of
from edge_agent.labels_file import LabelRange, append_label
from edge_agent.recording_folder import RecordingFolderSource
from edge_agent.source_types import Window
from edge_agent.window_store import WindowStore
from faultfleet.wire.campaign_messages import CampaignNote
from faultfleet.wire.messages import CoordinatorStatus
from signal_pipeline.conditions import Condition
from signal_pipeline.federation import ClientData, Dataset
from signal_pipeline.machine import MachineProfile
from signal_pipeline.readers import write_recording
from signal_pipeline.simulator import simulate
from tests.clocks import FakeClock

SAMPLES = 32


class LiveOnly:
    """A source without training data (a live sensor)."""

    sample_shape = (1, SAMPLES)
    class_names = ("a", "b", "c")

    def training_data(self) -> ClientData | None:
        return None

    def stream(self, stop: threading.Event) -> Iterator[Window]:
        return iter(())


def coordinator(campaign: str | None) -> bytes:
    note = (
        None
        if campaign is None
        else CampaignNote(
            campaign_id=campaign,
            trigger="labels",
            status="running",
            start_round=0,
            end_round=5,
            rounds_done=0,
            started_at=1.0,
        )
    )
    return CoordinatorStatus(state="online", campaign=note).model_dump_json().encode()


def kept(tmp_path: Path, seconds: range) -> WindowStore:
    store = WindowStore(tmp_path / "windows", sample_size=SAMPLES, max_bytes=10_000_000)
    for second in seconds:
        store.keep(np.full(SAMPLES, second, dtype=np.float32), float(second))
    return store


def test_labelled_live_windows_join_every_split_with_their_label(tmp_path: Path) -> None:
    # Prepare: 400 windows diagnosed at t = 0 … 399; 100 … 299 found to be class 2
    store = kept(tmp_path, range(400))
    labels = tmp_path / "labels.csv"
    append_label(labels, LabelRange(100.0, 300.0, 2))

    # Execute
    data = LabelledData("m00", LiveOnly(), store, labels).active

    # Assert
    assert data is not None
    assert labelled_windows(data) == 200
    assert all(set(split.y.tolist()) == {2} for split in (data.train, data.val, data.test))
    assert data.train.x.shape[1:] == (1, SAMPLES)
    assert 0.6 < len(data.train) / 200 < 0.8
    inputs = np.concatenate([data.train.x, data.val.x, data.test.x])[:, 0, 0]
    assert sorted(inputs.tolist()) == [float(t) for t in range(100, 300)]


def test_the_split_is_seeded_and_a_window_never_changes_split() -> None:
    # Prepare
    first = np.arange(1_000, dtype=np.float64) + 1.7e9
    more = np.arange(2_000, dtype=np.float64) + 1.7e9

    # Execute
    splits = split_of(first, seed=0)
    again = split_of(more, seed=0)[:1_000]
    other = split_of(first, seed=1)

    # Assert
    assert np.array_equal(splits, again)
    assert not np.array_equal(splits, other)
    shares = np.bincount(split_of(more, seed=0), minlength=3) / len(more)
    assert np.allclose(shares, FRACTIONS, atol=0.04)


def test_new_labels_wait_for_the_next_campaign(tmp_path: Path) -> None:
    # Prepare: an agent with 100 labelled windows, campaign c1 running
    store = kept(tmp_path, range(300))
    labels = tmp_path / "labels.csv"
    append_label(labels, LabelRange(0.0, 100.0, 1))
    data = LabelledData("m00", LiveOnly(), store, labels)
    data.on_coordinator_status("t", coordinator("c1"))

    # Execute: 100 more are labelled during c1
    append_label(labels, LabelRange(100.0, 200.0, 0))
    changed = data.rescan()
    during_c1 = labelled_windows(data.for_task())
    data.on_coordinator_status("t", coordinator("c2"))
    in_c2 = labelled_windows(data.for_task())

    # Assert: reported at once, trained on from c2's first task
    assert changed
    assert data.labelled_windows == 200
    assert (during_c1, in_c2) == (100, 200)
    assert not data.rescan()  # nothing new


def test_an_agent_without_data_takes_its_first_labels_at_its_next_task(tmp_path: Path) -> None:
    # Prepare
    store = kept(tmp_path, range(50))
    labels = tmp_path / "labels.csv"
    data = LabelledData("m00", LiveOnly(), store, labels)
    data.on_coordinator_status("t", coordinator("c1"))
    before = data.for_task()

    # Execute
    append_label(labels, LabelRange(0.0, 50.0, 1))
    data.rescan()

    # Assert
    assert before is None
    assert labelled_windows(data.for_task()) == 50


def test_a_broken_labels_file_keeps_the_data_and_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare
    store = kept(tmp_path, range(50))
    labels = tmp_path / "labels.csv"
    append_label(labels, LabelRange(0.0, 50.0, 1))
    data = LabelledData("m00", LiveOnly(), store, labels)

    # Execute
    with labels.open("a", encoding="utf-8") as file:
        file.write("soon,later,1\n")
    with caplog.at_level(logging.ERROR):
        results = [data.rescan(), data.rescan()]

    # Assert
    assert results == [False, False]
    assert labelled_windows(data.for_task()) == 50
    assert len([r for r in caplog.records if "new labels not read" in r.message]) == 1


def write_folder(folder: Path, labels: tuple[int, ...]) -> None:
    rows = ["path,machine_id,label"]
    for label in labels:
        name = f"train/pump1-{label}.npz"
        rng = np.random.default_rng(label)
        simulation = simulate(Condition.from_label(label), MachineProfile.nominal(), 0.5, rng)
        write_recording(simulation.to_recording(source="test"), folder / name)
        rows.append(f"{name},pump1,{label}")
    (folder / "manifest.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")


def test_rows_appended_to_the_manifest_are_read_at_the_next_rescan(tmp_path: Path) -> None:
    # Prepare: a folder with two labelled recordings
    folder = tmp_path / "pump1"
    write_folder(folder, (0, 8))
    source = RecordingFolderSource(folder, window_length=256, clock=FakeClock())
    store = WindowStore(tmp_path / "windows", sample_size=256, max_bytes=0)
    data = LabelledData("pump1", source, store, tmp_path / "labels.csv")
    data.on_coordinator_status("t", coordinator("c1"))
    before = labelled_windows(data.active)

    # Execute: a third recording, confirmed at maintenance, appended to the manifest
    write_folder(folder, (0, 8, 3))
    changed = data.rescan()

    # Assert: its windows join; the earlier recordings keep their split
    newest = data.newest
    assert changed
    assert newest is not None
    assert labelled_windows(newest) == before * 3 // 2
    assert set(newest.train.y.tolist()) == {0, 3, 8}
    old = data.active
    assert old is not None
    assert np.array_equal(newest.test.x[: len(old.test)], old.test.x)
    assert not data.rescan()


def test_labels_are_added_to_the_sources_own_data(tmp_path: Path) -> None:
    # Prepare
    base = ClientData(
        "m00",
        3,
        Dataset(np.zeros((5, 1, SAMPLES), np.float32), np.zeros(5, np.int64)),
        Dataset(np.zeros((2, 1, SAMPLES), np.float32), np.zeros(2, np.int64)),
        Dataset(np.zeros((2, 1, SAMPLES), np.float32), np.zeros(2, np.int64)),
    )

    class WithData(LiveOnly):
        def training_data(self) -> ClientData | None:
            return base

    labels = tmp_path / "labels.csv"
    append_label(labels, LabelRange(0.0, 20.0, 2))

    # Execute
    data = LabelledData("m00", WithData(), kept(tmp_path, range(20)), labels).active

    # Assert
    assert data is not None
    assert (data.client_id, data.group) == ("m00", 3)
    assert labelled_windows(data) == 9 + 20
    assert data.train.y[:5].tolist() == [0] * 5


def test_an_agent_starts_without_the_labels_of_a_broken_file_until_it_is_fixed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: a hand-edited labels file with a bad row
    store = kept(tmp_path, range(50))
    labels = tmp_path / "labels.csv"
    labels.write_text("start,end,label\n0,50,one\n", encoding="utf-8")

    # Execute
    with caplog.at_level(logging.ERROR):
        data = LabelledData("m00", LiveOnly(), store, labels)
    labels.write_text("start,end,label\n0,50,1\n", encoding="utf-8")
    fixed = data.rescan()

    # Assert: it started (diagnosis goes on), and the fixed file is read
    assert data.active is None
    assert "line 2" in caplog.text
    assert fixed
    assert labelled_windows(data.for_task()) == 50
