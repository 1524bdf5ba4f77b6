"""The cyclic collector is off within a pause and back as it was after the last one."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from faultfleet.gc_pause import collector_paused


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_a_pause_switches_the_collector_off_and_back_on() -> None:
    gc.enable()

    with collector_paused():
        inside = gc.isenabled()

    assert (inside, gc.isenabled()) == (False, True)


def test_the_collector_comes_back_after_an_exception() -> None:
    gc.enable()

    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("failed inside")

    assert gc.isenabled()


def test_nested_pauses_end_with_the_outermost() -> None:
    gc.enable()

    with collector_paused():
        with collector_paused():
            pass
        between = gc.isenabled()

    assert (between, gc.isenabled()) == (False, True)


def test_a_collector_switched_off_beforehand_stays_off() -> None:
    gc.disable()

    with collector_paused():
        pass

    assert not gc.isenabled()


def test_overlapping_pauses_of_two_threads_end_with_the_last() -> None:
    # Prepare: the other thread pauses first and ends its pause while this one still holds
    gc.enable()
    entered, release, observed = threading.Event(), threading.Event(), []

    def other() -> None:
        with collector_paused():
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    assert entered.wait(10)

    # Execute
    with collector_paused():
        release.set()
        thread.join(10)
        observed.append(gc.isenabled())  # the other thread's pause is over

    # Assert
    assert not thread.is_alive()
    assert observed == [False]
    assert gc.isenabled()
