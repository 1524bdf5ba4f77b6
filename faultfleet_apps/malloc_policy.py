"""How glibc's allocator serves a long-running agent process: its arenas and mmap threshold.

glibc gives each thread that allocates its own arena, up to eight per core (16 on a 2-core
gateway), to spare threads the wait for one allocator lock. ``faultfleet agent --machines
0-23`` runs 24 agents of about eight threads each (diagnosis, tasks, models, outbox, MQTT
network, ...), so every arena gets used; blocks freed in one arena serve only the threads
attached to it, and each arena keeps its own freed memory. Campaign after campaign (torch
training buffers, ONNX Runtime sessions of the new models, decoded task frames) the freed
memory kept by glibc grew: with a campaign every 30 s, one process of 24 agents held 380 MB
in glibc's heaps after 13 minutes, 118 MB of it free and growing, against 294 MB with 32 MB
free and level with two arenas; the memory in use was the same (docs/runtime.md,
"Malloc arenas"). The agents' threads mostly wait (for a window, a task, the broker) and
run Python under one interpreter lock, so fewer arenas cost them no measurable time.

A second source of growth is glibc's *dynamic* mmap threshold. Blocks from 128 kB up are
mapped on their own and unmapped when freed, but every such free raises the threshold to
the freed size, so after the first training task the next tasks' buffers of a few
megabytes come from the heap instead, where they fragment it: one process of 24 agents
with two arenas still grew from 586 to 600 MB between minutes 3 and 20 (in use level,
free memory kept by glibc growing), and was level at 585 MB from minute 8 to 20 with the
threshold fixed at 1 MiB (``MALLOC_MMAP_THRESHOLD_=1048576``; docs/runtime.md, "Malloc
arenas"). Setting the threshold with ``mallopt`` fixes it and turns the dynamic rule off.

What glibc keeps free inside its heaps stays resident: it returns memory to the system
only from the top of a heap, while the campaigns' freed blocks lie throughout. In the hour
of 96 agents with both settings above, the processes' memory in use grew 0.5–1.9 MB in
the second half hour, but what glibc kept free rose from 23–28 MB to 31–36 MB, more than
half of the RSS growth (docs/runtime.md, "Malloc arenas"). ``malloc_trim(0)`` hands every free
page of every arena back (``madvise``), leaving the blocks where they are; ``faultfleet
agent`` calls it every :data:`AGENT_TRIM_INTERVAL_S` seconds (:class:`Trimmer`;
``--malloc-trim-s``, 0 turns it off).

One rule for each of the arena limit and the mmap threshold, like
:mod:`faultfleet_apps.thread_policy`'s:

1. An explicit request wins: glibc's own ``MALLOC_ARENA_MAX`` or the tunable
   ``glibc.malloc.arena_max`` in ``GLIBC_TUNABLES``, which glibc applied when the process
   started; nothing is changed then.
2. Otherwise ``faultfleet agent`` limits the process to :data:`AGENT_MALLOC_ARENAS`
   arenas with ``mallopt(M_ARENA_MAX)`` before its agents start their threads (glibc
   honours the limit for arenas created afterwards).
3. Likewise for the mmap threshold: ``MALLOC_MMAP_THRESHOLD_`` or the tunable
   ``glibc.malloc.mmap_threshold`` win; otherwise ``faultfleet agent`` fixes it at
   :data:`AGENT_MMAP_THRESHOLD` bytes (``mallopt(M_MMAP_THRESHOLD)``).

Elsewhere than glibc (macOS, musl) nothing is done.
"""

from __future__ import annotations

import ctypes
import logging
import os
import time
from collections.abc import Callable, Mapping

logger = logging.getLogger(__name__)

ARENAS_VARIABLE = "MALLOC_ARENA_MAX"
"""glibc's environment variable for the arena limit; when set it wins."""
TUNABLES_VARIABLE = "GLIBC_TUNABLES"
ARENA_TUNABLE = "glibc.malloc.arena_max"
AGENT_MALLOC_ARENAS = 2
"""Arenas of a ``faultfleet agent`` process unless the environment says otherwise."""
M_ARENA_MAX = -8
"""``mallopt`` parameter number of the arena limit (``<malloc.h>``)."""
MMAP_THRESHOLD_VARIABLE = "MALLOC_MMAP_THRESHOLD_"
MMAP_THRESHOLD_TUNABLE = "glibc.malloc.mmap_threshold"
AGENT_MMAP_THRESHOLD = 1 << 20
"""Bytes from which a ``faultfleet agent`` process maps blocks on their own (1 MiB)."""
M_MMAP_THRESHOLD = -3
"""``mallopt`` parameter number of the mmap threshold (``<malloc.h>``)."""
AGENT_TRIM_INTERVAL_S = 60.0
"""Seconds between two ``malloc_trim(0)`` of a ``faultfleet agent`` process."""


def _requested(environ: Mapping[str, str], variable: str, tunable: str) -> bool:
    """Whether ``environ`` sets a glibc malloc parameter itself, by its environment
    variable or its tunable in ``GLIBC_TUNABLES`` (glibc applied it at the start)."""
    if environ.get(variable, "").strip():
        return True
    tunables = environ.get(TUNABLES_VARIABLE, "")
    return any(part.split("=", 1)[0] == tunable for part in tunables.split(":"))


def arenas_requested(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` sets glibc's arena limit itself (``MALLOC_ARENA_MAX`` or the
    ``glibc.malloc.arena_max`` tunable), which glibc has applied at the process's start."""
    return _requested(environ, ARENAS_VARIABLE, ARENA_TUNABLE)


def mmap_threshold_requested(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` sets glibc's mmap threshold itself (``MALLOC_MMAP_THRESHOLD_``
    or the ``glibc.malloc.mmap_threshold`` tunable)."""
    return _requested(environ, MMAP_THRESHOLD_VARIABLE, MMAP_THRESHOLD_TUNABLE)


def _glibc() -> ctypes.CDLL | None:
    """The C library of this process if it is glibc, else None."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    return libc


def limit_malloc_arenas(
    arenas: int = AGENT_MALLOC_ARENAS, *, environ: Mapping[str, str] | None = None
) -> int | None:
    """Limit this process to ``arenas`` glibc malloc arenas unless the environment chose.

    Call it before the process starts its threads: arenas created earlier stay.

    Parameters
    ----------
    arenas : int
        The limit, at least 1.
    environ : mapping, optional
        Environment to look for an explicit limit in; default ``os.environ``.

    Returns
    -------
    int or None
        The limit set, or None when nothing was set (an explicit request in the
        environment, or a C library other than glibc).

    Raises
    ------
    ValueError
        ``arenas`` is below 1.
    """
    if arenas < 1:
        raise ValueError(f"arenas must be at least 1, got {arenas}")
    requested = arenas_requested(os.environ if environ is None else environ)
    return _mallopt("M_ARENA_MAX", M_ARENA_MAX, arenas, requested=requested)


def fix_mmap_threshold(
    threshold: int = AGENT_MMAP_THRESHOLD, *, environ: Mapping[str, str] | None = None
) -> int | None:
    """Map blocks of ``threshold`` bytes and more on their own, always, unless the
    environment chose (glibc's dynamic threshold is off from then on).

    Returns the threshold set, or None when nothing was set (an explicit request in the
    environment, or a C library other than glibc).

    Raises
    ------
    ValueError
        ``threshold`` is not positive.
    """
    if threshold < 1:
        raise ValueError(f"threshold must be a positive number of bytes, got {threshold}")
    requested = mmap_threshold_requested(os.environ if environ is None else environ)
    return _mallopt("M_MMAP_THRESHOLD", M_MMAP_THRESHOLD, threshold, requested=requested)


def _mallopt(name: str, parameter: int, value: int, *, requested: bool) -> int | None:
    """``mallopt(parameter, value)`` unless ``requested`` in the environment or not glibc;
    the value set, or None."""
    if requested:
        logger.debug("%s: as the environment says", name)
        return None
    libc = _glibc()
    if libc is None:
        logger.debug("%s: not glibc, left to the C library", name)
        return None
    if libc.mallopt(parameter, value) != 1:  # mallopt returns 1 on success
        logger.warning("glibc refused mallopt(%s, %d); left as it was", name, value)
        return None
    logger.debug("mallopt(%s, %d)", name, value)
    return value


def release_free_memory() -> bool:
    """``malloc_trim(0)``: return the free pages of every glibc arena to the system.

    Returns whether memory was returned; False also elsewhere than glibc.
    """
    libc = _glibc()
    if libc is None or not hasattr(libc, "malloc_trim"):
        return False
    return bool(libc.malloc_trim(0))


class Trimmer:
    """Calls ``release`` (:func:`release_free_memory`) at most every ``interval_s`` seconds.

    The caller's loop calls :meth:`tick` as often as it likes; ``faultfleet agent`` does
    from its main thread, which otherwise only waits for its agents. ``interval_s = 0``
    never trims.

    Raises
    ------
    ValueError
        ``interval_s`` is negative.
    """

    def __init__(
        self,
        interval_s: float = AGENT_TRIM_INTERVAL_S,
        *,
        release: Callable[[], bool] = release_free_memory,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_s < 0:
            raise ValueError(f"interval_s must be 0 (off) or positive, got {interval_s}")
        self.interval_s = interval_s
        self._release = release
        self._clock = clock
        self._last = clock()
        self.trims = 0
        """Calls of ``release`` so far."""

    def tick(self) -> None:
        """Trim if ``interval_s`` has passed since the last trim (or the start)."""
        if not self.interval_s:
            return
        now = self._clock()
        if now - self._last < self.interval_s:
            return
        self._last = now
        self.trims += 1
        started = time.perf_counter()
        returned = self._release()
        logger.debug(
            "malloc_trim(0) in %.1f ms%s",
            (time.perf_counter() - started) * 1e3,
            "" if returned else ", nothing returned",
        )
