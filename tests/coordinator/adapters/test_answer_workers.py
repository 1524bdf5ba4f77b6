"""Tests of the worker threads that check answers off the network thread."""

from __future__ import annotations

import functools
import logging
import threading

import pytest

from coordinator.adapters.answer_workers import AnswerWorkers


def test_jobs_of_one_key_run_in_the_order_they_were_queued() -> None:
    workers = AnswerWorkers(3, max_queued=300)
    done: dict[str, list[int]] = {"a": [], "b": [], "c": []}
    workers.start()

    for i in range(50):
        for key, seen in done.items():
            workers.call(key, functools.partial(seen.append, i))
    workers.close()

    assert done == {key: list(range(50)) for key in done}


def test_jobs_run_off_the_calling_thread_once_started() -> None:
    workers = AnswerWorkers(2)
    threads: list[str] = []
    workers.start()

    workers.call("a", lambda: threads.append(threading.current_thread().name))
    workers.close()

    assert len(threads) == 1
    assert threads[0].startswith("answers-")


def test_without_threads_a_job_runs_at_once_on_the_caller() -> None:
    workers = AnswerWorkers(2)
    ran: list[str] = []

    workers.call("a", lambda: ran.append(threading.current_thread().name))

    assert ran == [threading.current_thread().name]


def test_a_failing_job_is_logged_and_the_thread_carries_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    workers = AnswerWorkers(1)
    ran: list[int] = []
    workers.start()

    def broken() -> None:
        raise RuntimeError("bad message")

    workers.call("a", broken)
    workers.call("a", lambda: ran.append(1))
    workers.close()

    assert ran == [1]
    assert any(r.levelno == logging.ERROR and "a job failed" in r.message for r in caplog.records)


def test_a_pool_starts_once_and_needs_a_thread() -> None:
    workers = AnswerWorkers(1)
    workers.start()
    with pytest.raises(RuntimeError, match="started already"):
        workers.start()
    workers.close()
    with pytest.raises(ValueError, match="n_threads must be >= 1"):
        AnswerWorkers(0)
