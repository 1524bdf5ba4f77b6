"""Tests of the round journal: accepted answers of the round in flight, on real files."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from coordinator.adapters.journal import RoundJournal


@pytest.fixture
def journal(tmp_path: Path) -> RoundJournal:
    return RoundJournal(tmp_path / "journal")


def test_an_unused_journal_is_empty(journal: RoundJournal) -> None:
    assert journal.current_round() is None
    assert journal.replay_available(1) is None
    assert journal.accepted() == {}
    assert not journal.directory.exists()


def test_begin_records_the_round_and_its_available_agents(journal: RoundJournal) -> None:
    journal.begin(4, ["m01", "m02", "m07"])

    assert journal.current_round() == 4
    assert journal.replay_available(4) == ["m01", "m02", "m07"]
    assert journal.replay_available(3) is None
    assert journal.replay_available(5) is None


def test_recorded_payloads_come_back_by_task_id(journal: RoundJournal) -> None:
    journal.begin(4, ["m01", "m02"])

    journal.record("m01", "aaa111", b"FFW1 first")
    journal.record("m02", "bbb222", b"\x00\xff second")

    assert journal.accepted() == {"aaa111": b"FFW1 first", "bbb222": b"\x00\xff second"}


def test_dotted_agent_ids_keep_their_task_ids(journal: RoundJournal) -> None:
    journal.begin(1, ["gw.1", "line-2.gw_3"])

    journal.record("gw.1", "0a1b2c3d4e5f60718293a4b5", b"one")
    journal.record("line-2.gw_3", "ffeeddccbbaa998877665544", b"two")

    assert journal.accepted() == {
        "0a1b2c3d4e5f60718293a4b5": b"one",
        "ffeeddccbbaa998877665544": b"two",
    }


def test_recording_a_task_again_replaces_its_payload(journal: RoundJournal) -> None:
    journal.begin(2, ["m01"])
    journal.record("m01", "t1", b"old")

    journal.record("m01", "t1", b"new")

    assert journal.accepted() == {"t1": b"new"}


def test_begin_of_the_same_round_keeps_accepted_payloads(journal: RoundJournal) -> None:
    journal.begin(5, ["m01", "m02"])
    journal.record("m01", "t1", b"kept")

    journal.begin(5, ["m01", "m02"])

    assert journal.accepted() == {"t1": b"kept"}


@pytest.mark.parametrize("next_round", [6, 4])
def test_begin_of_another_round_clears(journal: RoundJournal, next_round: int) -> None:
    journal.begin(5, ["m01", "m02"])
    journal.record("m01", "t1", b"stale")

    journal.begin(next_round, ["m03"])

    assert journal.accepted() == {}
    assert journal.current_round() == next_round
    assert journal.replay_available(next_round) == ["m03"]
    assert journal.replay_available(5) is None


def test_clear_forgets_everything(journal: RoundJournal) -> None:
    journal.begin(5, ["m01"])
    journal.record("m01", "t1", b"x")

    journal.clear()
    journal.clear()

    assert journal.current_round() is None
    assert journal.accepted() == {}
    assert not journal.directory.exists()


def test_a_restart_sees_the_round_and_its_accepted_payloads(tmp_path: Path) -> None:
    before = RoundJournal(tmp_path / "journal")
    before.begin(9, ["m01", "m02", "m03"])
    before.record("m02", "t2", b"update of m02")

    after = RoundJournal(tmp_path / "journal")

    assert after.current_round() == 9
    assert after.replay_available(9) == ["m01", "m02", "m03"]
    assert after.accepted() == {"t2": b"update of m02"}


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[9, 10]",
        '{"server_round": "9", "available": []}',
        '{"server_round": 9}',
        '{"server_round": 9, "available": "m01"}',
        "",
    ],
)
def test_a_corrupt_plan_is_ignored_with_a_warning(
    journal: RoundJournal, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    journal.begin(9, ["m01"])
    (journal.directory / "round.json").write_text(content, encoding="utf-8")

    with caplog.at_level(logging.WARNING, logger="coordinator.adapters.journal"):
        current = journal.current_round()
        available = journal.replay_available(9)

    assert current is None
    assert available is None
    assert "ignoring" in caplog.text
    assert "round.json" in caplog.text


def test_begin_after_a_corrupt_plan_starts_afresh(journal: RoundJournal) -> None:
    journal.begin(9, ["m01"])
    journal.record("m01", "t1", b"of an unknown round")
    (journal.directory / "round.json").write_bytes(b"\xff\xfe garbage")

    journal.begin(9, ["m01", "m02"])

    assert journal.replay_available(9) == ["m01", "m02"]
    assert journal.accepted() == {}


def test_the_plan_is_plain_json(journal: RoundJournal) -> None:
    journal.begin(3, ["m01"])

    plan = json.loads((journal.directory / "round.json").read_text(encoding="utf-8"))

    assert plan == {"server_round": 3, "available": ["m01"]}
    assert [p.name for p in journal.directory.iterdir()] == ["round.json"]


@pytest.mark.parametrize(("agent", "task"), [("m/01", "t1"), ("m01", "../t1"), ("", "t1")])
def test_ids_that_are_not_plain_names_are_refused(
    journal: RoundJournal, agent: str, task: str
) -> None:
    journal.begin(1, ["m01"])

    with pytest.raises(ValueError, match="cannot be used in a topic"):
        journal.record(agent, task, b"x")

    assert journal.accepted() == {}


def test_a_batch_is_one_segment_with_one_flush(journal: RoundJournal) -> None:
    journal.begin(4, ["m01", "m02"])

    journal.record_many([("m01", "t1", b"one"), ("m02", "t2", b"two")])
    journal.record("m01", "t3", b"three")

    segments = sorted(journal.directory.glob("*.segment"))
    assert len(segments) == 2
    assert journal.accepted() == {"t1": b"one", "t2": b"two", "t3": b"three"}


def test_a_torn_segment_keeps_its_whole_records(journal: RoundJournal) -> None:
    journal.begin(4, ["m01", "m02"])
    journal.record_many([("m01", "t1", b"first update"), ("m02", "t2", b"second update")])
    (segment,) = journal.directory.glob("*.segment")
    segment.write_bytes(segment.read_bytes()[:-5])

    assert journal.accepted() == {"t1": b"first update"}


def test_a_new_journal_object_appends_after_existing_segments(journal: RoundJournal) -> None:
    journal.begin(4, ["m01"])
    journal.record("m01", "t1", b"old")

    again = RoundJournal(journal.directory)
    again.record("m01", "t1", b"new")

    assert again.accepted() == {"t1": b"new"}


def test_a_batch_after_the_folder_vanished_creates_it_again(journal: RoundJournal) -> None:
    journal.begin(4, ["m01", "m02"])
    journal.record("m01", "t1", b"first")
    shutil.rmtree(journal.directory)

    journal.record("m02", "t2", b"second")

    assert journal.accepted() == {"t2": b"second"}


def test_large_payloads_are_journaled_byte_for_byte(journal: RoundJournal) -> None:
    journal.begin(4, ["m01", "m02"])
    big = bytes(range(256)) * 4096 + b"tail"

    journal.record_many([("m01", "t1", big), ("m02", "t2", b"")])

    assert journal.accepted() == {"t1": big, "t2": b""}


def test_a_completed_rounds_segments_are_written_over_by_the_next(tmp_path: Path) -> None:
    # Prepare: round 1 writes three batches, the last one long
    journal = RoundJournal(tmp_path / "journal")
    journal.begin(1, ["m01"])
    journal.record_many([("m01", "t1", b"a" * 100), ("m01", "t2", b"b" * 100)])
    journal.record("m01", "t3", b"c" * 50)
    journal.record("m01", "t4", b"d" * 5000)

    # Execute: the round completes; round 2 writes two short batches
    journal.clear()
    spares = sorted(journal.spare_directory.glob("*.spare"))
    sizes = sorted(p.stat().st_size for p in spares)
    journal.begin(2, ["m01"])
    journal.record("m01", "u1", b"new one")
    journal.record("m01", "u2", b"new two")

    # Assert: the three segments became spares, two were written over (and cut to their
    # content: nothing of round 1 is read back), one is left
    assert len(spares) == 3
    assert sizes[-1] > 5000
    assert journal.accepted() == {"u1": b"new one", "u2": b"new two"}
    assert len(list(journal.spare_directory.glob("*.spare"))) == 1
    assert RoundJournal(tmp_path / "journal").accepted() == {"u1": b"new one", "u2": b"new two"}


def test_spares_are_kept_up_to_their_budget_and_never_read_as_segments(tmp_path: Path) -> None:
    # Prepare: a budget for one of two 1,000-byte segments; none at all for another journal
    journal = RoundJournal(tmp_path / "journal", spare_bytes=1500)
    none = RoundJournal(tmp_path / "other", spare_bytes=0)
    for j in (journal, none):
        j.begin(1, ["m01"])
        j.record("m01", "t1", b"x" * 1000)
        j.record("m01", "t2", b"y" * 1000)

    # Execute
    journal.clear()
    none.clear()

    # Assert
    assert len(list(journal.spare_directory.glob("*.spare"))) == 1
    assert not none.spare_directory.exists()
    assert not journal.directory.exists()
    assert journal.current_round() is None
    assert journal.accepted() == {}


def test_nothing_of_a_spares_old_records_is_read_back(tmp_path: Path) -> None:
    # Prepare: round 1's one segment holds two records of the same size
    journal = RoundJournal(tmp_path / "journal")
    journal.begin(1, ["m01"])
    journal.record_many([("m01", "t1", b"a" * 10), ("m01", "t2", b"b" * 10)])
    journal.clear()

    # Execute: round 2 writes one record of that size over it
    journal.begin(2, ["m01"])
    journal.record("m01", "u1", b"c" * 10)

    # Assert: the old second record, complete as it is, is not there
    assert journal.accepted() == {"u1": b"c" * 10}
    assert not list(journal.spare_directory.glob("*.spare"))


def test_a_spare_that_cannot_be_written_over_falls_back_to_new_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: the only "spare" is a folder, which cannot be opened for writing
    journal = RoundJournal(tmp_path / "journal")
    (journal.spare_directory / "0000000001.spare").mkdir(parents=True)
    journal.begin(1, ["m01"])

    # Execute
    with caplog.at_level(logging.WARNING, logger="coordinator.adapters.journal"):
        journal.record("m01", "t1", b"kept")
        journal.record("m01", "t2", b"kept too")
    written = journal.accepted()
    journal.clear()

    # Assert: both written, the way out named once, no spares kept any more
    assert written == {"t1": b"kept", "t2": b"kept too"}
    assert caplog.text.count("cannot write over its spare") == 1
    assert "writes new files from now on" in caplog.text
    assert journal.spare_bytes == 0
    assert list(journal.spare_directory.glob("*.spare")) == [
        journal.spare_directory / "0000000001.spare"
    ]
