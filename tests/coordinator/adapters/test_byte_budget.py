"""Tests of the byte budget that bounds the answers held between receiving and journaling,
and of the journal writer's refusal of updates put after it closed."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.adapters.byte_budget import ByteBudget
from coordinator.adapters.journal import RoundJournal
from coordinator.adapters.journal_writer import Entry, JournalWriter


def test_bytes_are_taken_until_the_budget_is_spent_and_given_back() -> None:
    budget = ByteBudget(100)

    assert budget.take(60, timeout_s=0)
    assert budget.take(40, timeout_s=0)
    over = budget.take(1, timeout_s=0)
    budget.give_back(60)
    after = budget.take(50, timeout_s=0)

    assert not over
    assert after
    assert budget.held == 90
    assert budget.peak == 100


def test_a_message_larger_than_the_budget_passes_alone() -> None:
    budget = ByteBudget(100)

    alone = budget.take(500, timeout_s=0)
    beside_it = budget.take(1, timeout_s=0)

    assert alone
    assert not beside_it
    assert budget.held == 500


def test_a_waiting_taker_goes_on_once_bytes_are_given_back() -> None:
    budget = ByteBudget(100)
    budget.take(80)
    took = threading.Event()

    def take() -> None:
        budget.take(50)
        took.set()

    taker = threading.Thread(target=take)

    taker.start()
    waited = not took.wait(0.2)
    budget.give_back(80)
    taker.join(5)

    assert waited
    assert took.is_set()
    assert budget.held == 50


def test_take_waiting_says_how_long_it_waited() -> None:
    # Prepare: room for the first take; the second waits until a timer gives back
    budget = ByteBudget(100)
    at_once = budget.take_waiting(80)
    timer = threading.Timer(0.2, budget.give_back, args=(80,))

    # Execute
    timer.start()
    waited = budget.take_waiting(50)
    timer.join(5)

    # Assert
    assert at_once == 0.0
    assert waited >= 0.15
    assert budget.held == 50


def test_giving_back_more_than_is_held_is_refused() -> None:
    budget = ByteBudget(100)
    budget.take(10)

    with pytest.raises(ValueError, match="only 10 are held"):
        budget.give_back(11)


@pytest.mark.parametrize(("max_bytes", "n_bytes"), [(0, 1), (10, -1)])
def test_a_budget_or_size_below_its_range_is_refused(max_bytes: int, n_bytes: int) -> None:
    with pytest.raises(ValueError, match="must be >= "):
        ByteBudget(max_bytes).take(n_bytes)


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(min_value=0, max_value=300), min_size=1, max_size=40))
def test_threads_taking_and_giving_back_never_hold_more_than_the_budget(
    sizes: list[int],
) -> None:
    # Three threads take and give back messages of the drawn sizes at once; a message over
    # the budget may be held alone, so the bound is the larger of the budget and it
    budget = ByteBudget(200)

    def churn(offset: int) -> None:
        for size in sizes[offset::3]:
            budget.take(size)
            budget.give_back(size)

    threads = [threading.Thread(target=churn, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert budget.held == 0
    assert budget.peak <= max(200, *sizes)


# -- the journal writer after close --------------------------------------------------------


def _entry(write: str) -> Entry:
    return "agent", write, write.encode()


def test_an_update_put_after_the_writer_closed_is_reported_failed_not_lost(
    tmp_path: Path,
) -> None:
    written: list[str] = []
    failed: list[str] = []

    def on_written(batch: Sequence[str]) -> None:
        written.extend(batch)

    def on_failed(batch: Sequence[str]) -> None:
        failed.extend(batch)

    writer = JournalWriter(
        RoundJournal(tmp_path), written=on_written, failed=on_failed, entry=_entry
    )
    writer.journal.begin(1, ["agent"])
    writer.put("t1")  # before start: waits for the thread
    writer.start()
    writer.put("t2")
    writer.close()
    writer.put("t3")  # no thread will ever write it
    writer.start()
    writer.put("t4")
    writer.close()

    assert written == ["t1", "t2", "t4"]
    assert failed == ["t3"]
    assert sorted(RoundJournal(tmp_path).accepted()) == ["t1", "t2", "t4"]


def test_an_error_handling_a_written_batch_does_not_end_the_writer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    handled: list[str] = []

    def on_written(batch: Sequence[str]) -> None:
        if "bad" in batch:
            raise RuntimeError("the summary could not be sent")
        handled.extend(batch)

    writer = JournalWriter(
        RoundJournal(tmp_path), written=on_written, failed=lambda _: None, entry=_entry
    )
    writer.journal.begin(1, ["agent"])
    writer.start()
    writer.put("bad")
    writer.close()  # the first batch is written before the next is put
    writer.start()
    writer.put("t2")
    writer.close()

    assert handled == ["t2"]
    assert "the summary could not be sent" in caplog.text
    assert sorted(RoundJournal(tmp_path).accepted()) == ["bad", "t2"]
