"""Checking the agents' answers off the MQTT network thread, in a small pool of threads.

Paho hands every message to its handler on its one network thread; while the handler runs,
nothing else is read from the broker. :class:`AnswerWorkers` lets that handler only queue
the message: ``n_threads`` worker threads split the frame, validate the envelope, decode
the tensors and hand the update to the journal (the collector's
:meth:`~coordinator.adapters.mqtt_answers.AnswerCollector.on_answer`). Threads, not
processes: once decoding is a view of the received bytes (no copy) and the finite check a
BLAS dot product, the work left holding the GIL is a few tens of microseconds per update
(JSON and pydantic), and handing a payload to another process would copy it
(``benchmarks/bench_ingest.py`` measures both).

Each agent's messages go to one thread (chosen by a hash of its id), so they are handled in
the order they arrived, and so is anything else queued for that agent
(:meth:`AnswerWorkers.call`): the collector queues the reaction to an agent's last will
behind the answers that agent sent before it.

The queues are bounded (``max_queued`` messages in all): when the workers fall behind,
the network thread waits for room, TCP pushes back on the broker, and the broker holds the
messages (QoS 1) instead of this process growing without limit.
"""

from __future__ import annotations

import logging
import queue
import threading
import zlib
from collections.abc import Callable

logger = logging.getLogger(__name__)

Job = Callable[[], None]


class AnswerWorkers:
    """A pool of threads that run jobs, in order per key.

    Parameters
    ----------
    n_threads : int
        Worker threads (>= 1).
    max_queued : int
        Jobs waiting in all queues together before :meth:`call` blocks.
    name : str
        Prefix of the threads' names.

    Nothing runs until :meth:`start`.
    """

    def __init__(self, n_threads: int = 2, *, max_queued: int = 256, name: str = "answers") -> None:
        if n_threads < 1:
            raise ValueError(f"n_threads must be >= 1, got {n_threads}")
        if max_queued < n_threads:
            raise ValueError(f"max_queued must be >= n_threads ({n_threads}), got {max_queued}")
        self.n_threads = n_threads
        self.name = name
        per_thread = max_queued // n_threads
        self._queues: list[queue.Queue[Job | None]] = [
            queue.Queue(maxsize=per_thread) for _ in range(n_threads)
        ]
        self._threads: list[threading.Thread] = []

    @property
    def running(self) -> bool:
        """Whether the threads are started and not closed."""
        return bool(self._threads)

    def start(self) -> None:
        """Start the threads.

        Raises
        ------
        RuntimeError
            Started already.
        """
        if self._threads:
            raise RuntimeError(f"the {self.name} workers are started already")
        self._threads = [
            threading.Thread(target=self._work, args=(q,), name=f"{self.name}-{i}", daemon=True)
            for i, q in enumerate(self._queues)
        ]
        for thread in self._threads:
            thread.start()

    def call(self, key: str, job: Job) -> None:
        """Run ``job`` on the thread of ``key``, after the jobs queued before it for that key.

        Blocks while that thread's queue is full. Without running threads (not started, or
        closed) the job runs at once, on the caller's thread.
        """
        if not self._threads:
            job()
            return
        self._queues[zlib.crc32(key.encode("utf-8")) % self.n_threads].put(job)

    def close(self, timeout_s: float = 10.0) -> None:
        """Let every thread finish the jobs queued so far, then stop it (waits at most
        ``timeout_s`` seconds for each)."""
        threads, self._threads = self._threads, []
        for q in self._queues:
            if threads:
                q.put(None)
        for thread in threads:
            thread.join(timeout_s)

    def _work(self, jobs: queue.Queue[Job | None]) -> None:
        while (job := jobs.get()) is not None:
            try:
                job()
            except Exception:  # one bad message must not end the thread
                logger.exception("%s worker: a job failed; carrying on", self.name)
