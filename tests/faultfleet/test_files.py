"""Atomic file writes: a reader sees the old file or the whole new one, never a part."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO

import pytest

from faultfleet.files import PRIVATE_MODE, atomic_write, atomic_write_buffers


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


@pytest.mark.parametrize(
    ("umask", "mode", "expected"),
    [
        (0o022, None, 0o644),
        (0o002, None, 0o664),
        (0o077, None, 0o600),
        (0o000, PRIVATE_MODE, 0o600),
        (0o022, PRIVATE_MODE, 0o600),
    ],
)
def test_new_files_get_the_umask_permissions_and_private_ones_0600(
    tmp_path: Path, umask: int, mode: int | None, expected: int
) -> None:
    # Prepare
    path = tmp_path / "recording.npz"
    previous = os.umask(umask)

    # Execute
    try:
        if mode is None:
            atomic_write(path, lambda handle: handle.write(b"x"))
        else:
            atomic_write(path, lambda handle: handle.write(b"x"), mode=mode)
    finally:
        os.umask(previous)

    # Assert
    assert stat.S_IMODE(path.stat().st_mode) == expected


def test_a_replaced_file_takes_the_new_permissions(tmp_path: Path) -> None:
    # Prepare: an old private file
    path = tmp_path / "summary.json"
    atomic_write(path, lambda handle: handle.write(b"old"), mode=PRIVATE_MODE)
    previous = os.umask(0o022)

    # Execute
    try:
        atomic_write(path, lambda handle: handle.write(b"new"))
    finally:
        os.umask(previous)

    # Assert
    assert path.read_bytes() == b"new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_buffers_are_written_back_to_back_even_after_short_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: the kernel takes at most 5 bytes per writev, as a busy pipe or disk may
    real_writev = os.writev
    calls: list[int] = []

    def short_writev(fd: int, buffers: list[memoryview]) -> int:
        calls.append(len(buffers))
        head = bytes(memoryview(b"".join(bytes(b) for b in buffers))[:5])
        return real_writev(fd, [head])

    monkeypatch.setattr(os, "writev", short_writev)
    path = tmp_path / "deep" / "segment"
    parts: list[bytes | bytearray | memoryview] = [
        b"head",
        b"",
        bytearray(b"-middle-"),
        memoryview(b"xxtailxx")[2:6],
    ]

    # Execute
    written = atomic_write_buffers(path, parts)

    # Assert
    assert written == path
    assert path.read_bytes() == b"head-middle-tail"
    assert len(calls) == 4  # 16 bytes, 5 at a time
    assert [p.name for p in path.parent.iterdir()] == ["segment"]


@pytest.mark.parametrize("reused", [False, True])
def test_failed_buffer_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reused: bool
) -> None:
    # Prepare: written into a new temporary file, or over a spare one
    path = tmp_path / "segment"
    path.write_bytes(b"old")
    spare = tmp_path / "1.spare"
    if reused:
        spare.write_bytes(b"stale")

    def full_disk(fd: int, buffers: list[memoryview]) -> int:
        raise OSError("No space left on device")

    monkeypatch.setattr(os, "writev", full_disk)

    # Execute
    with pytest.raises(OSError, match="No space left"):
        atomic_write_buffers(path, [b"new"], reuse=spare if reused else None)

    # Assert: the old file as it was; neither the temporary nor the half-written spare kept
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["segment"]


def test_buffer_write_without_make_parent_needs_the_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        atomic_write_buffers(tmp_path / "missing" / "segment", [b"x"], make_parent=False)

    assert list(tmp_path.iterdir()) == []


def test_a_reused_file_is_written_over_cut_to_length_and_renamed_into_place(
    tmp_path: Path,
) -> None:
    # Prepare: a longer file to write over, and the file it will replace
    spare = tmp_path / "spares" / "1.spare"
    spare.parent.mkdir()
    spare.write_bytes(b"x" * 100)
    inode = spare.stat().st_ino
    path = tmp_path / "segment"
    path.write_bytes(b"old")

    # Execute
    written = atomic_write_buffers(path, [b"new ", b"content"], reuse=spare)

    # Assert: the same file (its inode), only the new content, the spare gone from its place
    assert written == path
    assert path.read_bytes() == b"new content"
    assert path.stat().st_ino == inode
    assert not spare.exists()
    assert [p.name for p in tmp_path.iterdir() if p.is_file()] == ["segment"]


def test_a_reused_file_that_is_gone_gives_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "segment"

    atomic_write_buffers(path, [b"content"], reuse=tmp_path / "gone.spare")

    assert path.read_bytes() == b"content"
    assert [p.name for p in tmp_path.iterdir()] == ["segment"]
