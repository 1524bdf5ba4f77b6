"""The test clocks themselves: a test that waits on them must not hang on a lost wake-up."""

from __future__ import annotations

import threading

import pytest

from tests.clocks import ManualClock


@pytest.mark.timeout(30)
def test_manual_clock_hands_a_condition_wait_back_so_a_lost_notify_cannot_hang_it() -> None:
    # A notify that comes as a 10 ms slice times out is handed to a waiter already giving up;
    # the caller must get control back to re-check its predicate, time standing still.
    clock = ManualClock()
    condition = threading.Condition()

    with condition:
        woke = clock.wait(condition, 60.0)  # nobody notifies

    assert woke
    assert clock.monotonic() == 0.0
    assert clock.waiting_until() == []


@pytest.mark.timeout(30)
def test_manual_clock_keeps_an_event_wait_until_the_event_is_set_or_time_passes() -> None:
    clock = ManualClock()
    stop, results = threading.Event(), []
    waiter = threading.Thread(target=lambda: results.append(clock.wait(stop, 5.0)))
    waiter.start()
    while clock.waiting_until() != [5.0]:
        threading.Event().wait(0.01)

    clock.advance(4.0)
    waiter.join(0.2)
    still_waiting = waiter.is_alive()
    clock.advance(1.0)
    waiter.join(30)

    assert still_waiting
    assert results == [False]
