"""The malloc arena policy: an explicit environment wins, otherwise the agent's limit holds."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from faultfleet_apps.malloc_policy import (
    AGENT_MALLOC_ARENAS,
    arenas_requested,
    limit_malloc_arenas,
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


def arenas_after_threads(mode: str) -> tuple[str, int]:
    """(what limit_malloc_arenas returned, arenas) in a fresh process without an explicit
    arena setting in its environment."""
    environ = {
        k: v for k, v in os.environ.items() if k not in ("MALLOC_ARENA_MAX", "GLIBC_TUNABLES")
    }
    environ["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode],
        check=True,
        capture_output=True,
        text=True,
        env=environ,
    )
    returned, arenas = done.stdout.split()
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
