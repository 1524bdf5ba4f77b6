"""What the agent refuses from ``incoming/``: links leaving the folder and oversized files."""

from __future__ import annotations

import json
import logging
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest

from edge_agent.incoming import IncomingRefusal, content_bytes, refusal
from edge_agent.recording_folder import PROCESSED_FILE, RecordingFolderSource
from edge_agent.sources import Window
from signal_pipeline.conditions import Condition
from signal_pipeline.machine import MachineProfile
from signal_pipeline.readers import write_recording
from signal_pipeline.recording import Recording
from signal_pipeline.simulator import simulate
from tests.clocks import FakeClock

WINDOW = 512
POLL_S = 0.03


def _recording(label: int = 2, seconds: float = 0.2) -> Recording:
    rng = np.random.default_rng(label)
    return simulate(
        Condition.from_label(label), MachineProfile.nominal(), seconds, rng
    ).to_recording(source="test")


def _collect(
    folder: Path, max_incoming_bytes: int, polls: int = 4
) -> tuple[list[Window], list[IncomingRefusal]]:
    """Every window streamed from ``folder`` over ``polls`` polls, and the refusals."""
    stop = threading.Event()
    clock = FakeClock(on_wait=lambda wait: stop.set() if len(clock.waits) > polls else None)
    refused: list[IncomingRefusal] = []
    source = RecordingFolderSource(
        folder,
        window_length=WINDOW,
        poll_s=POLL_S,
        clock=clock,
        max_incoming_bytes=max_incoming_bytes,
        on_refused=refused.append,
    )
    return list(source.stream(stop)), refused


def _statuses(folder: Path) -> dict[str, str]:
    lines = (folder / PROCESSED_FILE).read_text().splitlines()
    return {entry["name"]: entry["status"] for entry in map(json.loads, lines)}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A recordings folder with its incoming/ and, beside it, a file outside it."""
    (tmp_path / "recordings" / "incoming").mkdir(parents=True)
    write_recording(_recording(), tmp_path / "secret.npz")
    return tmp_path / "recordings"


def test_a_link_leaving_the_folder_is_refused_counted_and_left_in_place(
    folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: a link to a recording outside the folder, and a genuine recording
    link = folder / "incoming" / "passwd.npz"
    link.symlink_to(folder.parent / "secret.npz")
    write_recording(_recording(3), folder / "incoming" / "good.npz")

    # Execute: several polls, so a refused file would be looked at again if it could be
    with caplog.at_level(logging.WARNING, logger="edge_agent.recording_folder"):
        windows, refused = _collect(folder, max_incoming_bytes=10**9)

    # Assert
    assert {w.origin.split(" @")[0] for w in windows} == {"good.npz"}
    assert refused == [IncomingRefusal.OUTSIDE_FOLDER]
    assert _statuses(folder) == {"passwd.npz": "refused", "good.npz": "done"}
    assert link.is_symlink()
    assert caplog.text.count("refusing incoming file") == 1
    assert "outside the recordings folder" in caplog.text


def test_a_link_inside_the_folder_streams(folder: Path) -> None:
    # Prepare: the recording lives in the folder, the link in incoming/
    write_recording(_recording(4), folder / "archive" / "a.npz")
    (folder / "incoming" / "a.npz").symlink_to(folder / "archive" / "a.npz")

    # Execute
    windows, refused = _collect(folder, max_incoming_bytes=10**9)

    # Assert
    assert len(windows) == 4  # 0.2 s at 12 kHz: 2400 samples, 4 windows of 512
    assert refused == []


def test_a_file_over_the_size_setting_is_refused_before_it_is_read(
    folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: one recording too large for the limit, one within it
    big = write_recording(_recording(5, seconds=1.0), folder / "incoming" / "big.wav")
    small = write_recording(_recording(6, seconds=0.1), folder / "incoming" / "small.wav")
    limit = (big.stat().st_size + small.stat().st_size) // 2

    # Execute
    with caplog.at_level(logging.WARNING, logger="edge_agent.recording_folder"):
        windows, refused = _collect(folder, max_incoming_bytes=limit)

    # Assert
    assert {w.origin.split(" @")[0] for w in windows} == {"small.wav"}
    assert refused == [IncomingRefusal.TOO_LARGE]
    assert _statuses(folder) == {"big.wav": "refused", "small.wav": "done"}
    assert big.exists()
    assert f"max_incoming_bytes={limit}" in caplog.text


def test_a_small_archive_that_inflates_beyond_the_limit_is_refused(folder: Path) -> None:
    # Prepare: 8 MB of zeros compressed into a few kB
    path = folder / "incoming" / "bomb.npz"
    np.savez_compressed(path, signal=np.zeros(2_000_000, dtype=np.float32), fs_hz=12000.0)

    # Execute
    reason = refusal(path, folder, max_bytes=1_000_000)

    # Assert
    assert path.stat().st_size < 100_000
    assert content_bytes(path) > 8_000_000
    assert reason is not None
    assert reason[0] is IncomingRefusal.TOO_LARGE


def test_an_unreadable_file_is_counted_as_unreadable(folder: Path) -> None:
    # Prepare
    broken = folder / "incoming" / "broken.npz"
    with zipfile.ZipFile(broken, "w") as archive:
        archive.writestr("nothing.txt", "not a recording")

    # Execute
    windows, refused = _collect(folder, max_incoming_bytes=10**9)

    # Assert
    assert windows == []
    assert refused == [IncomingRefusal.UNREADABLE]
    assert _statuses(folder) == {"broken.npz": "failed"}
