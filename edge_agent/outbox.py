"""The agent's outbox: diagnoses made while the broker is unreachable, on disk, bounded.

While the agent cannot publish, :class:`~edge_agent.diagnosis_delivery.DiagnosisDelivery`
appends each diagnosis (its JSON) here; once the connection is back it sends them, oldest
first, and removes each after the broker acknowledged it. The outbox lives in
``state_dir/outbox/`` and survives an agent restart.

* **Layout.** Segment files ``0000000001.jsonl``, ``0000000002.jsonl``, …, each of at most
  :func:`segment_records` lines (one diagnosis per line, flushed, not fsynced), and a
  cursor file ``head`` naming how many lines of the oldest segment were already sent. A
  segment fully sent is deleted.
* **Bounded.** At most ``max_records`` diagnoses wait. Beyond that the oldest segment is
  dropped whole (a tenth of the bound at most, 1,000 diagnoses at most) and its diagnoses
  counted as :attr:`OutboxDrop.FULL`: the newest diagnoses are the ones worth keeping.
* **Crash-safe.** A power cut may tear the last line of a segment: it is cut off and
  counted as :attr:`OutboxDrop.UNREADABLE`. A segment holding a line that is not a JSON
  object is set aside as ``<name>.corrupt`` with a warning (its diagnoses counted
  unreadable), and an unreadable cursor as ``head.corrupt`` (the oldest segment is then
  sent from its start again: a few diagnoses may arrive twice). Neither stops the agent.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO

from faultfleet.files import atomic_write

logger = logging.getLogger(__name__)

MAX_SEGMENT_RECORDS = 1000
_SEGMENT_NAME = re.compile(r"(\d{10})\.jsonl")
CURSOR_NAME = "head"


class OutboxDrop(StrEnum):
    """Why diagnoses were never published (a metric label value)."""

    FULL = "outbox_full"
    """The oldest diagnoses, dropped to keep ``[diagnosis] outbox_max_diagnoses``."""
    UNWRITABLE = "unwritable"
    """The outbox could not be written (a full or failing disk)."""
    UNREADABLE = "unreadable"
    """Found torn or corrupt in the outbox when the agent started."""


def segment_records(max_records: int) -> int:
    """Lines per segment file for an outbox of ``max_records``: a tenth of it, 1 to 1000."""
    return min(MAX_SEGMENT_RECORDS, max(1, max_records // 10))


@dataclass
class _Segment:
    seq: int
    path: Path
    start: int
    """Index of its first line among the records this outbox has seen since it was opened."""
    count: int

    @property
    def end(self) -> int:
        return self.start + self.count


@dataclass(frozen=True)
class OutboxBatch:
    """Records taken for sending: the index of the first (since the outbox was opened) and
    the records, oldest first."""

    start: int
    records: list[bytes]

    @property
    def end(self) -> int:
        """Index after the last record."""
        return self.start + len(self.records)


class DiagnosisOutbox:
    """Diagnoses waiting for the broker, oldest first, at most ``max_records``; thread-safe.

    Every record gets an index in the order appended (counted from the records found at
    start). Sending is :meth:`take` — the oldest records not yet taken, now in flight — then
    :meth:`acknowledged` once the broker acknowledged them, which removes them from disk.
    Records in flight count towards the bound; if it drops them they are not counted as
    dropped (the MQTT client holds them and sends them again after a reconnect).

    Parameters
    ----------
    folder : Path
        Where the segment files live (created). What an earlier run left there is loaded,
        torn and corrupt files reported and set aside (module docstring).
    max_records : int
        Most diagnoses kept, >= 0; 0 keeps none (every append is dropped as full).
    on_dropped : callable, optional
        ``on_dropped(reason, n)`` for every ``n`` diagnoses dropped (the agent counts them).
    """

    def __init__(
        self,
        folder: Path,
        *,
        max_records: int,
        on_dropped: Callable[[OutboxDrop, int], None] | None = None,
    ) -> None:
        if max_records < 0:
            raise ValueError(f"max_records={max_records} must be >= 0")
        self.folder = Path(folder)
        self.max_records = max_records
        self.segment_records = segment_records(max_records)
        self._on_dropped = on_dropped or (lambda reason, n: None)
        self._lock = threading.Lock()
        self._segments: list[_Segment] = []
        self._first = 0
        """Index of the oldest record on disk."""
        self._next = 0
        """Index the next record appended gets."""
        self._taken = 0
        """Records before this index were taken for sending."""
        self._cache: tuple[int, list[bytes]] | None = None
        """The lines of the segment read last, by its seq."""
        self._tail: IO[bytes] | None = None
        self.folder.mkdir(parents=True, exist_ok=True)
        self._load()

    def __len__(self) -> int:
        """Records on disk: waiting, and taken but not acknowledged yet."""
        with self._lock:
            return self._next - self._first

    def waiting(self) -> int:
        """Records not taken for sending yet."""
        with self._lock:
            return self._next - max(self._first, self._taken)

    # -- writing ---------------------------------------------------------------------------

    def append(self, record: bytes) -> None:
        """Keep ``record`` (one diagnosis as JSON, no newline) as the newest; drop the oldest
        beyond ``max_records``.

        Raises
        ------
        OSError
            The disk refused the write; the record is not kept (count it unwritable).
        """
        if self.max_records == 0:
            self._on_dropped(OutboxDrop.FULL, 1)
            return
        if b"\n" in record:
            raise ValueError("an outbox record must be one line of JSON")
        with self._lock:
            tail = self._tail_segment()
            assert self._tail is not None
            try:
                self._tail.write(record + b"\n")
                self._tail.flush()
            except OSError:
                self._close_tail()  # the next record starts a fresh segment
                raise
            tail.count += 1
            self._next += 1
            if self._cache is not None and self._cache[0] == tail.seq:
                self._cache[1].append(record)
            dropped = self._trim()
        if dropped:
            self._on_dropped(OutboxDrop.FULL, dropped)

    def _tail_segment(self) -> _Segment:
        if self._tail is not None and self._segments[-1].count < self.segment_records:
            return self._segments[-1]
        self._close_tail()
        seq = self._segments[-1].seq + 1 if self._segments else 1
        segment = _Segment(seq, self.folder / f"{seq:010d}.jsonl", self._next, 0)
        self._tail = segment.path.open("ab")
        self._segments.append(segment)
        return segment

    def _close_tail(self) -> None:
        if self._tail is not None:
            try:
                self._tail.close()
            except OSError as error:  # a failing disk: the lines are already counted
                logger.debug("closing outbox segment: %s", error)
            self._tail = None

    def _trim(self) -> int:
        """Drop the oldest records while more than ``max_records`` are on disk: whole
        segments, or lines of the only one. Returns how many dropped were never taken."""
        dropped = 0
        while self._next - self._first > self.max_records:
            if len(self._segments) == 1:
                until = self._next - self.max_records
            else:
                until = self._segments[0].end
            dropped += max(0, until - max(self._first, self._taken))
            self._remove_until(until)
        return dropped

    # -- sending ---------------------------------------------------------------------------

    def take(self, n: int) -> OutboxBatch:
        """Up to ``n`` of the oldest records not taken yet, now in flight.

        They stay on disk until :meth:`acknowledged`; see :meth:`release`.
        """
        with self._lock:
            start = max(self._first, self._taken)
            records: list[bytes] = []
            for segment in self._segments:
                position = start + len(records)
                if len(records) >= n or position < segment.start:
                    break
                if position >= segment.end:
                    continue
                lines = self._lines(segment)
                first = position - segment.start
                records += lines[first : first + n - len(records)]
            self._taken = start + len(records)
            return OutboxBatch(start, records)

    def _lines(self, segment: _Segment) -> list[bytes]:
        """The lines of ``segment``, kept in memory for the one read last."""
        if self._cache is None or self._cache[0] != segment.seq:
            lines = segment.path.read_bytes().split(b"\n")[: segment.count]
            self._cache = (segment.seq, lines)
        return self._cache[1]

    def acknowledged(self, until: int) -> None:
        """Every record before index ``until`` reached the broker: remove them from disk."""
        with self._lock:
            self._remove_until(until)

    def release(self, start: int) -> None:
        """Records from index ``start`` on were not handed over after all: take them again."""
        with self._lock:
            self._taken = min(self._taken, start)

    def _remove_until(self, until: int) -> None:
        until = min(until, self._next)
        while self._segments and self._first < until:
            head = self._segments[0]
            if until < head.end:
                self._first = until
                self._write_cursor(head)
                return
            if head is self._segments[-1]:  # the segment being written: start a new one
                self._close_tail()
            self._segments.pop(0)
            head.path.unlink(missing_ok=True)
            (self.folder / CURSOR_NAME).unlink(missing_ok=True)
            self._first = head.end
            if self._cache is not None and self._cache[0] == head.seq:
                self._cache = None

    def _write_cursor(self, head: _Segment) -> None:
        text = f"{head.path.name} {self._first - head.start}\n".encode()
        atomic_write(self.folder / CURSOR_NAME, lambda handle: handle.write(text))

    def close(self) -> None:
        """Close the segment being written; what waits stays on disk for the next start."""
        with self._lock:
            self._close_tail()

    # -- loading ---------------------------------------------------------------------------

    def _load(self) -> None:
        for path in sorted(self.folder.iterdir()):
            match = _SEGMENT_NAME.fullmatch(path.name)
            if match is None or not path.is_file():
                continue
            count = self._check(path)
            if count:
                self._segments.append(_Segment(int(match.group(1)), path, self._next, count))
                self._next += count
            elif count == 0:
                path.unlink()
        self._first = self._taken = self._read_cursor()
        dropped = self._trim()
        if dropped:
            self._on_dropped(OutboxDrop.FULL, dropped)
        if self._segments:
            logger.info(
                "%d diagnoses wait in the outbox %s from an earlier run",
                self._next - self._first,
                self.folder,
            )

    def _check(self, path: Path) -> int | None:
        """Lines of a segment, a torn last line cut off; None when it was set aside."""
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            kept = data[: data.rfind(b"\n") + 1]
            os.truncate(path, len(kept))
            logger.warning("outbox %s: cut off a torn last line (a crash while writing)", path)
            self._on_dropped(OutboxDrop.UNREADABLE, 1)
            data = kept
        lines = data.split(b"\n")[:-1]
        for number, line in enumerate(lines, start=1):
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if not isinstance(record, dict):
                aside = path.with_name(f"{path.name}.corrupt")
                os.replace(path, aside)
                logger.warning(
                    "outbox %s: line %d is not a diagnosis; set the file aside as %s, its %d "
                    "diagnoses are not sent (counted on faultfleet_diagnoses_dropped_total"
                    "{reason=%s})",
                    path,
                    number,
                    aside.name,
                    len(lines),
                    OutboxDrop.UNREADABLE,
                )
                self._on_dropped(OutboxDrop.UNREADABLE, len(lines))
                return None
        return len(lines)

    def _read_cursor(self) -> int:
        """Lines of the oldest segment already sent, from the cursor file (0 without one)."""
        path = self.folder / CURSOR_NAME
        if not path.exists():
            return 0
        try:
            name, offset_text = path.read_text(encoding="utf-8").split()
            offset = int(offset_text)
        except (ValueError, UnicodeDecodeError):
            aside = path.with_name(f"{CURSOR_NAME}.corrupt")
            os.replace(path, aside)
            logger.warning(
                "outbox %s is unreadable; set aside as %s: the oldest diagnoses are sent from "
                "the start of their file, some may arrive twice",
                path,
                aside.name,
            )
            return 0
        if not self._segments or self._segments[0].path.name != name:
            path.unlink()  # its segment was sent or set aside
            return 0
        return min(max(offset, 0), self._segments[0].count)
