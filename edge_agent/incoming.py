"""What an agent takes from a recordings folder's ``incoming/``: stable files, the ledger of
files already handled, and the files it refuses.

* :func:`scan` lists the regular, non-hidden files of ``incoming/`` with their size and
  modification time; :class:`~edge_agent.recording_folder.RecordingFolderSource` streams a
  file once these held over one poll.
* :func:`refusal` is the admission rule, checked before a file is read: a symbolic link
  whose target resolves outside the recordings folder is refused (``/etc/passwd`` is not a
  recording), and so is a file whose content exceeds ``max_bytes`` — its size on disk, or
  for a ``.npz`` archive the uncompressed size of its arrays, since reading and windowing
  a recording takes several times its size in memory.
* :class:`ProcessedLedger` remembers every file handled as ``done``, ``failed`` (could not
  be read) or ``refused``, so none is looked at twice. A refused file is left in place:
  the agent never moves or deletes what a plant engineer dropped; the warning names the
  file and the rule, and the file is considered again once its size or modification time
  changes.
"""

from __future__ import annotations

import json
import logging
import os
import zipfile
from enum import StrEnum
from pathlib import Path
from typing import IO

from faultfleet.files import atomic_write

logger = logging.getLogger(__name__)

FileKey = tuple[str, int, int]
"""An incoming file as remembered: (name, size in bytes, modification time in ns)."""


class IncomingRefusal(StrEnum):
    """Why a file of ``incoming/`` was not diagnosed (a metric label value)."""

    OUTSIDE_FOLDER = "outside_folder"
    """A symbolic link whose target lies outside the recordings folder."""
    TOO_LARGE = "too_large"
    """More content than ``[source] max_incoming_bytes``."""
    UNREADABLE = "unreadable"
    """No reader could make a recording of it (corrupt, unknown format, too short)."""


def refusal(path: Path, root: Path, max_bytes: int) -> tuple[IncomingRefusal, str] | None:
    """Why ``path`` (a file of ``root/incoming``) must not be read, or None when it may.

    Parameters
    ----------
    path : Path
        The incoming file (possibly a symbolic link).
    root : Path
        The recordings folder every link must stay inside.
    max_bytes : int
        The largest content accepted, bytes.

    Returns
    -------
    (IncomingRefusal, str) or None
        The rule broken and a sentence for the log naming the file and what to do.
    """
    if path.is_symlink():
        target = path.resolve()
        if not target.is_relative_to(root.resolve()):
            return IncomingRefusal.OUTSIDE_FOLDER, (
                f"{path.name} is a symbolic link to {target}, outside the recordings folder "
                f"{root}; copy the recording into incoming/ instead"
            )
    size = content_bytes(path)
    if size > max_bytes:
        return IncomingRefusal.TOO_LARGE, (
            f"{path.name} holds {size} bytes, above [source] max_incoming_bytes={max_bytes}; "
            "split the recording into shorter files or raise the setting"
        )
    return None


def content_bytes(path: Path) -> int:
    """Bytes a reader of ``path`` takes in: the file's size, or the uncompressed size of a
    ``.npz`` archive's members when that is larger (a small archive may inflate a lot)."""
    size = path.stat().st_size
    if path.suffix.lower() != ".npz":
        return size
    try:
        with zipfile.ZipFile(path) as archive:
            inflated = sum(member.file_size for member in archive.infolist())
    except (OSError, zipfile.BadZipFile):
        return size  # not an archive: the reader will say so
    return max(size, inflated)


def scan(folder: Path) -> dict[str, FileKey]:
    """Regular, non-hidden files of ``folder`` by name, with their size and mtime.

    A symbolic link counts with its target's size and time; a dangling one is skipped.
    """
    found: dict[str, FileKey] = {}
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                if not entry.is_file():
                    continue
                stat = entry.stat()
            except FileNotFoundError:
                continue  # removed between listing and stat
            found[entry.name] = (entry.name, stat.st_size, stat.st_mtime_ns)
    return found


def file_key(path: Path) -> FileKey | None:
    """(name, size, mtime) of ``path``, or None when it is gone."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return (path.name, stat.st_size, stat.st_mtime_ns)


class ProcessedLedger:
    """The append-only list of incoming files already handled (one JSON line each)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: dict[FileKey, str] = {}
        self._needs_newline = False
        if path.exists():
            raw = path.read_bytes()
            self._needs_newline = bool(raw) and not raw.endswith(b"\n")
            for number, line in enumerate(raw.decode("utf-8", "replace").splitlines(), 1):
                if line.strip():
                    self._load_line(number, line)

    def _load_line(self, number: int, line: str) -> None:
        try:
            entry = json.loads(line)
            key = (entry["name"], entry["size_bytes"], entry["mtime_ns"])
            status = str(entry.get("status", "done"))
        except (ValueError, TypeError, KeyError) as exc:
            logger.warning("%s: skipping unreadable line %d (%s)", self.path, number, exc)
            return
        if not (isinstance(key[0], str) and isinstance(key[1], int) and isinstance(key[2], int)):
            logger.warning("%s: skipping line %d with bad field types", self.path, number)
            return
        self.entries[key] = status

    def __contains__(self, key: FileKey) -> bool:
        return key in self.entries

    def add(self, key: FileKey, status: str) -> None:
        """Remember ``key`` as ``status`` ("done", "failed" or "refused"), durably."""
        line = _ledger_line(key, status)
        with self.path.open("a", encoding="utf-8") as handle:
            if self._needs_newline:
                handle.write("\n")  # end a line torn by a power cut, keep ours whole
                self._needs_newline = False
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        self.entries[key] = status

    def retain(self, present: set[FileKey]) -> None:
        """Forget files no longer present; rewrites the file atomically when it shrinks."""
        kept = {key: status for key, status in self.entries.items() if key in present}
        if len(kept) == len(self.entries) and not self._needs_newline:
            return

        def write(handle: IO[bytes]) -> None:
            for key, status in sorted(kept.items()):
                handle.write(_ledger_line(key, status).encode("utf-8"))

        atomic_write(self.path, write)
        self.entries, self._needs_newline = kept, False


def _ledger_line(key: FileKey, status: str) -> str:
    name, size, mtime_ns = key
    entry = {"name": name, "size_bytes": size, "mtime_ns": mtime_ns, "status": status}
    return json.dumps(entry) + "\n"
