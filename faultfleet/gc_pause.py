"""Python's cyclic garbage collector held off while a computation builds short-lived objects.

CPython frees an object as soon as its last reference goes; the cyclic collector exists
only for reference cycles, and it runs whenever the count of container objects (tuples,
lists, dicts, instances) allocated since the last run passes a threshold, scanning the
young generations each time and, every so often, every container in the process. A
computation that allocates hundreds of thousands of small containers and drops them at its
end (FLACC's merging of 10,000 agents builds a heap entry per known pair, an adjacency dict
per entity, a decision per test) sets it off many times over, and each full collection
walks the whole coordinator's heap. At 10,000 agents
(``benchmarks/bench_server_scale.py --agents 10000``, one core) two full collections fell
inside the merging of the first rounds, 0.25 s of the 8 rounds' server steps, about
0.12 s each, on the steps that were already the slowest, and one inside the quality
watch's assessment after the last round (0.15 s of about 0.8 s).

:func:`collector_paused` switches the collector off around such a computation and back on
after it. Nothing is lost: the temporaries die by reference counting when the computation
returns, and a cycle made meanwhile waits for the next collection. The pause is
process-wide (the collector has no per-thread switch), so it is meant for computations of
bounded length; other threads allocate without collections for that long. Pauses nest and
may overlap across threads: the collector comes back on when the last one ends, and only if
it was on when the first one began (a process that switched it off keeps it off).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


class _Pauses:
    """How many pauses are open, and whether the collector was on before the first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open = 0
        self.resume = False

    def begin(self) -> None:
        with self.lock:
            if self.open == 0:
                self.resume = gc.isenabled()
                gc.disable()
            self.open += 1

    def end(self) -> None:
        with self.lock:
            self.open -= 1
            if self.open == 0 and self.resume:
                gc.enable()


_PAUSES = _Pauses()


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off within the block (see the module docstring)."""
    _PAUSES.begin()
    try:
        yield
    finally:
        _PAUSES.end()
