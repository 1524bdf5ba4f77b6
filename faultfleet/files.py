"""File helpers every faultfleet process shares."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

PUBLIC_MODE = 0o666
"""Mode of a file anyone the umask allows may read: 0644 under the usual umask 022."""
PRIVATE_MODE = 0o600
"""Mode of a file only its owner may read or write (keys, passwords)."""
_TEMPORARY_NAME_TRIES = 100
_IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1024)
"""Buffers handed to one ``writev`` call at most."""


def atomic_write(
    path: Path, write: Callable[[IO[bytes]], object], *, mode: int = PUBLIC_MODE
) -> Path:
    """Write a file through ``write`` into a temporary sibling, then rename it into place.

    Parameters
    ----------
    path : Path
        Destination; its parent folders are created.
    write : callable
        Receives a binary file object open for writing.
    mode : int
        Permission bits of the new file before the process's umask removes some, as
        :func:`open` would create it: the default gives 0644 under umask 022 (the service
        user and the plant engineer can both read a recording made by the other), and
        :data:`PRIVATE_MODE` keeps a file to its owner whatever the umask. A file that is
        replaced takes these permissions, not its predecessor's.

    Returns
    -------
    Path
        ``path``. A reader never sees a half-written file: either the old file or the
        complete new one is there.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with _temporary_sibling(path, mode) as (handle, temp_path):
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())
        handle.close()
        os.replace(temp_path, path)
    return path


def atomic_write_buffers(
    path: Path,
    buffers: Sequence[bytes | bytearray | memoryview],
    *,
    mode: int = PUBLIC_MODE,
    make_parent: bool = True,
    reuse: Path | None = None,
) -> Path:
    """As :func:`atomic_write`, the file's content the concatenation of ``buffers``.

    The buffers (``bytes``, ``memoryview`` ...) go to the kernel as they are, with
    ``os.writev``: nothing is joined or copied in this process, and the whole write is one
    system call for up to 1024 buffers instead of one per buffer through a file object.
    Every system call lets other threads take the GIL, and getting it back can wait for
    them (up to the switch interval, 5 ms, behind a thread copying a large message):
    a writer thread making few calls loses little time that way. ``make_parent=False``
    skips creating the parent folder (the caller knows it is there).

    ``reuse`` names a file nobody reads, on the file system of ``path``, to write into
    instead of a new temporary file (it keeps its permissions): its blocks, and on tmpfs its
    pages, are overwritten rather than allocated, which costs about half the CPU and, on a
    disk, half the wait of the fsync; its length is cut to the content's and it is renamed
    to ``path`` once complete, so a reader still sees the old file or the whole new one.
    When it is gone a new temporary file is written as without it.
    """
    if make_parent:
        path.parent.mkdir(parents=True, exist_ok=True)
    reused = _open_reused(reuse) if reuse is not None else None
    fd, temp_path = reused if reused is not None else _temporary_fd(path, mode)
    try:
        try:
            size = _write_all(fd, [memoryview(b).cast("B") for b in buffers])
            if reused is not None:
                os.ftruncate(fd, size)  # what the file held beyond the content goes
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp_path, path)
    except BaseException:
        temp_path.unlink(missing_ok=True)
        raise
    return path


def _open_reused(path: Path) -> tuple[int, Path] | None:
    """``path`` open for writing from its start (its descriptor, and itself), or None when
    it is not there."""
    try:
        return os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)), path
    except FileNotFoundError:
        return None


def _write_all(fd: int, views: list[memoryview]) -> int:
    """Write ``views`` to ``fd`` in order, resuming after short writes; returns the bytes
    written."""
    views = [v for v in views if v.nbytes]
    total = sum(v.nbytes for v in views)
    while views:
        written = os.writev(fd, views[:_IOV_MAX])
        while written and views:
            if written >= views[0].nbytes:
                written -= views.pop(0).nbytes
            else:
                views[0] = views[0][written:]
                written = 0
    return total


def _temporary_fd(path: Path, mode: int) -> tuple[int, Path]:
    """A new hidden file beside ``path`` (open for writing, its descriptor), created with
    ``mode`` under the umask.

    :func:`tempfile.mkstemp` would create it 0600 whatever the umask; ``os.open`` with
    ``O_EXCL`` lets the kernel apply the umask, as for any other new file.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(_TEMPORARY_NAME_TRIES):
        temp_path = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(temp_path, flags, mode), temp_path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path} after 100 tries")


@contextlib.contextmanager
def _temporary_sibling(path: Path, mode: int) -> Iterator[tuple[IO[bytes], Path]]:
    """A new hidden file beside ``path``, open for writing (:func:`_temporary_fd`)."""
    fd, temp_path = _temporary_fd(path, mode)
    handle = os.fdopen(fd, "wb")
    try:
        yield handle, temp_path
    finally:
        handle.close()
        temp_path.unlink(missing_ok=True)
