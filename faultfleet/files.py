"""File helpers every faultfleet process shares."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

PUBLIC_MODE = 0o666
"""Mode of a file anyone the umask allows may read: 0644 under the usual umask 022."""
PRIVATE_MODE = 0o600
"""Mode of a file only its owner may read or write (keys, passwords)."""
_TEMPORARY_NAME_TRIES = 100


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


@contextlib.contextmanager
def _temporary_sibling(path: Path, mode: int) -> Iterator[tuple[IO[bytes], Path]]:
    """A new hidden file beside ``path``, created with ``mode`` under the umask.

    :func:`tempfile.mkstemp` would create it 0600 whatever the umask; ``os.open`` with
    ``O_EXCL`` lets the kernel apply the umask, as for any other new file.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(_TEMPORARY_NAME_TRIES):
        temp_path = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(temp_path, flags, mode)
        except FileExistsError:
            continue
        break
    else:
        raise FileExistsError(f"no free temporary name beside {path} after 100 tries")
    handle = os.fdopen(fd, "wb")
    try:
        yield handle, temp_path
    finally:
        handle.close()
        temp_path.unlink(missing_ok=True)
