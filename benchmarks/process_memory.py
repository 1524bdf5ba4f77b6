"""Resident memory of a process and of every process it started, read from ``/proc`` (Linux).

Shared by the benchmarks that report memory (``bench_agent_rss.py``, ``bench_peers.py``,
``bench_server_scale.py``, ``bench_same_model_evidence.py``). :func:`own_peak_rss_bytes` is
this process's own peak, and :func:`run_json_worker` runs a benchmark's worker in a fresh
process so that the peak is the worker's own;
:func:`tree_rss_bytes` adds up the resident set sizes of a process and all its descendants
(shared pages are counted once per process that maps them, as ``ps`` does);
:class:`PeakSampler` samples it on a thread and keeps the largest value seen.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
PROC = Path("/proc")


def rss_bytes(pid: int) -> int:
    """Resident set size of process ``pid`` in bytes; 0 if it is gone."""
    try:
        fields = (PROC / str(pid) / "statm").read_text().split()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return 0
    return int(fields[1]) * PAGE_BYTES


def run_json_worker(
    script: str, arguments: list[str], threads: int, what: str
) -> dict[str, object]:
    """Run ``script`` with ``arguments`` in a fresh interpreter with ``threads`` BLAS and
    OpenMP threads, and return the JSON object on the last line of its output.

    Raises
    ------
    RuntimeError
        The worker failed; the message names ``what`` it was doing and holds its stderr.
    """
    count = str(threads)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": count, "OMP_NUM_THREADS": count}
    env["MKL_NUM_THREADS"] = count
    command = [sys.executable, script, *arguments]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{done.stderr}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def own_peak_rss_bytes() -> int:
    """This process's peak resident set size in bytes (``VmHWM`` of ``/proc/self/status``).

    Not ``getrusage(RUSAGE_SELF).ru_maxrss``: Linux carries that across ``execve``, so a
    process started by ``subprocess`` from a large parent reports the parent's resident
    size at the fork when its own peak is smaller. ``VmHWM`` belongs to the address space,
    which ``execve`` replaces. Falls back to ``ru_maxrss`` where ``/proc`` has no status.
    """
    try:
        status = (PROC / "self" / "status").read_text()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def children_by_parent() -> dict[int, list[int]]:
    """Every live process's children, from the parent id in ``/proc/<pid>/stat``."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        # "pid (command) state ppid ...": the command may hold spaces and parentheses
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    return children


def descendants(pid: int) -> list[int]:
    """``pid`` and every live process below it."""
    children = children_by_parent()
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        queue.extend(children.get(current, []))
    return found


def tree_rss_bytes(pid: int) -> int:
    """Resident set sizes of ``pid`` and its descendants, added up, in bytes."""
    return sum(rss_bytes(p) for p in descendants(pid))


class PeakSampler:
    """Samples :func:`tree_rss_bytes` of ``pid`` every ``interval_s`` on a daemon thread
    while used as a context manager; :attr:`peak_bytes` is the largest sample."""

    def __init__(self, pid: int, interval_s: float = 0.2) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def sample(self) -> int:
        """Take one sample now, keep it if it is the largest, and return it."""
        value = tree_rss_bytes(self.pid)
        self.peak_bytes = max(self.peak_bytes, value)
        return value

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> PeakSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
