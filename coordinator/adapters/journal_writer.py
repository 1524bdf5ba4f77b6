"""The thread that writes accepted updates to the round journal, in batches.

:class:`~coordinator.adapters.mqtt_answers.AnswerCollector` hands every accepted update to
a :class:`JournalWriter`; the writer takes whatever is queued, writes it as one segment
(:meth:`~coordinator.adapters.journal.RoundJournal.record_many`: one fsync per batch, group
commit) and only then reports the batch written, so an update counts for its round only
once a restarted coordinator would find it. A batch that cannot be written is reported
failed instead, update by update.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from coordinator.adapters.journal import RoundJournal
from coordinator.adapters.round_tasks import Write

W = TypeVar("W")
Entry = tuple[str, str, bytes]

logger = logging.getLogger(__name__)


def write_entry(write: Write) -> Entry:
    """The journal entry of an accepted answer: (agent id, task id, payload)."""
    return write.pending.agent_id, write.pending.task_id, write.payload


class JournalWriter(Generic[W]):
    """A thread writing queued writes (by default :class:`~coordinator.adapters.round_tasks.
    Write` s) to the journal.

    Parameters
    ----------
    journal : RoundJournal
    written : callable
        ``written(batch)`` after a batch is on disk (writer thread).
    failed : callable
        ``failed(batch)`` after a batch could not be written (writer thread).
    entry : callable
        The journal entry ``(agent id, task id, payload)`` of a write.
    """

    def __init__(
        self,
        journal: RoundJournal,
        *,
        written: Callable[[Sequence[W]], None],
        failed: Callable[[Sequence[W]], None],
        entry: Callable[[W], Entry],
    ) -> None:
        self.journal = journal
        self.written = written
        self.failed = failed
        self.entry = entry
        self._writes: queue.Queue[W | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._closed = False
        """Set by :meth:`close`, cleared by :meth:`start`: nothing is queued behind the end."""
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        """Whether the thread is started and not closed."""
        return self._thread is not None

    def start(self) -> None:
        """Start the thread.

        Raises
        ------
        RuntimeError
            Started already.
        """
        with self._lock:
            if self._thread is not None:
                raise RuntimeError("the journal writer is started already")
            self._thread = threading.Thread(target=self._run, name="round-journal", daemon=True)
            self._thread.start()
            self._closed = False

    def put(self, write: W) -> None:
        """Queue ``write``; it is reported written or failed later, on the writer thread.

        Before :meth:`start` it waits for the thread; after :meth:`close` it is reported
        failed at once, on the caller's thread: nothing put is left unreported.
        """
        with self._lock:
            if not self._closed:
                self._writes.put(write)
                return
        logger.warning("the round journal's writer is closed; an update is not journaled")
        self.failed([write])

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the thread once it has written what it holds (waits at most ``timeout_s``
        seconds); updates put later are reported failed."""
        with self._lock:
            thread, self._thread = self._thread, None
            if thread is not None:
                self._writes.put(None)
                self._closed = True
        if thread is not None:
            thread.join(timeout_s)

    def _run(self) -> None:
        """Journal queued updates in batches, then report them; ends at the ``None`` that
        :meth:`close` queues, after the updates queued before it."""
        stopping = False
        while not stopping:
            queued = [self._writes.get()]
            while True:
                try:
                    queued.append(self._writes.get_nowait())
                except queue.Empty:
                    break
            stopping = any(w is None for w in queued)
            batch = [w for w in queued if w is not None]
            if not batch:
                continue
            entries = [self.entry(w) for w in batch]
            try:
                self.journal.record_many(entries)
            except Exception:
                logger.exception("could not write %d update(s) to the round journal", len(batch))
                self._report(self.failed, batch)
                continue
            self._report(self.written, batch)

    def _report(self, report: Callable[[Sequence[W]], None], batch: list[W]) -> None:
        """``report(batch)``; an error in it is logged and the thread carries on with the
        next batch (the updates are journaled, or not, either way)."""
        try:
            report(batch)
        except Exception:
            logger.exception("handling %d journaled update(s) failed; carrying on", len(batch))
