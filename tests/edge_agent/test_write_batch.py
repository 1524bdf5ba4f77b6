"""Records wait for one write until the first has waited its delay or enough bytes wait."""

from __future__ import annotations

import pytest

from edge_agent.write_batch import WriteBatch
from tests.clocks import FakeClock


def test_without_a_delay_every_record_is_due_at_once() -> None:
    batch = WriteBatch(delay_s=0.0)

    assert batch.add(b"a")
    assert batch.add(b"b")
    assert batch.take() == [b"a", b"b"]
    assert (len(batch), batch.bytes, batch.due()) == (0, 0, False)


def test_records_wait_until_the_first_has_waited_the_delay() -> None:
    # Prepare
    clock = FakeClock()
    batch = WriteBatch(delay_s=1.0, clock=clock)

    # Execute / Assert: the delay counts from the first record, not the latest
    assert not batch.add(b"first")
    clock.advance(0.6)
    assert not batch.add(b"second")
    assert not batch.due()
    clock.advance(0.4)
    assert batch.due()
    assert batch.add(b"third")
    assert batch.take() == [b"first", b"second", b"third"]
    assert not batch.due()
    clock.advance(5.0)
    assert not batch.add(b"next")  # a new batch starts its own delay


def test_a_batch_of_max_bytes_is_due_before_its_delay() -> None:
    batch = WriteBatch(delay_s=60.0, max_bytes=10, clock=FakeClock())

    assert not batch.add(b"123456")
    assert batch.add(b"7890")
    assert batch.bytes == 10


@pytest.mark.parametrize(
    ("options", "message"),
    [({"delay_s": -1.0}, "delay_s must be"), ({"delay_s": 1.0, "max_bytes": 0}, "max_bytes")],
)
def test_bad_arguments_are_named(options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WriteBatch(**options)  # type: ignore[arg-type]
