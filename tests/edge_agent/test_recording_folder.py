"""A plant engineer's folder as a window source: manifest training data, incoming files."""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from edge_agent.recording_folder import PROCESSED_FILE, ProcessedLedger, RecordingFolderSource
from edge_agent.sources import Window, WindowSource
from faultfleet.errors import UsageError
from signal_pipeline.conditions import Condition
from signal_pipeline.machine import MachineProfile
from signal_pipeline.readers import write_recording
from signal_pipeline.recording import Recording, RecordingError
from signal_pipeline.simulator import simulate
from tests.clocks import WALL_CLOCK_OFFSET_S, FakeClock, Wait

WINDOW = 512
POLL_S = 0.03


def _recording(label: int | None, seconds: float = 0.2, seed: int = 0) -> Recording:
    rng = np.random.default_rng(seed)
    sim = simulate(Condition.from_label(label or 0), MachineProfile.nominal(), seconds, rng)
    recording = sim.to_recording(source="test")
    if label is None:
        return Recording(recording.signal, recording.fs_hz, "test")
    return recording


def _write_manifest(folder: Path, machines: tuple[str, ...] = ("pump1",)) -> None:
    rows = ["path,machine_id,label"]
    for number, machine_id in enumerate(machines):
        for label in (0, 8):
            name = f"train/{machine_id}-{label}.npz"
            write_recording(_recording(label, 1.0, seed=number * 10 + label), folder / name)
            rows.append(f"{name},{machine_id},{label}")
    (folder / "manifest.csv").write_text("\n".join(rows) + "\n")


def _drop(folder: Path, name: str, recording: Recording, age_s: float = 0.0) -> Path:
    path = write_recording(recording, folder / "incoming" / name)
    if age_s:
        stamp = time.time() - age_s
        os.utime(path, (stamp, stamp))
    return path


def _source(
    folder: Path,
    *,
    poll_s: float = POLL_S,
    time_column: str | None = None,
    class_names: list[str] | None = None,
    clock: FakeClock | None = None,
) -> RecordingFolderSource:
    return RecordingFolderSource(
        folder,
        window_length=WINDOW,
        poll_s=poll_s,
        time_column=time_column,
        class_names=class_names,
        clock=clock or FakeClock(),
    )


def _collect(
    folder: Path, count: int, polls: int = 3, time_column: str | None = None
) -> list[Window]:
    """The first ``count`` windows of a source on ``folder``, or fewer after ``polls`` polls.

    Files present at the start stream after one poll (their size and time held over it).
    """
    stop = threading.Event()
    clock = FakeClock(on_wait=lambda wait: stop.set() if len(clock.waits) > polls else None)
    windows: list[Window] = []
    for window in _source(folder, clock=clock, time_column=time_column).stream(stop):
        windows.append(window)
        if len(windows) == count:
            break
    assert all(wait.timeout_s == POLL_S for wait in clock.waits)
    return windows


def _ledger(folder: Path) -> list[dict[str, object]]:
    lines = (folder / PROCESSED_FILE).read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_training_data_comes_from_the_manifest(tmp_path: Path) -> None:
    _write_manifest(tmp_path)
    source = _source(tmp_path)

    data = source.training_data()

    assert data is not None
    assert data.client_id == "pump1"
    assert set(np.unique(data.train.y).tolist()) == {0, 8}
    assert data.train.x.shape[1:] == (1, WINDOW) == source.sample_shape
    assert len(data.val) > 0
    assert len(data.test) > 0
    assert source.class_names == tuple(f"label {i}" for i in range(9))
    assert source.training_data() is data


def test_a_folder_without_manifest_only_diagnoses(tmp_path: Path) -> None:
    source = _source(tmp_path)

    assert source.training_data() is None
    assert source.class_names == ()
    assert _source(tmp_path, class_names=["ok", "worn"]).class_names == ("ok", "worn")


def test_a_manifest_of_several_machines_is_refused(tmp_path: Path) -> None:
    _write_manifest(tmp_path, ("pump1", "pump2"))

    with pytest.raises(RecordingError, match=r"2 machines \(pump1, pump2\).*must hold one machine"):
        _source(tmp_path).training_data()


def test_bad_folder_and_arguments_are_named(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist or is not a folder"):
        RecordingFolderSource(tmp_path / "missing")
    with pytest.raises(ValueError, match="poll_s must be a finite number of seconds > 0"):
        RecordingFolderSource(tmp_path, poll_s=0.0)
    with pytest.raises(ValueError, match="stride must be a whole number of samples >= 1"):
        RecordingFolderSource(tmp_path, stride=0)
    (tmp_path / "manifest.csv").write_text("path,machine_id,label\n")
    (tmp_path / "manifest.toml").write_text("")
    with pytest.raises(ValueError, match="keep only one manifest"):
        RecordingFolderSource(tmp_path)


def test_incoming_files_stream_once_oldest_first(tmp_path: Path) -> None:
    (tmp_path / "incoming").mkdir()
    _drop(tmp_path, "new.npz", _recording(9, seed=1), age_s=10)
    _drop(tmp_path, "old.npz", _recording(3, seed=2), age_s=20)

    windows = _collect(tmp_path, 8)  # 0.2 s at 12 kHz: 4 windows of 512 per file

    assert [w.origin for w in windows[:2]] == ["old.npz @ sample 0", "old.npz @ sample 512"]
    assert [w.true_label for w in windows] == [3] * 4 + [9] * 4
    assert all(w.samples.shape == (1, WINDOW) for w in windows)
    assert {(e["name"], e["status"]) for e in _ledger(tmp_path)} == {
        ("old.npz", "done"),
        ("new.npz", "done"),
    }


def test_a_restarted_agent_does_not_stream_a_file_again(tmp_path: Path) -> None:
    _drop(tmp_path, "a.npz", _recording(3))
    assert len(_collect(tmp_path, 4)) == 4

    again = _collect(tmp_path, 1, polls=5)
    path = _drop(tmp_path, "a.npz", _recording(4, seed=7))  # same name, new contents
    replaced = _collect(tmp_path, 4)

    assert again == []
    assert [w.true_label for w in replaced] == [4] * 4
    assert [(e["name"], e["size_bytes"]) for e in _ledger(tmp_path)][-1] == (
        "a.npz",
        path.stat().st_size,
    )


def test_a_file_still_being_written_is_not_read_half_way(tmp_path: Path) -> None:
    # Prepare: a slow copy that adds a tenth of the file between every two polls
    complete = write_recording(_recording(5, seconds=0.3), tmp_path / "staged.npz").read_bytes()
    step = len(complete) // 10 + 1
    chunks = [complete[start : start + step] for start in range(0, len(complete), step)]
    target = tmp_path / "incoming" / "growing.npz"
    windows: list[Window] = []
    seen_while_writing: list[int] = []
    stop = threading.Event()

    def copy_step(wait: Wait) -> None:
        if chunks:
            with target.open("ab") as handle:
                handle.write(chunks.pop(0))
            seen_while_writing.append(len(windows))
        elif len(clock.waits) > 20:
            stop.set()  # the file never streamed: give up

    clock = FakeClock(on_wait=copy_step)
    source = _source(tmp_path, clock=clock)

    # Execute
    for window in source.stream(stop):
        windows.append(window)
        if len(windows) == 7:
            break

    # Assert
    assert seen_while_writing == [0] * 10
    assert len(windows) == 7  # 0.3 s = 3600 samples: 7 windows of 512
    # the copy ended with poll 10; poll 11 saw the file unchanged, then it streamed
    assert len(clock.waits) == 11
    assert _ledger(tmp_path)[0]["status"] == "done"


def test_a_corrupt_file_is_skipped_and_later_files_still_stream(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "incoming").mkdir()
    corrupt = tmp_path / "incoming" / "broken.npz"
    corrupt.write_bytes(b"PK\x03\x04 not really a zip")
    stamp = time.time() - 60
    os.utime(corrupt, (stamp, stamp))
    _drop(tmp_path, "good.npz", _recording(2))

    with caplog.at_level(logging.WARNING, logger="edge_agent.recording_folder"):
        windows = _collect(tmp_path, 4)

    assert [w.origin.split(" @")[0] for w in windows] == ["good.npz"] * 4
    assert "skipping incoming recording broken.npz" in caplog.text
    statuses = {e["name"]: e["status"] for e in _ledger(tmp_path)}
    assert statuses == {"broken.npz": "failed", "good.npz": "done"}


def test_any_reader_format_streams_and_unlabelled_files_have_no_true_label(
    tmp_path: Path,
) -> None:
    _drop(tmp_path, "a.wav", _recording(None), age_s=20)
    _drop(tmp_path, "b.csv", _recording(None), age_s=10)
    windows = _collect(tmp_path, 8, time_column="time_s")

    assert [w.origin.split(" @")[0] for w in windows] == ["a.wav"] * 4 + ["b.csv"] * 4
    assert all(w.true_label is None for w in windows)
    np.testing.assert_allclose(windows[0].samples[0], _recording(None).signal[:WINDOW], atol=1e-6)


def test_a_stop_during_a_poll_ends_the_stream_and_incoming_is_created(tmp_path: Path) -> None:
    stop = threading.Event()
    clock = FakeClock(on_wait=lambda wait: stop.set())  # the stop arrives while waiting
    source = _source(tmp_path, poll_s=30.0, clock=clock)

    windows = list(source.stream(stop))

    assert windows == []
    assert [(w.waitable, w.timeout_s) for w in clock.waits] == [(stop, 30.0)]
    assert (tmp_path / "incoming").is_dir()


def test_windows_are_paced_and_stamped_by_the_clock(tmp_path: Path) -> None:
    _drop(tmp_path, "a.npz", _recording(3))
    clock = FakeClock()
    source = RecordingFolderSource(
        tmp_path, window_length=WINDOW, interval_s=0.5, poll_s=POLL_S, clock=clock
    )

    windows = list(itertools.islice(source.stream(threading.Event()), 4))

    assert clock.timeouts == pytest.approx([POLL_S, 0.5, 0.5, 0.5])  # a poll, then pacing
    assert [w.timestamp - WALL_CLOCK_OFFSET_S for w in windows] == pytest.approx(
        [POLL_S, POLL_S + 0.5, POLL_S + 1.0, POLL_S + 1.5]
    )


def test_ledger_skips_a_torn_line_and_forgets_files_that_are_gone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / PROCESSED_FILE
    path.write_text(
        '{"name": "a.npz", "size_bytes": 10, "mtime_ns": 5, "status": "done"}\n'
        '{"name": "b.npz", "size_bytes": 20, "mtime_ns": 6, "status": "failed"}\n'
        '{"name": "c.np'
    )

    with caplog.at_level(logging.WARNING, logger="edge_agent.incoming"):
        ledger = ProcessedLedger(path)
    ledger.add(("d.npz", 1, 2), "done")
    ledger.retain({("b.npz", 20, 6), ("d.npz", 1, 2)})

    assert "skipping unreadable line 3" in caplog.text
    assert ("a.npz", 10, 5) not in ledger
    assert [(e["name"], e["status"]) for e in _ledger(tmp_path)] == [
        ("b.npz", "failed"),
        ("d.npz", "done"),
    ]


def test_folder_source_satisfies_the_window_source_protocol(tmp_path: Path) -> None:
    source: WindowSource = _source(tmp_path)  # checked by mypy

    assert source.sample_shape == (1, WINDOW)
