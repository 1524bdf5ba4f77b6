"""Run ``faultfleet agent`` with a probe inside it: where does the process's memory go?

Usage: python benchmarks/agent_memory_probe.py --probe-out FILE [--probe-s 30]
       [--tracemalloc [--baseline-s 300]] -- agent --config FILE [--machines 0-23] ...

Starts a daemon thread, then runs ``faultfleet agent`` (everything after ``--``) in this
process. Every ``--probe-s`` seconds the thread appends one JSON line to ``--probe-out``:

* ``rss_mb``: the resident set size (``VmRSS``);
* glibc's allocator (``mallinfo2``): ``arena_mb`` (memory taken from the system with
  ``brk``/``sbrk`` and by the other arenas' heaps), ``mmap_mb`` (large blocks mapped on
  their own), ``in_use_mb`` (allocated blocks), ``free_mb`` (freed blocks the allocator
  keeps), and ``arenas`` (from ``malloc_info``);
* ``python_mb``: what Python's allocators hold (``tracemalloc`` traced memory when
  ``--tracemalloc`` is given, with the ten largest growths by line since the previous
  line under ``top`` and, from ``--baseline-s`` on, the ten largest since the first
  sample after it under ``since_baseline``; otherwise ``sys.getallocatedblocks()`` as a
  count);
* ``ort_sessions``: ONNX Runtime sessions some agent still holds
  (:func:`edge_agent.onnx_sessions.live_sessions`), ``threads``, and whether torch is
  loaded.

Native growth is RSS growth that ``python_mb`` does not explain; ``in_use_mb`` against
``free_mb`` tells live native allocations from fragmentation the allocator keeps.
``bench_soak.py --probe DIR`` runs its agent processes through this script.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

from edge_agent.onnx_sessions import live_sessions
from faultfleet_apps.cli.main import main as faultfleet

MB = 1024 * 1024


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


_libc = ctypes.CDLL("libc.so.6")
_libc.mallinfo2.restype = _MallInfo2
_libc.fopen.restype = ctypes.c_void_p
_libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
_libc.fclose.argtypes = [ctypes.c_void_p]
_libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]


def arena_count() -> int:
    """glibc malloc arenas (``<heap nr=`` entries of ``malloc_info``)."""
    with tempfile.NamedTemporaryFile(suffix=".xml") as file:
        handle = _libc.fopen(file.name.encode(), b"w")
        _libc.malloc_info(0, handle)
        _libc.fclose(handle)
        return Path(file.name).read_text().count("<heap nr=")


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def probe_line(
    started: float, snapshots: dict[str, Any], traced: bool, baseline_s: float
) -> dict[str, Any]:
    """One sample of the process; ``snapshots`` holds the last and baseline tracemalloc ones."""
    info = _libc.mallinfo2()
    line: dict[str, Any] = {
        "t_s": round(time.monotonic() - started, 1),
        "rss_mb": round(rss_mb(), 1),
        "arena_mb": round(info.arena / MB, 1),
        "mmap_mb": round(info.hblkhd / MB, 1),
        "in_use_mb": round(info.uordblks / MB, 1),
        "free_mb": round(info.fordblks / MB, 1),
        "arenas": arena_count(),
        "ort_sessions": live_sessions(),
        "threads": threading.active_count(),
        "torch": "torch" in sys.modules,
    }
    if traced:
        snapshot = tracemalloc.take_snapshot()
        line["python_mb"] = round(tracemalloc.get_traced_memory()[0] / MB, 1)
        for key, name in (("previous", "top"), ("baseline", "since_baseline")):
            if key in snapshots:
                diff = snapshot.compare_to(snapshots[key], "lineno")[:10]
                line[name] = [f"{d.size_diff / 1024:+.0f} KiB {d.traceback[0]}" for d in diff]
        snapshots["previous"] = snapshot
        if line["t_s"] >= baseline_s:
            snapshots.setdefault("baseline", snapshot)
    else:
        line["python_blocks"] = sys.getallocatedblocks()
    return line


def main() -> int:
    """Start the probe thread and run the agent command in this process."""
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe-out", type=Path, required=True)
    parser.add_argument("--probe-s", type=float, default=30.0)
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument(
        "--baseline-s",
        type=float,
        default=300.0,
        help="with --tracemalloc: growth is also shown against the first sample after this",
    )
    parser.add_argument(
        "--trim", action="store_true", help="malloc_trim(0) after each sample (an experiment)"
    )
    args = parser.parse_args(argv[:split])
    if args.tracemalloc:
        tracemalloc.start(1)
    started = time.monotonic()
    snapshots: dict[str, Any] = {}

    def sample() -> None:
        while True:
            line = probe_line(started, snapshots, args.tracemalloc, args.baseline_s)
            if args.trim:
                _libc.malloc_trim(0)
                line["rss_after_trim_mb"] = round(rss_mb(), 1)
            with args.probe_out.open("a", encoding="utf-8") as file:
                file.write(json.dumps(line) + "\n")
            time.sleep(args.probe_s)

    threading.Thread(target=sample, name="memory-probe", daemon=True).start()
    print(f"memory probe of pid {os.getpid()} in {args.probe_out}", flush=True)
    return faultfleet(argv[split + 1 :])


if __name__ == "__main__":
    sys.exit(main())
