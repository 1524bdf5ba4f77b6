"""Turns at the compute go in the order asked: an agent that asks again at once waits
behind those already waiting."""

from __future__ import annotations

import threading

import pytest

from edge_agent.compute_turns import ComputeTurns


def _wait_for(turns: ComputeTurns, waiting: int) -> None:
    """Until ``waiting`` callers hold or wait for a turn (they queue in other threads)."""
    event = threading.Event()
    while turns.waiting < waiting:
        event.wait(0.001)


def test_turns_are_granted_first_come_first_served() -> None:
    # Prepare: "busy" holds the turn; a and b queue behind it, in that order
    turns = ComputeTurns()
    order: list[str] = []

    def take(name: str) -> None:
        with turns:
            order.append(name)

    turns.acquire()
    threads = []
    for number, name in enumerate(["a", "b"]):
        thread = threading.Thread(target=take, args=(name,))
        thread.start()
        _wait_for(turns, number + 2)
        threads.append(thread)

    # Execute: "busy" ends its turn and asks again at once, from another thread
    again = threading.Thread(target=take, args=("busy again",))
    turns.release()
    again.start()
    for thread in [*threads, again]:
        thread.join(timeout=30)

    # Assert
    assert order == ["a", "b", "busy again"]
    assert turns.waiting == 0


def test_a_turn_ends_when_its_block_raises() -> None:
    turns = ComputeTurns()

    with pytest.raises(RuntimeError, match="diverged"), turns:
        raise RuntimeError("diverged")
    with turns:
        holding = turns.waiting

    assert holding == 1
