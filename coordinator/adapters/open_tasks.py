"""The open tasks of a round in flight, answered, settled and failed under one lock.

:class:`OpenTasks` is the bookkeeping half of
:class:`~coordinator.adapters.mqtt_answers.AnswerCollector`, which derives from it and
adds the MQTT half (publishing tasks, checking answers, journaling updates). Every
:class:`~coordinator.adapters.round_tasks.Pending` entry of the round changes state here,
under one condition that :meth:`OpenTasks._close_round` waits on: answered (or journaling),
failed (the agent reported a failure, went offline, or its update could not be journaled),
or still open when the round deadline passes, which fails it. Task ids of closed rounds are
remembered (:class:`~coordinator.adapters.round_tasks.ClosedTasks`), so that an answer
arriving after its round closed is told apart, as late, from one for no task at all.

Ingest workers (:mod:`coordinator.adapters.ingest_fleet`) fold fit updates themselves: their
summaries settle fit tasks (:meth:`OpenTasks.settle_streamed`), and the tasks an ingest
worker had settled before it went away wait for an answer again (:meth:`OpenTasks.reopen`),
counted as received once.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.round_tasks import (
    ClosedTasks,
    Collection,
    Pending,
    RoundAbortedError,
    Write,
)
from faultfleet.clock import Clock
from faultfleet.tasks import Failure
from faultfleet.wire.codec import RejectReason, WireError
from faultfleet.wire.messages import AnyTaskMessage


class OpenTasks:
    """The tasks of the round in flight and of the rounds closed before it.

    Parameters
    ----------
    run_id : str
        Answers of another run are told apart from answers to no open task.
    deadline_s : float
        How long a round waits for answers, seconds.
    metrics : CoordinatorMetrics
        Counts the updates received.
    round_clock : Clock
        Measures the round deadline and waits for answers.
    """

    def __init__(
        self, *, run_id: str, deadline_s: float, metrics: CoordinatorMetrics, round_clock: Clock
    ) -> None:
        self.run_id = run_id
        self.deadline_s = deadline_s
        self.metrics = metrics
        self.round_clock = round_clock
        self._lock = threading.Lock()
        self._answered = threading.Condition(self._lock)
        self._collection = Collection()
        self._sent: dict[str, tuple[AnyTaskMessage, bytes]] = {}
        """Header and body of every task of the round in flight that was published."""
        self._sent_on: dict[str, int] = {}
        """The broker connection each task of :attr:`_sent` last left on (its number)."""
        self._closed = ClosedTasks()
        self._aborted = False
        self._reopened: set[str] = set()
        """Streamed tasks of the round in flight taken back by :meth:`reopen`."""

    def _open_round(self, pending: Sequence[Pending]) -> None:
        """Make ``pending`` the tasks of the round in flight."""
        with self._lock:
            self._collection = Collection({p.task_id: p for p in pending})
            self._reopened = set()

    def _close_round(self, deadline: float) -> list[Pending]:
        """Wait until every task of the round is settled, or until ``deadline`` (on
        ``round_clock``), then close the round: the tasks still open fail. Returns every
        task's entry.

        Raises
        ------
        RoundAbortedError
            :meth:`abort` was called.
        """
        with self._answered:
            while not (self._aborted or self._collection.finished()):
                remaining_s = deadline - self.round_clock.monotonic()
                if remaining_s <= 0:
                    break
                self.round_clock.wait(self._answered, remaining_s)
            if self._aborted:
                self._collection = Collection()
                self._sent, self._sent_on = {}, {}
                raise RoundAbortedError("the coordinator is stopping; the round was abandoned")
            # Updates that arrived in time but are still being journaled count for the round.
            self._answered.wait_for(lambda: not self._collection.writing(), timeout=60.0)
            collection = list(self._collection.pending.values())
            for pending in collection:
                if not pending.done:
                    pending.failure = Failure(
                        pending.agent_id, f"no answer within the {self.deadline_s:g} s deadline"
                    )
                self._closed.add(pending.task_id)
            self._collection = Collection()
            self._sent, self._sent_on = {}, {}
        return collection

    def waiting_for(self) -> list[str]:
        """Agents with a task of the round in flight still unanswered; empty between rounds."""
        with self._lock:
            return sorted({p.agent_id for p in self._collection.pending.values() if not p.done})

    def abort(self) -> None:
        """Stop waiting: the round in progress (and any later one) raises RoundAbortedError;
        accepted updates stay in the journal, so a restarted coordinator replays the round."""
        with self._answered:
            self._aborted = True
            self._answered.notify_all()

    def _fail_agent(self, agent_id: str) -> None:
        with self._answered:
            for pending in self._collection.unanswered(agent_id):
                pending.failure = Failure(agent_id, "the agent went offline during the round")
            self._answered.notify_all()

    def fail(self, tid: str, reason: str) -> None:
        """Fail task ``tid`` of the round in flight, unless it is settled or journaling."""
        with self._answered:
            pending = self._collection.pending.get(tid)
            if pending is not None and not pending.done and not pending.journaling:
                pending.failure = Failure(pending.agent_id, reason)
            self._answered.notify_all()

    def _unwritten(self, writes: Sequence[Write]) -> None:
        """Writer thread: fail the tasks of updates the journal could not write."""
        with self._answered:
            for write in writes:
                write.pending.journaling = False
                write.pending.failure = Failure(
                    write.pending.agent_id, "its update could not be journaled"
                )
            self._answered.notify_all()

    def settle_streamed(self, pending: Pending) -> bool:
        """Count ``pending`` as answered by an update folded elsewhere (an ingest worker's,
        :mod:`coordinator.adapters.ingest_fleet`); False when it closed or was settled.
        A task settled again after :meth:`reopen` is counted received once."""
        with self._answered:
            if self._collection.pending.get(pending.task_id) is not pending or pending.done:
                return False
            pending.streamed = True
            first = pending.task_id not in self._reopened
            self._answered.notify_all()
        if first:
            self.metrics.updates_received.inc()
        return True

    def reopen(self, tids: Sequence[str]) -> list[str]:
        """Take back the settlement of the streamed tasks ``tids`` of the round in flight
        (the ingest worker that folded their updates is gone): they wait for an answer
        again. Returns the agents of the tasks reopened."""
        with self._answered:
            agents = []
            for tid in tids:
                pending = self._collection.pending.get(tid)
                if pending is not None and pending.streamed:
                    pending.streamed = False
                    self._reopened.add(tid)
                    agents.append(pending.agent_id)
            if agents:
                self._collection.unsettled()
            return agents

    def open_task(self, tid: str, agent_id: str, run_id: str) -> Pending:
        """The open task ``tid`` of ``agent_id``; a WireError (duplicate, late, unknown)
        for any other."""
        with self._lock:
            pending = self._collection.pending.get(tid)
            if pending is not None and pending.agent_id == agent_id:
                if pending.done or pending.journaling:
                    raise WireError(RejectReason.DUPLICATE, f"task {tid} already answered")
                return pending
            if tid in self._closed:
                raise WireError(
                    RejectReason.LATE, f"task {tid} of {agent_id} closed before it arrived"
                )
        reason = "another run" if run_id != self.run_id else "no open task"
        raise WireError(RejectReason.UNKNOWN_TASK, f"task {tid} of {agent_id} belongs to {reason}")
