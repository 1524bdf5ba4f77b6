"""The on-disk outbox of diagnoses: in order, bounded (oldest dropped and counted), kept
across restarts, and a torn or corrupt file reported and set aside, never a crash."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from edge_agent.outbox import CURSOR_NAME, DiagnosisOutbox, OutboxDrop, segment_records


class Drops:
    """Records the on_dropped calls as totals per reason."""

    def __init__(self) -> None:
        self.counts: dict[OutboxDrop, int] = {}

    def __call__(self, reason: OutboxDrop, n: int) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + n


def record(index: int) -> bytes:
    return json.dumps({"window_index": index}).encode()


def indexes(records: list[bytes]) -> list[int]:
    return [json.loads(r)["window_index"] for r in records]


def drain(outbox: DiagnosisOutbox, batch: int = 7) -> list[int]:
    """Everything in the outbox, oldest first, taken and acknowledged batch by batch."""
    sent: list[int] = []
    while len(outbox):
        taken = outbox.take(batch)
        sent += indexes(taken.records)
        outbox.acknowledged(taken.end)
    return sent


@pytest.mark.parametrize(("max_records", "expected"), [(0, 1), (5, 1), (100, 10), (10**6, 1000)])
def test_segments_hold_a_tenth_of_the_bound_from_1_to_1000(max_records: int, expected: int) -> None:
    assert segment_records(max_records) == expected


def test_records_come_out_oldest_first_across_segments(tmp_path: Path) -> None:
    # Prepare
    outbox = DiagnosisOutbox(tmp_path, max_records=100)

    # Execute
    for index in range(35):
        outbox.append(record(index))

    # Assert: 4 segment files of 10; all out in order, then nothing left on disk
    assert len(outbox) == 35
    assert len(list(tmp_path.glob("*.jsonl"))) == 4
    assert drain(outbox) == list(range(35))
    assert list(tmp_path.iterdir()) == []


def test_beyond_the_bound_the_oldest_are_dropped_and_counted(tmp_path: Path) -> None:
    # Prepare: a bound of 10 (segments of one diagnosis)
    drops = Drops()
    outbox = DiagnosisOutbox(tmp_path, max_records=10, on_dropped=drops)

    # Execute
    for index in range(25):
        outbox.append(record(index))

    # Assert: the newest 10 wait, the 15 oldest were dropped
    assert drops.counts == {OutboxDrop.FULL: 15}
    assert drain(outbox) == list(range(15, 25))


def test_a_large_bound_drops_a_whole_segment_at_a_time(tmp_path: Path) -> None:
    # Prepare: a bound of 100 (segments of 10)
    drops = Drops()
    outbox = DiagnosisOutbox(tmp_path, max_records=100, on_dropped=drops)

    # Execute
    for index in range(155):
        outbox.append(record(index))

    # Assert: never more than the bound, the newest kept, every loss counted
    waiting = drain(outbox)
    assert 90 <= len(waiting) <= 100
    assert waiting == list(range(155 - len(waiting), 155))
    assert drops.counts == {OutboxDrop.FULL: 155 - len(waiting)}


def test_a_bound_of_zero_keeps_nothing(tmp_path: Path) -> None:
    drops = Drops()
    outbox = DiagnosisOutbox(tmp_path / "outbox", max_records=0, on_dropped=drops)

    outbox.append(record(0))

    assert len(outbox) == 0
    assert drops.counts == {OutboxDrop.FULL: 1}


def test_what_waits_and_what_was_sent_survive_a_restart(tmp_path: Path) -> None:
    # Prepare: 25 kept, the first 13 sent (one segment and 3 of the next)
    first = DiagnosisOutbox(tmp_path, max_records=100)
    for index in range(25):
        first.append(record(index))
    first.acknowledged(first.take(10).end)
    first.acknowledged(first.take(3).end)
    first.close()

    # Execute
    second = DiagnosisOutbox(tmp_path, max_records=100)
    second.append(record(25))

    # Assert
    assert drain(second) == list(range(13, 26))


def test_a_torn_last_line_is_cut_off_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: a power cut while the third line was written
    first = DiagnosisOutbox(tmp_path, max_records=100)
    for index in range(2):
        first.append(record(index))
    first.close()
    (segment,) = tmp_path.glob("*.jsonl")
    with segment.open("ab") as handle:
        handle.write(b'{"window_ind')
    drops = Drops()

    # Execute
    with caplog.at_level(logging.WARNING, logger="edge_agent.outbox"):
        second = DiagnosisOutbox(tmp_path, max_records=100, on_dropped=drops)
    second.append(record(2))

    # Assert
    assert drain(second) == [0, 1, 2]
    assert drops.counts == {OutboxDrop.UNREADABLE: 1}
    assert "torn last line" in caplog.text


def test_a_corrupt_segment_is_reported_and_set_aside_not_a_crash(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: three segments of 10; the middle one gets a line that is not a diagnosis
    first = DiagnosisOutbox(tmp_path, max_records=100)
    for index in range(30):
        first.append(record(index))
    first.close()
    middle = sorted(tmp_path.glob("*.jsonl"))[1]
    lines = middle.read_bytes().split(b"\n")
    lines[4] = b"\x00\x17garbage"
    middle.write_bytes(b"\n".join(lines))
    drops = Drops()

    # Execute
    with caplog.at_level(logging.WARNING, logger="edge_agent.outbox"):
        second = DiagnosisOutbox(tmp_path, max_records=100, on_dropped=drops)

    # Assert: the other two segments are sent; the bad one is kept aside for a look
    assert drain(second) == [*range(10), *range(20, 30)]
    assert drops.counts == {OutboxDrop.UNREADABLE: 10}
    assert (tmp_path / f"{middle.name}.corrupt").is_file()
    assert f"line 5 is not a diagnosis; set the file aside as {middle.name}.corrupt" in caplog.text


def test_an_unreadable_cursor_is_set_aside_and_the_oldest_file_sent_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: 5 of 10 sent, then the cursor file garbled
    first = DiagnosisOutbox(tmp_path, max_records=100)
    for index in range(10):
        first.append(record(index))
    first.acknowledged(first.take(5).end)
    first.close()
    (tmp_path / CURSOR_NAME).write_bytes(b"\xff\xfe nonsense")

    # Execute
    with caplog.at_level(logging.WARNING, logger="edge_agent.outbox"):
        second = DiagnosisOutbox(tmp_path, max_records=100)

    # Assert: at least once, never lost
    assert drain(second) == list(range(10))
    assert (tmp_path / f"{CURSOR_NAME}.corrupt").is_file()
    assert "some may arrive twice" in caplog.text


def test_a_smaller_bound_after_a_restart_drops_the_oldest(tmp_path: Path) -> None:
    first = DiagnosisOutbox(tmp_path, max_records=100)
    for index in range(40):
        first.append(record(index))
    first.close()
    drops = Drops()

    second = DiagnosisOutbox(tmp_path, max_records=10, on_dropped=drops)

    waiting = drain(second)
    assert len(waiting) <= 10
    assert waiting == list(range(40 - len(waiting), 40))
    assert drops.counts == {OutboxDrop.FULL: 40 - len(waiting)}


def test_records_in_flight_dropped_by_the_bound_are_not_counted_nor_removed_twice(
    tmp_path: Path,
) -> None:
    # Prepare: a bound of 10; the oldest 4 taken for sending
    drops = Drops()
    outbox = DiagnosisOutbox(tmp_path, max_records=10, on_dropped=drops)
    for index in range(10):
        outbox.append(record(index))
    taken = outbox.take(4)

    # Execute: 6 more arrive while those 4 are in flight; then their acknowledgement
    for index in range(10, 16):
        outbox.append(record(index))
    outbox.acknowledged(taken.end)

    # Assert: 0-3 went out, 4 and 5 were dropped (and counted), nothing newer was lost
    assert indexes(taken.records) == [0, 1, 2, 3]
    assert drops.counts == {OutboxDrop.FULL: 2}
    assert drain(outbox) == list(range(6, 16))


def test_released_records_are_taken_again(tmp_path: Path) -> None:
    outbox = DiagnosisOutbox(tmp_path, max_records=100)
    for index in range(5):
        outbox.append(record(index))
    taken = outbox.take(3)

    outbox.release(taken.start)

    assert outbox.waiting() == 5
    assert drain(outbox) == [0, 1, 2, 3, 4]
