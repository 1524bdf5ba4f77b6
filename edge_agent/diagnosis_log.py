"""The edge agent's bounded local log of diagnoses: JSON lines with size-based rotation.

Every diagnosis is one JSON object on one line of ``path``. When the next line would take
the file past ``max_bytes`` it is rotated — ``path`` becomes ``path.1``, ``path.1`` becomes
``path.2`` and so on, the oldest beyond ``backups`` deleted — so the log never takes more
than about ``(backups + 1) * max_bytes`` bytes of a gateway's disk.

Lines are written in batches (:class:`~edge_agent.write_batch.WriteBatch`): at the latest
``flush_delay_s`` seconds after the first of them was appended (``flush_delay_s = 0``, the
default here, writes every line at once), when 64 kB wait, on :meth:`DiagnosisLog.flush`
and on close. With a ``wake_writer`` (the agent's: its outbox thread), a batch that is due
is written by that thread when it wakes up (:meth:`DiagnosisLog.flush`), not by the thread
that appended its last line, unless more than :data:`MAX_WAITING_BYTES` wait. So a crash
of the process may lose the lines of the last ``flush_delay_s`` seconds, and, as there is
no fsync, a power cut those the operating system had not written yet. A write that fails
(a full disk) loses the lines of its batch, says how many
(:class:`LogWriteError`) and leaves the log usable; a line torn by a failed or cut-short
write is skipped with a warning when reading, and the next write starts on a fresh line.
"""

from __future__ import annotations

import io
import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from edge_agent.write_batch import WriteBatch
from faultfleet.clock import SYSTEM_CLOCK, Clock
from faultfleet.errors import FaultfleetError, UsageError

logger = logging.getLogger(__name__)

MIN_MAX_BYTES = 1024
"""Smallest accepted ``max_bytes``."""
BATCH_BYTES = 1 << 16
"""Bytes of lines that make a batch due before its delay."""
MAX_WAITING_BYTES = 4 * BATCH_BYTES
"""With a ``wake_writer``: beyond this, :meth:`DiagnosisLog.append_line` writes itself."""


class LogWriteError(FaultfleetError, OSError):
    """Writing waiting lines to the log failed; ``lines_lost`` of them are not in it."""

    def __init__(self, error: OSError, lines_lost: int) -> None:
        super().__init__(error.errno, error.strerror or str(error))
        self.lines_lost = lines_lost


class DiagnosisLog:
    """Append-only JSON-lines log of diagnoses, bounded on disk; thread-safe.

    Parameters
    ----------
    path : Path
        The current log file; rotated files are ``path.1`` (newest) … ``path.<backups>``.
        Its folder is created.
    max_bytes : int
        Largest size of one file in bytes, at least 1024.
    backups : int
        Rotated files kept, at least 0 (0: the log restarts empty when full).
    flush_delay_s : float, seconds
        Longest wait of a line before it is written (module docstring); 0: at once.
    clock : Clock
        Times the wait.
    wake_writer : callable, optional
        Asks the thread that calls :meth:`flush` with ``only_due`` to call it soon (module
        docstring); None: the thread that appends a line writes its batch when it is due.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        max_bytes: int = 10_000_000,
        backups: int = 3,
        flush_delay_s: float = 0.0,
        clock: Clock = SYSTEM_CLOCK,
        wake_writer: Callable[[], None] | None = None,
    ) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1024:
            raise UsageError(
                f"max_bytes must be an int >= {MIN_MAX_BYTES} bytes, got {max_bytes!r}; "
                "give the log room for at least a few diagnoses"
            )
        if isinstance(backups, bool) or not isinstance(backups, int) or backups < 0:
            raise UsageError(f"backups must be an int >= 0, got {backups!r}")
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._remove_stale_backups()
        self._batch = WriteBatch(delay_s=flush_delay_s, max_bytes=BATCH_BYTES, clock=clock)
        self.wake_writer = wake_writer
        self._handle: io.FileIO | None = None
        self._size = 0
        """Bytes of the current file, waiting lines included."""
        self._torn = False
        """A failed write left part of a line: the next write starts on a fresh line."""
        self._open()

    def _rotated(self, number: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{number}")

    def _remove_stale_backups(self) -> None:
        """Delete rotated files beyond ``backups`` (left by a run with more backups)."""
        number = self.backups + 1
        while self._rotated(number).exists():
            logger.info("removing %s: beyond backups=%d", self._rotated(number), self.backups)
            self._rotated(number).unlink()
            number += 1

    def _open(self) -> None:
        handle = io.FileIO(self.path, "ab")  # unbuffered: the batches are the buffer
        size = handle.seek(0, os.SEEK_END)
        if size > 0:
            with self.path.open("rb") as reader:
                reader.seek(size - 1)
                torn = reader.read(1) != b"\n"
            if torn:
                handle.write(b"\n")  # the last line was torn: start ours on a fresh line
                size += 1
        self._handle, self._size, self._torn = handle, size, False

    def _rotate(self) -> None:
        """Start a new file (the lock is held); the waiting lines go to the old one first,
        and a failure to write them is raised once the new file is open."""
        assert self._handle is not None
        failure: LogWriteError | None = None
        try:
            self._write()
        except LogWriteError as error:
            failure = error
        self._handle.close()
        if self.backups == 0:
            self.path.unlink()
        else:
            for number in range(self.backups, 1, -1):
                if self._rotated(number - 1).exists():
                    os.replace(self._rotated(number - 1), self._rotated(number))
            os.replace(self.path, self._rotated(1))
        self._open()
        if failure is not None:
            raise failure

    def append(self, record: Mapping[str, Any]) -> None:
        """Write ``record`` as one JSON line (:meth:`append_line`).

        Raises
        ------
        TypeError
            If the record holds a value JSON cannot represent.
        ValueError
            If it holds NaN or infinity (not valid JSON), its line is longer than
            ``max_bytes``, or the log is closed.
        LogWriteError
            As :meth:`append_line`.
        """
        try:
            text = json.dumps(dict(record), allow_nan=False, separators=(",", ":"))
        except ValueError as exc:
            raise ValueError(
                f"diagnosis record {dict(record)!r} holds NaN or infinity, which JSON cannot "
                "represent; replace them (e.g. by null) before logging"
            ) from exc
        self.append_line(text.encode("utf-8"))

    def append_line(self, line: bytes) -> int:
        """Append ``line``, one JSON object in UTF-8 without its newline (e.g. a message's
        ``model_dump_json()``), rotating first when the file is full; it is written when
        its batch is due (module docstring).

        Returns
        -------
        int
            Lines written to the file by this call (0 while its batch waits).

        Raises
        ------
        ValueError
            The line holds a newline, is longer than ``max_bytes``, or the log is closed.
        LogWriteError
            Writing the batch this line completed failed (this line included).
        """
        if b"\n" in line:
            raise ValueError("a diagnosis log line must not hold a newline; give one JSON object")
        line += b"\n"
        if len(line) > self.max_bytes:
            raise ValueError(
                f"diagnosis record of {len(line)} bytes is larger than max_bytes="
                f"{self.max_bytes}; log less per diagnosis or raise max_bytes"
            )
        with self._lock:
            if self._handle is None:
                raise ValueError(f"diagnosis log {self.path} is closed; open a new DiagnosisLog")
            failure: LogWriteError | None = None
            if self._size > 0 and self._size + len(line) > self.max_bytes:
                try:
                    self._rotate()
                except LogWriteError as error:  # the earlier lines; this one still waits
                    failure = error
            self._size += len(line)
            written = 0
            batch = self._batch
            due = batch.add(line)
            wake = self.wake_writer if due else None
            if due and (wake is None or batch.delay_s == 0 or batch.bytes > MAX_WAITING_BYTES):
                wake = None
                try:
                    written = self._write()
                except LogWriteError as error:
                    earlier = failure.lines_lost if failure is not None else 0
                    raise LogWriteError(error, error.lines_lost + earlier) from error
            if failure is not None:
                raise failure
        if wake is not None:
            wake()  # the batch is due: the writer writes it
        return written

    def flush(self, *, only_due: bool = False) -> int:
        """Write the waiting lines now (with ``only_due``, only once their delay is up);
        the number of lines written.

        Raises
        ------
        LogWriteError
            The write failed; its lines are lost.
        """
        with self._lock:
            if self._handle is not None and (not only_due or self._batch.due()):
                return self._write()
            return 0

    def _write(self) -> int:
        """Write the batch, the lock held; the number of lines written."""
        assert self._handle is not None
        if not self._batch.records:
            return 0
        lines = len(self._batch)
        data = (b"\n" if self._torn else b"") + b"".join(self._batch.take())
        view, done = memoryview(data), 0
        try:
            while done < len(data):
                done += self._handle.write(view[done:]) or 0
        except OSError as error:
            lost = data[done:]
            self._size -= len(lost)
            self._torn = done > 0 and data[done - 1 : done] != b"\n"
            raise LogWriteError(error, lost.count(b"\n")) from error
        self._torn = False
        return lines

    def recent(self, n: int) -> list[dict[str, Any]]:
        """The last ``n`` records across the current and rotated files, newest last."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"n must be an int >= 0, got {n!r}")
        newest_first = [self.path, *(self._rotated(k) for k in range(1, self.backups + 1))]
        with self._lock:
            waiting = b"".join(self._batch.records).decode("utf-8", "replace")
            collected = self._parse(waiting, self.path)
            for file in newest_first:
                if len(collected) >= n:
                    break
                if file.exists():
                    collected = self._read(file) + collected
        return collected[max(0, len(collected) - n) :] if n else []

    @classmethod
    def _read(cls, file: Path) -> list[dict[str, Any]]:
        return cls._parse(file.read_bytes().decode("utf-8", "replace"), file)

    @staticmethod
    def _parse(text: str, file: Path) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                logger.warning("%s: skipping line %d, not valid JSON (%s)", file, number, exc)
                continue
            if not isinstance(record, dict):
                logger.warning("%s: skipping line %d, not a JSON object", file, number)
                continue
            records.append(record)
        return records

    def close(self) -> None:
        """Write the waiting lines and close the file; :meth:`recent` still works,
        :meth:`append` raises.

        Raises
        ------
        LogWriteError
            The last lines could not be written (the file is closed all the same).
        """
        with self._lock:
            if self._handle is not None:
                try:
                    self._write()
                finally:
                    self._handle.close()
                    self._handle = None

    def __enter__(self) -> DiagnosisLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
