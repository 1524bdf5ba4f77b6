"""The diagnosed windows kept on disk: read by time range, bounded, kept over restarts."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from edge_agent.window_store import BATCH_BYTES, MAX_WAITING_BATCHES, WindowStore
from tests.clocks import FakeClock

SAMPLES = 16
RECORD_BYTES = 8 + 4 * SAMPLES


def window(value: float) -> np.ndarray:
    return np.full((1, SAMPLES), value, dtype=np.float32)


def store(path: Path, max_bytes: int = 100 * RECORD_BYTES) -> WindowStore:
    return WindowStore(path / "windows", sample_size=SAMPLES, max_bytes=max_bytes)


def test_windows_are_read_back_by_time_range(tmp_path: Path) -> None:
    # Prepare
    windows = store(tmp_path)
    for second in range(10):
        windows.keep(window(second), 1_000.0 + second)

    # Execute
    times, samples = windows.read([(1_002.0, 1_004.0), (1_008.0, 1_100.0)])

    # Assert: start included, end excluded
    assert times.tolist() == [1_002.0, 1_003.0, 1_008.0, 1_009.0]
    assert samples[:, 0].tolist() == [2.0, 3.0, 8.0, 9.0]
    assert samples.shape == (4, SAMPLES)


def test_the_store_keeps_the_newest_windows_within_its_size(tmp_path: Path) -> None:
    # Prepare: room for 16 windows, in segments of 2
    windows = store(tmp_path, max_bytes=16 * RECORD_BYTES)

    # Execute
    for second in range(100):
        windows.keep(window(second), float(second))
    times, _ = windows.read([(0.0, 1_000.0)])

    # Assert
    assert windows.size_bytes <= 16 * RECORD_BYTES
    assert times.tolist() == [float(s) for s in range(100 - len(times), 100)]
    assert len(times) >= 14


def test_a_restarted_agent_finds_its_windows_and_ignores_a_cut_record(tmp_path: Path) -> None:
    # Prepare: 3 windows, then half a record as a crash leaves it
    before = store(tmp_path)
    for second in range(3):
        before.keep(window(second), 50.0 + second)
    before.close()
    segment = next((tmp_path / "windows").glob("*.bin"))
    with segment.open("ab") as file:
        file.write(b"\x00" * (RECORD_BYTES // 2))

    # Execute
    after = store(tmp_path)
    after.keep(window(9), 60.0)
    times, _ = after.read([(0.0, 100.0)])

    # Assert
    assert times.tolist() == [50.0, 51.0, 52.0, 60.0]
    assert len(after) == 4


def test_zero_bytes_keeps_nothing(tmp_path: Path) -> None:
    windows = store(tmp_path, max_bytes=0)
    windows.keep(window(1), 1.0)
    assert not (tmp_path / "windows").exists()
    assert windows.read([(0.0, 2.0)])[0].size == 0


def test_a_disk_that_refuses_windows_is_logged_once_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: the store's folder is a file
    (tmp_path / "windows").write_text("not a folder", encoding="utf-8")
    windows = store(tmp_path)

    # Execute
    with caplog.at_level(logging.ERROR):
        for second in range(3):
            windows.keep(window(second), float(second))

    # Assert
    assert windows.failures == 3
    assert len([r for r in caplog.records if "cannot keep diagnosed windows" in r.message]) == 1


def test_the_fingerprint_changes_only_with_windows_inside_the_ranges(tmp_path: Path) -> None:
    # Prepare: one segment per 2 windows
    windows = store(tmp_path, max_bytes=16 * RECORD_BYTES)
    for second in range(4):
        windows.keep(window(second), float(second))
    early = windows.fingerprint([(0.0, 2.0)])

    # Execute
    windows.keep(window(9), 9.0)

    # Assert
    assert windows.fingerprint([(0.0, 2.0)]) == early
    assert windows.fingerprint([(0.0, 10.0)]) != windows.fingerprint([(0.0, 4.0)])


def test_kept_windows_wait_for_their_delay_and_every_read_sees_them(tmp_path: Path) -> None:
    # Prepare: windows wait up to 1 s before they are written
    clock = FakeClock()
    windows = WindowStore(
        tmp_path / "windows",
        sample_size=SAMPLES,
        max_bytes=100 * RECORD_BYTES,
        flush_delay_s=1.0,
        clock=clock,
    )

    # Execute / Assert
    windows.keep(window(1), 1.0)
    windows.keep(window(2), 2.0)
    assert not (tmp_path / "windows").exists()  # nothing written yet
    windows.flush(only_due=True)
    assert not (tmp_path / "windows").exists()
    clock.advance(1.0)
    windows.flush(only_due=True)
    on_disk = sum(p.stat().st_size for p in (tmp_path / "windows").iterdir())
    assert on_disk == 2 * RECORD_BYTES
    windows.keep(window(3), 3.0)  # waits, but a read writes it first
    times, samples = windows.read([(0.0, 10.0)])
    assert times.tolist() == [1.0, 2.0, 3.0]
    assert samples[:, 0].tolist() == [1.0, 2.0, 3.0]
    windows.close()


def test_a_refused_batch_counts_each_of_its_windows(tmp_path: Path) -> None:
    # Prepare: the store's folder is a file; windows wait up to 1 s
    (tmp_path / "windows").write_text("not a folder", encoding="utf-8")
    windows = WindowStore(
        tmp_path / "windows",
        sample_size=SAMPLES,
        max_bytes=100 * RECORD_BYTES,
        flush_delay_s=1.0,
        clock=FakeClock(),
    )

    # Execute
    for second in range(3):
        windows.keep(window(second), float(second))
    waiting = windows.failures
    windows.flush()

    # Assert
    assert (waiting, windows.failures) == (0, 3)


def deferred(path: Path, wakes: list[int], *, delay_s: float = 1.0) -> WindowStore:
    """A store whose full batches wait for a writer; ``wakes`` counts the wake-ups."""
    return WindowStore(
        path / "windows",
        sample_size=SAMPLES,
        max_bytes=10_000 * RECORD_BYTES,
        flush_delay_s=delay_s,
        clock=FakeClock(),
        wake_writer=lambda: wakes.append(1),
    )


def on_disk(path: Path) -> int:
    folder = path / "windows"
    return sum(p.stat().st_size for p in folder.iterdir()) if folder.exists() else 0


def test_a_full_batch_wakes_the_writer_which_writes_it_and_close_writes_the_rest(
    tmp_path: Path,
) -> None:
    # Prepare: one buffer reused for every window, as a source may do
    wakes: list[int] = []
    windows = deferred(tmp_path, wakes)
    per_batch = -(-BATCH_BYTES // RECORD_BYTES)
    buffer = window(0)

    # Execute / Assert: the keeping thread never writes
    for index in range(per_batch + 3):
        buffer[:] = index
        windows.keep(buffer, float(index))
    assert (len(wakes), on_disk(tmp_path)) == (1, 0)
    windows.flush(only_due=True)  # the writer: the full batch, not the 3 still in time
    assert on_disk(tmp_path) == per_batch * RECORD_BYTES
    windows.close()
    assert on_disk(tmp_path) == (per_batch + 3) * RECORD_BYTES
    times, samples = windows.read([(0.0, 1e9)])
    assert times.tolist() == [float(i) for i in range(per_batch + 3)]
    assert samples[:, 0].tolist() == [float(i) for i in range(per_batch + 3)]


def test_batches_beyond_the_bound_are_written_by_the_keeping_thread_and_none_is_lost(
    tmp_path: Path,
) -> None:
    # Prepare: a writer that never comes
    wakes: list[int] = []
    windows = deferred(tmp_path, wakes)
    per_batch = -(-BATCH_BYTES // RECORD_BYTES)
    n = (MAX_WAITING_BATCHES + 1) * per_batch

    # Execute
    for index in range(n):
        windows.keep(window(index), float(index))

    # Assert
    assert len(wakes) == MAX_WAITING_BATCHES
    assert on_disk(tmp_path) == n * RECORD_BYTES
    assert len(windows) == n
    assert windows.failures == 0


def test_a_window_due_by_time_waits_for_the_writer(tmp_path: Path) -> None:
    # Prepare
    wakes: list[int] = []
    clock = FakeClock()
    windows = WindowStore(
        tmp_path / "windows",
        sample_size=SAMPLES,
        max_bytes=100 * RECORD_BYTES,
        flush_delay_s=1.0,
        clock=clock,
        wake_writer=lambda: wakes.append(1),
    )
    windows.keep(window(1), 1.0)

    # Execute / Assert
    windows.flush(only_due=True)
    assert on_disk(tmp_path) == 0
    clock.advance(1.0)
    windows.keep(window(2), 2.0)  # due, yet not written by the keeping thread
    assert on_disk(tmp_path) == 0
    windows.flush(only_due=True)
    assert on_disk(tmp_path) == 2 * RECORD_BYTES
