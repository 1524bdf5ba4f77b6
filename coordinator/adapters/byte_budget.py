"""A bound, in bytes, on the answers a coordinator (or ingest worker) holds between
receiving them and being done with them.

An answer is held from the moment the network thread queues it for checking until it is
refused, or journaled and folded (or kept as its task's result): the checking threads'
queues (:mod:`coordinator.adapters.answer_workers`) and the journal writer's
(:mod:`coordinator.adapters.journal_writer`) in between. Those queues are bounded in
messages, which is no bound on memory when a message can be a 17.6 MB ``paper`` update:
256 queued updates would be 4.5 GB, and the journal writer's queue, which grows whenever
the disk is slower than the broker, had no bound at all. With a :class:`ByteBudget` the
network thread waits before taking a message that would go over the budget; paho then
stops reading, TCP pushes back on the broker, and the broker holds the messages (QoS 1).
"""

from __future__ import annotations

import threading
import time

ANSWER_BUDGET_BYTES = 256 * 1024 * 1024
"""Bytes of received answers held at once (queued for checking or for the journal).

About 14 ``paper`` updates or 4,000 ``compact`` ones: enough for the journal's batches
(group commit), a small fraction of a coordinator's memory."""


class ByteBudget:
    """Bytes taken and given back by several threads, at most ``max_bytes`` at once.

    A message larger than the whole budget is let through when nothing else is held, so
    that no message waits forever.

    Parameters
    ----------
    max_bytes : int
        The budget (>= 1).
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        self.max_bytes = max_bytes
        self._held = 0
        self._peak = 0
        self._room = threading.Condition()

    @property
    def held(self) -> int:
        """Bytes taken and not given back."""
        with self._room:
            return self._held

    @property
    def peak(self) -> int:
        """The most bytes held at once so far."""
        with self._room:
            return self._peak

    def take(self, n_bytes: int, timeout_s: float | None = None) -> bool:
        """Take ``n_bytes``, waiting while they would go over the budget; False (nothing
        taken) if ``timeout_s`` seconds pass first, or at once with ``timeout_s=0``."""
        if n_bytes < 0:
            raise ValueError(f"n_bytes must be >= 0, got {n_bytes}")
        with self._room:
            fits = self._room.wait_for(
                lambda: self._held == 0 or self._held + n_bytes <= self.max_bytes, timeout_s
            )
            if not fits:
                return False
            self._held += n_bytes
            self._peak = max(self._peak, self._held)
            return True

    def take_waiting(self, n_bytes: int) -> float:
        """:meth:`take` ``n_bytes``, waiting as long as it takes; returns the seconds waited
        (0.0 when they fitted at once), what a back-pressure metric counts."""
        if self.take(n_bytes, timeout_s=0):
            return 0.0
        started = time.monotonic()
        self.take(n_bytes)
        return time.monotonic() - started

    def give_back(self, n_bytes: int) -> None:
        """Give back ``n_bytes`` taken earlier.

        Raises
        ------
        ValueError
            More than is held: a byte would be given back twice.
        """
        with self._room:
            if n_bytes > self._held:
                raise ValueError(f"giving back {n_bytes} bytes, but only {self._held} are held")
            self._held -= n_bytes
            self._room.notify_all()
