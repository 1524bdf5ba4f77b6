"""Keeping an agent's threads alive: errors counted and logged once, dead threads restarted.

An agent runs a task worker, a diagnosis loop and a model loader beside the network thread
(:mod:`edge_agent.service`). No message or file may stop any of them:

* :class:`ErrorReport` is where every caught exception goes. It counts the exception on
  ``faultfleet_thread_errors_total{thread}`` and logs it with its traceback the first time
  a kind of exception (its type) occurs in a thread, at debug level after that, so a
  stream of hostile frames cannot flood the log.
* :class:`Supervisor` starts the threads and, every ``check_s`` seconds until the stop
  event is set, starts again any that ended — whatever ended it — counting the restart on
  ``faultfleet_thread_restarts_total{thread}``. Each loop already catches the exceptions of
  its own iterations; the supervisor is the net for the rest.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from enum import StrEnum

from faultfleet.clock import SYSTEM_CLOCK, Clock

logger = logging.getLogger(__name__)


class AgentThread(StrEnum):
    """The activities of an agent (a metric label value)."""

    TASKS = "tasks"
    """The worker answering the coordinator's tasks."""
    DIAGNOSIS = "diagnosis"
    """The loop diagnosing windows from the source."""
    MODELS = "models"
    """The loader swapping in the assigned model."""
    HEARTBEAT = "heartbeat"
    """The retained heartbeat (:class:`~edge_agent.activity.Activity`)."""
    LABELS = "labels"
    """The rescans of new labels (:class:`~edge_agent.labelled_data.LabelledData`)."""
    OUTBOX = "outbox"
    """The sender of the diagnoses kept while the broker was unreachable."""
    HANDLER = "handler"
    """A message handler on the MQTT network thread."""


class ErrorReport:
    """Counts and logs the exceptions an agent's threads caught.

    Parameters
    ----------
    agent_id : str
        Named in every log line.
    count : callable
        Called with the thread of every error (the agent increments its metric).
    """

    def __init__(self, agent_id: str, count: Callable[[AgentThread], None]) -> None:
        self.agent_id = agent_id
        self.count = count
        self._seen: set[tuple[AgentThread, str]] = set()
        self._lock = threading.Lock()

    def __call__(self, thread: AgentThread, error: BaseException, context: str = "") -> None:
        """Count ``error`` caught in ``thread``; log it fully the first time of its kind."""
        self.count(thread)
        kind = (thread, type(error).__qualname__)
        with self._lock:
            first = kind not in self._seen
            self._seen.add(kind)
        where = f" ({context})" if context else ""
        if first:
            logger.error(
                "%s: %s thread caught %s%s; it carries on (further %s errors in this thread "
                "are counted on faultfleet_thread_errors_total and logged at debug level)",
                self.agent_id,
                thread,
                type(error).__name__,
                where,
                type(error).__name__,
                exc_info=error,
            )
        else:
            logger.debug("%s: %s thread caught %r%s", self.agent_id, thread, error, where)


class Supervisor:
    """Starts an agent's threads and restarts any that end before the stop event is set.

    Parameters
    ----------
    agent_id : str
        Prefix of the threads' names.
    stop : threading.Event
        Set when the agent stops; every target receives it.
    on_restart : callable
        Called with the thread restarted (the agent counts it).
    clock : Clock
        Spaces the checks.
    check_s : float, seconds
        Time between two checks of the threads.
    """

    def __init__(
        self,
        agent_id: str,
        stop: threading.Event,
        on_restart: Callable[[AgentThread], None],
        clock: Clock = SYSTEM_CLOCK,
        check_s: float = 1.0,
    ) -> None:
        self.agent_id = agent_id
        self.stop = stop
        self.on_restart = on_restart
        self.clock = clock
        self.check_s = check_s
        self._targets: dict[AgentThread, Callable[[threading.Event], None]] = {}
        self._threads: dict[AgentThread, threading.Thread] = {}

    def start(self, role: AgentThread, target: Callable[[threading.Event], None]) -> None:
        """Run ``target(stop)`` on a thread of its own, kept running until stop."""
        self._targets[role] = target
        self._spawn(role)

    def _spawn(self, role: AgentThread) -> None:
        thread = threading.Thread(
            target=self._targets[role],
            args=(self.stop,),
            name=f"{self.agent_id}-{role}",
            daemon=True,
        )
        self._threads[role] = thread
        thread.start()

    def check(self) -> list[AgentThread]:
        """Restart every thread that ended although stop is not set; the ones restarted."""
        restarted = []
        for role, thread in list(self._threads.items()):
            if thread.is_alive() or self.stop.is_set():
                continue
            logger.error("%s: the %s thread ended; starting it again", self.agent_id, role)
            self.on_restart(role)
            self._spawn(role)
            restarted.append(role)
        return restarted

    def watch(self) -> None:
        """Check the threads every ``check_s`` seconds until stop is set."""
        while not self.clock.wait(self.stop, self.check_s):
            self.check()

    def join(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` seconds for each thread to end (after stop is set)."""
        for thread in self._threads.values():
            thread.join(timeout=timeout_s)

    def alive(self, role: AgentThread) -> bool:
        """Whether the thread of ``role`` runs."""
        thread = self._threads.get(role)
        return thread is not None and thread.is_alive()
