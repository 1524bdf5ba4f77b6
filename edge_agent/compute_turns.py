"""Turns at the compute for the agents of one process, granted in the order asked.

``faultfleet agent --machines 0-23`` runs many agents in one process, and they train one
at a time so as not to oversubscribe the cores. A plain :class:`threading.Lock` promises
no order: an agent whose worker releases it and asks again at once (its next task already
queued) may take it again before agents that have been waiting, round after round.
:class:`ComputeTurns` is a ticket lock — first come, first served — so every waiting agent
gets its turn before anyone gets a second one. Together with the agent's limit on epochs
(``[tasks] max_epochs``), which bounds one turn, no agent's tasks can starve another's.

What is used only during a turn can be shared by everyone who takes turns here
(:meth:`ComputeTurns.shared`): the agents of a process keep one built copy of each model
architecture instead of one each (:class:`edge_agent.task_runner.TaskRunner`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from types import TracebackType


class ComputeTurns:
    """A first-come, first-served lock (a ticket lock); a context manager."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._next_ticket = 0
        self._serving = 0
        self._shared: dict[Hashable, object] = {}
        self._shared_lock = threading.Lock()

    def acquire(self) -> None:
        """Wait for this caller's turn."""
        with self._condition:
            ticket = self._next_ticket
            self._next_ticket += 1
            while ticket != self._serving:
                self._condition.wait()

    def release(self) -> None:
        """End the current turn; the longest waiting caller goes next."""
        with self._condition:
            self._serving += 1
            self._condition.notify_all()

    def shared(self, key: Hashable, factory: Callable[[], object]) -> object:
        """The one value under ``key`` for every holder of these turns, made by ``factory``
        the first time it is asked for. Its users may use it only during a turn, or use
        it in ways that are safe from several threads at once."""
        with self._shared_lock:
            if key not in self._shared:
                self._shared[key] = factory()
            return self._shared[key]

    @property
    def waiting(self) -> int:
        """Callers holding or waiting for a turn."""
        with self._condition:
            return self._next_ticket - self._serving

    def __enter__(self) -> ComputeTurns:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()
