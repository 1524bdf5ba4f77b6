"""File helpers every faultfleet process shares."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO


def atomic_write(path: Path, write: Callable[[IO[bytes]], object]) -> Path:
    """Write a file through ``write`` into a temporary sibling, then rename it into place.

    Parameters
    ----------
    path : Path
        Destination; its parent folders are created.
    write : callable
        Receives a binary file object open for writing.

    Returns
    -------
    Path
        ``path``. A reader never sees a half-written file: either the old file or the
        complete new one is there.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with _temporary_sibling(path) as (handle, temp_path):
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())
        handle.close()
        os.replace(temp_path, path)
    return path


@contextlib.contextmanager
def _temporary_sibling(path: Path) -> Iterator[tuple[IO[bytes], Path]]:
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    temp_path = Path(name)
    handle = os.fdopen(fd, "wb")
    try:
        yield handle, temp_path
    finally:
        handle.close()
        temp_path.unlink(missing_ok=True)
