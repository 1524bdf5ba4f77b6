"""Errors caught in an agent's threads are counted and logged once per kind; a thread that
ends before the stop is started again."""

from __future__ import annotations

import logging
import threading

import pytest

from edge_agent.supervision import AgentThread, ErrorReport, Supervisor
from tests.clocks import FakeClock


def test_errors_are_counted_every_time_and_logged_fully_once_per_kind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Prepare
    counted: list[AgentThread] = []
    report = ErrorReport("m07", counted.append)

    # Execute: three RecursionErrors and one KeyError in the task thread, one in diagnosis
    with caplog.at_level(logging.DEBUG, logger="edge_agent.supervision"):
        for _ in range(3):
            report(AgentThread.TASKS, RecursionError("maximum recursion depth exceeded"))
        report(AgentThread.TASKS, KeyError("x"), "task t-1")
        report(AgentThread.DIAGNOSIS, KeyError("x"))

    # Assert
    assert counted == [AgentThread.TASKS] * 4 + [AgentThread.DIAGNOSIS]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage().split(";")[0] for r in errors] == [
        "m07: tasks thread caught RecursionError",
        "m07: tasks thread caught KeyError (task t-1)",
        "m07: diagnosis thread caught KeyError",
    ]
    assert all(r.exc_info is not None for r in errors)
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) == 2


def test_a_thread_that_ends_is_started_again_until_stop() -> None:
    # Prepare: a target whose first run ends at once and whose second runs until stop
    stop = threading.Event()
    runs: list[int] = []
    restarted: list[AgentThread] = []

    def target(event: threading.Event) -> None:
        runs.append(len(runs))
        if len(runs) > 1:
            event.wait()

    supervisor = Supervisor("m07", stop, restarted.append, FakeClock())
    supervisor.start(AgentThread.TASKS, target)
    supervisor._threads[AgentThread.TASKS].join(timeout=30)

    # Execute
    first = supervisor.check()
    second = supervisor.check()
    stop.set()
    supervisor.join(timeout_s=30)
    after_stop = supervisor.check()

    # Assert
    assert first == [AgentThread.TASKS]
    assert second == []  # the restarted thread runs
    assert after_stop == []  # nothing is restarted once stopping
    assert runs == [0, 1]
    assert restarted == [AgentThread.TASKS]


def test_watch_checks_every_interval_until_stop() -> None:
    # Prepare: the stop is set during the third wait
    stop = threading.Event()
    clock = FakeClock(on_wait=lambda wait: stop.set() if len(clock.waits) >= 3 else None)
    supervisor = Supervisor("m07", stop, lambda thread: None, clock, check_s=2.5)

    # Execute
    supervisor.watch()

    # Assert
    assert [wait.timeout_s for wait in clock.waits] == [2.5, 2.5, 2.5]
