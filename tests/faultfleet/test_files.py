"""Atomic file writes: a reader sees the old file or the whole new one, never a part."""

from __future__ import annotations

from pathlib import Path
from typing import IO

import pytest

from faultfleet.files import atomic_write


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "rec.npz"
    path.write_bytes(b"old")

    def failing_write(handle: IO[bytes]) -> None:
        handle.write(b"half")
        raise OSError("disk full")

    # Execute
    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, failing_write)

    # Assert
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["rec.npz"]


def test_write_creates_parent_folders(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "x" / "y" / "rec.bin"

    def write(handle: IO[bytes]) -> None:
        handle.write(b"new")

    # Execute
    written = atomic_write(path, write)

    # Assert
    assert written == path
    assert path.read_bytes() == b"new"
