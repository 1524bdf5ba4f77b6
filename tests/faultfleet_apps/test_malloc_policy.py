"""The malloc policy: an explicit environment wins, otherwise the agent's arena limit and mmap
threshold hold; the trimmer hands free pages back on its interval."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from faultfleet_apps.malloc_policy import (
    AGENT_MALLOC_ARENAS,
    AGENT_MMAP_THRESHOLD,
    Trimmer,
    arenas_requested,
    fix_mmap_threshold,
    limit_malloc_arenas,
    mmap_threshold_requested,
)

ROOT = Path(__file__).resolve().parents[2]
THREADS = 12

# A child that starts THREADS threads which each malloc a block outside Python's small-object
# allocator while all of them are alive, then prints how many arenas glibc made.
CHILD = textwrap.dedent(
    f"""
    import ctypes, sys, tempfile, threading
    from faultfleet_apps.malloc_policy import limit_malloc_arenas
    if sys.argv[1] == "limit":
        print(limit_malloc_arenas(environ={{}}))
    else:
        print(None)
    barrier = threading.Barrier({THREADS})
    def allocate():
        block = bytearray(64 * 1024)
        barrier.wait()
    threads = [threading.Thread(target=allocate) for _ in range({THREADS})]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    with tempfile.NamedTemporaryFile() as f:
        handle = libc.fopen(f.name.encode(), b"w")
        libc.malloc_info(0, handle)
        libc.fclose(handle)
        print(open(f.name).read().count("<heap nr="))
    """
)


def run_child(script: str, mode: str, unset: tuple[str, ...]) -> list[str]:
    """The words ``script`` prints, run with ``mode`` in a fresh process whose
    environment lacks ``unset``."""
    environ = {k: v for k, v in os.environ.items() if k not in unset}
    environ["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", script, mode],
        check=True,
        capture_output=True,
        text=True,
        env=environ,
    )
    return done.stdout.split()


def arenas_after_threads(mode: str) -> tuple[str, int]:
    """(what limit_malloc_arenas returned, arenas) in a fresh process without an explicit
    arena setting in its environment."""
    returned, arenas = run_child(CHILD, mode, ("MALLOC_ARENA_MAX", "GLIBC_TUNABLES"))
    return returned, int(arenas)


@pytest.mark.parametrize(
    ("environ", "requested"),
    [
        ({}, False),
        ({"MALLOC_ARENA_MAX": "4"}, True),
        ({"MALLOC_ARENA_MAX": " "}, False),
        ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=8"}, True),
        ({"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=1"}, True),
        ({"GLIBC_TUNABLES": "glibc.malloc.arena_test=2"}, False),
    ],
)
def test_arenas_requested(environ: dict[str, str], requested: bool) -> None:
    assert arenas_requested(environ) is requested


def test_an_explicit_environment_wins() -> None:
    assert limit_malloc_arenas(environ={"MALLOC_ARENA_MAX": "8"}) is None


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="arenas must be at least 1, got 0"):
        limit_malloc_arenas(0, environ={})


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's arenas: Linux only")
def test_threads_share_the_limited_arenas() -> None:
    # Prepare / Execute: the same threads with glibc's default and with the agent's limit.
    _, default_arenas = arenas_after_threads("default")
    returned, limited_arenas = arenas_after_threads("limit")

    # Assert: by default the threads get arenas of their own; limited, they share two.
    assert default_arenas > AGENT_MALLOC_ARENAS
    assert returned == str(AGENT_MALLOC_ARENAS)
    assert limited_arenas <= AGENT_MALLOC_ARENAS


# A child that frees a mapped 8 MiB block (glibc's dynamic threshold then rises to 8 MiB)
# and allocates 2 MiB: it prints whether that block was mapped on its own (mallinfo2's
# hblkhd, the bytes of mapped blocks).
MMAP_CHILD = textwrap.dedent(
    """
    import ctypes, sys
    from faultfleet_apps.malloc_policy import fix_mmap_threshold
    fixed = fix_mmap_threshold(environ={}) if sys.argv[1] == "fix" else None
    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mallinfo2.restype = MallInfo2
    libc.free(libc.malloc(8 << 20))
    before = libc.mallinfo2().hblkhd
    block = libc.malloc(2 << 20)
    print(fixed, libc.mallinfo2().hblkhd - before >= 2 << 20)
    libc.free(block)
    """
)


def _block_mapped(mode: str) -> tuple[str, str]:
    returned, mapped = run_child(MMAP_CHILD, mode, ("MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"))
    return returned, mapped


@pytest.mark.parametrize(
    ("environ", "requested"),
    [
        ({}, False),
        ({"MALLOC_MMAP_THRESHOLD_": "131072"}, True),
        ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=4096"}, True),
        ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, False),
    ],
)
def test_mmap_threshold_requested(environ: dict[str, str], requested: bool) -> None:
    assert mmap_threshold_requested(environ) is requested


def test_an_explicit_mmap_threshold_wins_and_a_bad_one_is_refused() -> None:
    assert fix_mmap_threshold(environ={"MALLOC_MMAP_THRESHOLD_": "65536"}) is None
    with pytest.raises(ValueError, match="positive number of bytes, got 0"):
        fix_mmap_threshold(0, environ={})


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's mmap threshold: Linux only")
def test_a_fixed_threshold_keeps_mapping_large_blocks_after_a_large_free() -> None:
    # Prepare / Execute: the same allocations with glibc's dynamic threshold and the agent's
    default = _block_mapped("default")
    fixed = _block_mapped("fix")

    # Assert: by default the 2 MiB block comes from the heap, fixed it is mapped on its own
    assert default == ("None", "False")
    assert fixed == (str(AGENT_MMAP_THRESHOLD), "True")


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Releases:
    """A stand-in for ``malloc_trim``: records the clock at every call."""

    def __init__(self, clock: _Clock) -> None:
        self.clock = clock
        self.at: list[float] = []

    def __call__(self) -> bool:
        self.at.append(self.clock.now)
        return True


def test_the_trimmer_releases_once_per_interval() -> None:
    # Prepare: a trimmer on a fake clock that records its releases
    clock = _Clock()
    released = _Releases(clock)
    trimmer = Trimmer(60.0, release=released, clock=clock)

    # Execute: ticks before, at and after the interval
    for now in (100.0, 159.9, 160.0, 161.0, 219.9, 220.0):
        clock.now = now
        trimmer.tick()

    # Assert: one release a minute, counted
    assert released.at == [160.0, 220.0]
    assert trimmer.trims == 2


def test_a_zero_interval_never_trims_and_a_negative_one_is_refused() -> None:
    clock = _Clock()
    released = _Releases(clock)
    trimmer = Trimmer(0, release=released, clock=clock)
    clock.now = 10**9
    trimmer.tick()
    assert released.at == []
    with pytest.raises(ValueError, match="0 \\(off\\) or positive, got -1"):
        Trimmer(-1)


# A child that fills 64 MiB of the heap with 4 KiB blocks, touched, frees seven in eight
# (runs of 28 KiB: whole free pages in the middle of the heap, below a block still in use),
# and prints its RSS in KiB before and after release_free_memory().
TRIM_CHILD = textwrap.dedent(
    """
    import ctypes
    from faultfleet_apps.malloc_policy import fix_mmap_threshold, release_free_memory
    fix_mmap_threshold(environ={})
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    def rss_kib():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    blocks = [libc.malloc(4096) for _ in range(16384)]
    for block in blocks:
        ctypes.memset(block, 1, 4096)
    for i, block in enumerate(blocks):
        if i % 8:
            libc.free(block)
    before = rss_kib()
    returned = release_free_memory()
    print(before, rss_kib(), returned)
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's malloc_trim: Linux only")
def test_release_free_memory_returns_free_pages_inside_the_heap() -> None:
    # Prepare / Execute: a heap with 56 MiB free behind blocks still in use, then trimmed
    before, after, returned = run_child(TRIM_CHILD, "trim", ("GLIBC_TUNABLES",))

    # Assert: most of the free 56 MiB left the resident set; the blocks in use stayed
    assert returned == "True"
    assert int(before) - int(after) > 40 * 1024
