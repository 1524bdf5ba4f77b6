"""The live windows an agent diagnosed, kept on disk so that they can be labelled later.

A maintenance finding often comes days after the fact ("the outer race of pump 3 was
damaged since Monday"). :class:`WindowStore` keeps every window the agent diagnosed, with
the timestamp its diagnosis carries, in ``state_dir/windows/``; the labels file
(:mod:`edge_agent.labels_file`) names time ranges and their label, and the windows inside
a range join the agent's training data at its next campaign (:mod:`edge_agent.labelled_data`).

Layout: segment files ``w<samples>-<sequence>.bin`` of fixed-size records, a float64 Unix
time followed by the window's float32 samples (little-endian), appended as windows are
diagnosed. A segment is closed at an eighth of ``max_bytes`` and the oldest segments are
removed once the store holds more than ``max_bytes``: the store keeps the newest windows,
``max_bytes / (8 + 4 · samples)`` of them (about 24,000 windows of 1024 samples per
100 MB). A record cut short by a crash is ignored. ``max_bytes = 0`` keeps nothing. A disk
that refuses a window is logged when the failures start and when they end, and counted in
:attr:`WindowStore.failures`; it never stops diagnosis.

Windows wait in memory, copied into a pre-allocated batch of records (64 kB), to be
written together: at the latest ``flush_delay_s`` seconds after the first of them was kept
(0, the default here: each at once), when the batch is full, before every read and on
close; a crash of the process loses the windows of the last ``flush_delay_s`` seconds.
With a ``wake_writer`` (the agent's: its outbox thread), a full or due batch is handed to
that thread, which writes it at its next wake-up (:meth:`WindowStore.flush`), so the
diagnosis thread never waits on the disk; should more than :data:`MAX_WAITING_BATCHES`
batches wait for it (a writer held up), the diagnosis thread writes them itself, so no
window is lost and memory stays bounded.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from faultfleet.clock import SYSTEM_CLOCK, Clock
from faultfleet.types import FloatArray

logger = logging.getLogger(__name__)

SEGMENTS_PER_STORE = 8
BATCH_BYTES = 1 << 16
"""Bytes of windows written together (the records of one batch: 16 of 1024 samples)."""
MAX_WAITING_BATCHES = 8
"""Full batches that may wait for the writer; beyond, ``keep`` writes them itself."""
_NAME = re.compile(r"^w(\d+)-(\d{12})\.bin$")


@dataclass
class _Segment:
    path: Path
    size_bytes: int
    first_s: float
    last_s: float


class WindowStore:
    """Bounded on-disk store of diagnosed windows; thread-safe.

    Parameters
    ----------
    folder : Path
        Created when the first window is kept.
    sample_size : int
        Samples per window (every window is flattened).
    max_bytes : int
        Most bytes kept (0: keep nothing).
    flush_delay_s : float, seconds
        Longest wait of a kept window before it is written (module docstring); 0: at once.
    clock : Clock
        Times the wait.
    wake_writer : callable, optional
        Asks the thread that calls :meth:`flush` to call it soon (module docstring); None:
        the thread that keeps a window writes its batch when it is due.
    """

    def __init__(
        self,
        folder: Path,
        *,
        sample_size: int,
        max_bytes: int,
        flush_delay_s: float = 0.0,
        clock: Clock = SYSTEM_CLOCK,
        wake_writer: Callable[[], None] | None = None,
    ) -> None:
        if not flush_delay_s >= 0:
            raise ValueError(f"flush_delay_s must be a number of seconds >= 0: {flush_delay_s!r}")
        if sample_size < 1 or max_bytes < 0:
            raise ValueError(
                f"sample_size {sample_size} must be >= 1 and max_bytes {max_bytes} >= 0"
            )
        self.folder = folder
        self.sample_size = sample_size
        self.max_bytes = max_bytes
        self.record = np.dtype([("t", "<f8"), ("x", "<f4", (sample_size,))])
        self.segment_bytes = max(self.record.itemsize, max_bytes // SEGMENTS_PER_STORE)
        self.flush_delay_s = flush_delay_s
        self.clock = clock
        self.wake_writer = wake_writer
        self._capacity = max(1, -(-BATCH_BYTES // self.record.itemsize))
        """Windows per batch: the first count that reaches :data:`BATCH_BYTES`."""
        self._lock = threading.Lock()
        """Guards the batch being filled and the full batches (held briefly)."""
        self._disk_lock = threading.Lock()
        """Guards the segments and the open file; taken before ``_lock``, never after."""
        self._rows: npt.NDArray[np.void]
        self._times: npt.NDArray[np.float64]
        self._samples: FloatArray
        self._count = 0
        """Windows in the batch being filled (``_rows``, viewed as ``_times`` and ``_samples``)."""
        self._new_batch()
        self._full: list[npt.NDArray[np.void]] = []
        """Batches waiting to be written, oldest first."""
        self._first_s = 0.0
        """Monotonic time of the first window of the batch being filled."""
        self._segments: list[_Segment] = self._existing() if max_bytes else []
        self._file: BinaryIO | None = None
        self._next = 1 + max((self._sequence(s.path) for s in self._segments), default=0)
        self.failures = 0
        """Windows the disk refused since the start."""
        self._failing = False

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    @property
    def size_bytes(self) -> int:
        with self._disk_lock:
            self._write_waiting()
            return sum(s.size_bytes for s in self._segments)

    def __len__(self) -> int:
        with self._disk_lock:
            self._write_waiting()
            return sum(s.size_bytes // self.record.itemsize for s in self._segments)

    # -- writing (the diagnosis thread) ------------------------------------------------------

    def keep(self, samples: FloatArray, timestamp: float) -> None:
        """Keep one window (an array of any shape holding ``sample_size`` samples) diagnosed
        at ``timestamp`` (Unix seconds): copied into the waiting batch, written when the
        batch is due; a refusing disk is logged and counted, not raised."""
        if not self.enabled:
            return
        flat = samples.reshape(self.sample_size)
        with self._lock:
            count = self._count
            self._times[count] = timestamp
            self._samples[count] = flat  # the copy: the source may reuse its buffer
            self._count = count = count + 1
            delay_s = self.flush_delay_s
            if count == 1 and delay_s > 0:
                self._first_s = self.clock.monotonic()
            waits = self.wake_writer is not None or not self._due()
            if count < self._capacity and delay_s > 0 and waits:
                return
            self._seal()
            wake = self.wake_writer if len(self._full) <= MAX_WAITING_BATCHES else None
        if wake is not None:
            wake()
            return
        with self._disk_lock:
            self._write_waiting()

    def flush(self, *, only_due: bool = False) -> None:
        """Write the waiting windows now (with ``only_due``, only full batches and a batch
        whose delay is up); the writer calls this."""
        with self._disk_lock:
            if not only_due:
                self._write_waiting()
                return
            with self._lock:
                if self._count and self._due():
                    self._seal()
                batches, self._full = self._full, []
            self._write_batches(batches)

    def _due(self) -> bool:
        """Whether the first window of the batch being filled has waited its delay."""
        return self.clock.monotonic() - self._first_s >= self.flush_delay_s

    def _new_batch(self) -> None:
        """Start an empty batch to fill (``_lock`` held, or from ``__init__``)."""
        self._rows = np.empty(self._capacity, dtype=self.record)
        self._times = self._rows["t"]
        self._samples = self._rows["x"]
        self._count = 0

    def _seal(self) -> None:
        """Move the windows of the batch being filled to the full ones (``_lock`` held)."""
        self._full.append(self._rows[: self._count])
        self._new_batch()

    def _write_waiting(self) -> None:
        """Write every waiting window (``_disk_lock`` held)."""
        with self._lock:
            if self._count:
                self._seal()
            batches, self._full = self._full, []
        self._write_batches(batches)

    def _write_batches(self, batches: list[npt.NDArray[np.void]]) -> None:
        """Write ``batches`` into segments, in order (``_disk_lock`` held)."""
        total = sum(len(rows) for rows in batches)
        written = 0
        try:
            for rows in batches:
                done = 0
                while done < len(rows):
                    chunk = self._write_segment(rows[done:])
                    done += chunk
                    written += chunk
        except OSError as error:
            self._refused(total - written, error)
            return
        if total:
            self._prune()
        if self._failing and total:
            logger.info("diagnosed windows are kept in %s again", self.folder)
            self._failing = False

    def _write_segment(self, rows: npt.NDArray[np.void]) -> int:
        """Write the first of ``rows`` (records) that fit in the open segment; how many."""
        item = self.record.itemsize
        segment = self._open_segment(float(rows["t"][0]))
        assert self._file is not None
        room = max(1, -(-(self.segment_bytes - segment.size_bytes) // item))
        chunk = rows[:room]
        self._file.write(chunk.data)
        self._file.flush()
        segment.size_bytes += len(chunk) * item
        segment.last_s = max(segment.last_s, float(chunk["t"].max()))
        if segment.size_bytes >= self.segment_bytes:
            self._close()
        return len(chunk)

    def _refused(self, windows: int, error: OSError) -> None:
        """``windows`` were not written: count them, log when failures start."""
        self.failures += windows
        if not self._failing:
            logger.error(
                "cannot keep diagnosed windows in %s (%s); they cannot be labelled later "
                "until this is fixed",
                self.folder,
                error,
            )
        self._failing = True
        try:
            self._close()  # the next window starts a new segment
        except OSError as closing:
            logger.debug("closing the refused segment in %s: %s", self.folder, closing)
            self._file = None

    def close(self) -> None:
        """Write the waiting windows and close the open segment."""
        with self._disk_lock:
            self._write_waiting()
            self._close()

    def _open_segment(self, timestamp: float) -> _Segment:
        if self._file is not None:
            return self._segments[-1]
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"w{self.sample_size}-{self._next:012d}.bin"
        self._next += 1
        self._file = path.open("ab")
        self._segments.append(_Segment(path, 0, timestamp, timestamp))
        return self._segments[-1]

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _prune(self) -> None:
        total = sum(s.size_bytes for s in self._segments)
        while total > self.max_bytes and len(self._segments) > 1:
            oldest = self._segments.pop(0)
            total -= oldest.size_bytes
            oldest.path.unlink(missing_ok=True)

    # -- reading (the labels thread) ---------------------------------------------------------

    def fingerprint(self, ranges: Sequence[tuple[float, float]]) -> tuple[tuple[str, int], ...]:
        """Names and sizes of the segments holding windows inside ``ranges``: unchanged,
        :meth:`read` would give the same windows."""
        with self._disk_lock:
            self._write_waiting()
            return tuple(
                (s.path.name, s.size_bytes) for s in self._segments if _overlaps(s, ranges)
            )

    def read(
        self, ranges: Sequence[tuple[float, float]]
    ) -> tuple[npt.NDArray[np.float64], FloatArray]:
        """Timestamps (n,) and samples (n, sample_size) of the windows whose timestamp lies
        in one of ``ranges`` (start included, end excluded), oldest first."""
        with self._disk_lock:
            self._write_waiting()
            if self._file is not None:
                self._file.flush()
            chosen = [(s.path, s.size_bytes) for s in self._segments if _overlaps(s, ranges)]
        times: list[npt.NDArray[np.float64]] = []
        samples: list[FloatArray] = []
        for path, size in chosen:
            rows = _records(path, self.record, size // self.record.itemsize)
            inside = np.zeros(len(rows), dtype=bool)
            for start, end in ranges:
                inside |= (rows["t"] >= start) & (rows["t"] < end)
            times.append(np.asarray(rows["t"][inside], dtype=np.float64))
            samples.append(np.asarray(rows["x"][inside], dtype=np.float32))
        if not times:
            return np.empty(0), np.empty((0, self.sample_size), dtype=np.float32)
        return np.concatenate(times), np.concatenate(samples)

    # -- start -------------------------------------------------------------------------------

    def _existing(self) -> list[_Segment]:
        """Segments left by an earlier run, oldest first (other window sizes are ignored)."""
        if not self.folder.is_dir():
            return []
        found = []
        for path in sorted(self.folder.glob("w*.bin"), key=self._sequence):
            match = _NAME.match(path.name)
            if match is None or int(match[1]) != self.sample_size:
                continue
            count = path.stat().st_size // self.record.itemsize
            if count == 0:
                continue
            rows = _records(path, self.record, count)
            size = count * self.record.itemsize
            found.append(_Segment(path, size, float(rows["t"].min()), float(rows["t"].max())))
        return found

    @staticmethod
    def _sequence(path: Path) -> int:
        match = _NAME.match(path.name)
        return int(match[2]) if match else 0


def _overlaps(segment: _Segment, ranges: Sequence[tuple[float, float]]) -> bool:
    return any(start <= segment.last_s and segment.first_s < end for start, end in ranges)


def _records(path: Path, record: np.dtype[np.void], count: int) -> npt.NDArray[np.void]:
    """The first ``count`` records of ``path`` (fewer if it shrank since)."""
    try:
        return np.fromfile(path, dtype=record, count=count)
    except (OSError, ValueError):
        return np.empty(0, dtype=record)
