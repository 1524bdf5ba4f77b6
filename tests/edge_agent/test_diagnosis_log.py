"""The bounded JSON-lines log of diagnoses."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import pytest

from edge_agent.diagnosis_log import DiagnosisLog, LogWriteError
from tests.clocks import FakeClock


def _record(number: int) -> dict[str, object]:
    return {"window": number, "class_name": "A1B1O/outer-race", "confidence": 0.875}


def test_recent_returns_the_last_records_newest_last(tmp_path: Path) -> None:
    log = DiagnosisLog(tmp_path / "diagnoses.jsonl")
    for number in range(5):
        log.append(_record(number))

    last_three = log.recent(3)

    assert [r["window"] for r in last_three] == [2, 3, 4]
    assert [r["window"] for r in log.recent(100)] == [0, 1, 2, 3, 4]
    assert log.recent(0) == []
    assert last_three[0] == _record(2)
    log.close()


def test_rotation_bounds_the_disk_use_and_keeps_the_newest(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "diagnoses.jsonl"
    line_bytes = len(json.dumps(_record(100), separators=(",", ":"))) + 1
    log = DiagnosisLog(path, max_bytes=1024, backups=2)

    for number in range(200):
        log.append(_record(number))

    files = sorted(tmp_path.joinpath("logs").iterdir())
    assert [f.name for f in files] == ["diagnoses.jsonl", "diagnoses.jsonl.1", "diagnoses.jsonl.2"]
    assert all(f.stat().st_size <= 1024 for f in files)
    windows = [r["window"] for r in log.recent(1000)]
    per_file = 1024 // line_bytes
    assert windows == list(range(200 - len(windows), 200))
    assert 2 * per_file < len(windows) <= 3 * per_file
    log.close()


def test_no_backups_restarts_the_file_when_full(tmp_path: Path) -> None:
    path = tmp_path / "diagnoses.jsonl"
    with DiagnosisLog(path, max_bytes=1024, backups=0) as log:
        for number in range(50):
            log.append(_record(number))

        assert [f.name for f in tmp_path.iterdir()] == ["diagnoses.jsonl"]
        assert path.stat().st_size <= 1024
        assert log.recent(1)[0]["window"] == 49


def test_a_reopened_log_continues_and_drops_backups_beyond_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "diagnoses.jsonl"
    with DiagnosisLog(path, max_bytes=1024, backups=3) as log:
        for number in range(60):
            log.append(_record(number))
    assert path.with_name("diagnoses.jsonl.3").exists()

    with DiagnosisLog(path, max_bytes=1024, backups=1) as reopened:
        reopened.append(_record(60))
        windows = [r["window"] for r in reopened.recent(1000)]

    assert not path.with_name("diagnoses.jsonl.2").exists()
    assert not path.with_name("diagnoses.jsonl.3").exists()
    assert windows[-2:] == [59, 60]
    assert path.stat().st_size <= 1024


def test_a_torn_line_is_skipped_and_the_next_record_stays_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "diagnoses.jsonl"
    path.write_text(json.dumps(_record(0)) + "\n" + '{"window": 1, "class_na')  # power cut

    with (
        caplog.at_level(logging.WARNING, logger="edge_agent.diagnosis_log"),
        DiagnosisLog(path) as log,
    ):
        log.append(_record(2))
        records = log.recent(10)

    assert [r["window"] for r in records] == [0, 2]
    assert "line 2, not valid JSON" in caplog.text


def test_appends_from_many_threads_stay_whole_lines(tmp_path: Path) -> None:
    log = DiagnosisLog(tmp_path / "diagnoses.jsonl", max_bytes=4096, backups=100)

    def write(first: int) -> None:
        for number in range(first, first + 100):
            log.append(_record(number))

    threads = [threading.Thread(target=write, args=(k * 100,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(r["window"] for r in log.recent(1000)) == list(range(400))
    log.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_bytes": 1023}, "max_bytes must be an int >= 1024 bytes, got 1023"),
        ({"backups": -1}, "backups must be an int >= 0, got -1"),
        ({"max_bytes": 2048.0}, "max_bytes must be an int"),
    ],
)
def test_bad_arguments_are_named(tmp_path: Path, options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DiagnosisLog(tmp_path / "log.jsonl", **options)  # type: ignore[arg-type]


def test_bad_records_and_a_closed_log_are_refused(tmp_path: Path) -> None:
    log = DiagnosisLog(tmp_path / "log.jsonl", max_bytes=1024)

    with pytest.raises(ValueError, match="NaN or infinity"):
        log.append({"confidence": float("nan")})
    with pytest.raises(ValueError, match="larger than max_bytes=1024"):
        log.append({"text": "x" * 2000})
    with pytest.raises(TypeError, match="not JSON serializable"):
        log.append({"when": object()})
    with pytest.raises(ValueError, match="n must be an int >= 0"):
        log.recent(-1)
    log.close()
    with pytest.raises(ValueError, match="is closed"):
        log.append(_record(0))
    assert log.recent(5) == []


def test_lines_wait_for_their_delay_then_are_written_together(tmp_path: Path) -> None:
    # Prepare: lines wait up to 1 s
    clock = FakeClock()
    path = tmp_path / "diagnoses.jsonl"
    log = DiagnosisLog(path, flush_delay_s=1.0, clock=clock)

    # Execute / Assert: waiting lines are not in the file yet but are read back
    assert log.append_line(b'{"window":0}') == 0
    assert log.append_line(b'{"window":1}') == 0
    assert path.read_bytes() == b""
    assert [r["window"] for r in log.recent(5)] == [0, 1]
    assert log.flush(only_due=True) == 0
    clock.advance(1.0)
    assert log.append_line(b'{"window":2}') == 3  # the delay is up: the batch is written
    assert path.read_bytes().splitlines() == [b'{"window":0}', b'{"window":1}', b'{"window":2}']
    log.append_line(b'{"window":3}')
    log.close()  # writes what waits
    assert [r["window"] for r in log.recent(10)] == [0, 1, 2, 3]


def test_a_batch_that_cannot_be_written_says_how_many_lines_it_lost(tmp_path: Path) -> None:
    # Prepare: the log is /dev/full (every write fails with ENOSPC)
    path = tmp_path / "diagnoses.jsonl"
    path.symlink_to("/dev/full")
    log = DiagnosisLog(path, flush_delay_s=1.0, clock=FakeClock())
    for number in range(3):
        log.append(_record(number))

    # Execute
    with pytest.raises(LogWriteError, match="No space left on device") as failed:
        log.flush()

    # Assert: three lines lost, and the log takes further lines
    assert failed.value.lines_lost == 3
    log.append(_record(3))
    with pytest.raises(LogWriteError):
        log.close()


def test_a_line_must_be_one_json_object_without_newline(tmp_path: Path) -> None:
    with (
        DiagnosisLog(tmp_path / "log.jsonl") as log,
        pytest.raises(ValueError, match="must not hold a newline"),
    ):
        log.append_line(b'{"a":1}\n{"b":2}')


def test_a_due_batch_wakes_the_writer_and_waits_for_it(tmp_path: Path) -> None:
    # Prepare: lines wait up to 1 s; a writer thread is woken instead of writing
    wakes: list[int] = []
    clock = FakeClock()
    log = DiagnosisLog(
        tmp_path / "d.jsonl", flush_delay_s=1.0, clock=clock, wake_writer=lambda: wakes.append(1)
    )

    # Execute / Assert
    assert log.append_line(b'{"i":0}') == 0
    assert wakes == []
    clock.advance(1.0)
    assert log.append_line(b'{"i":1}') == 0  # due: the writer is asked, nothing written
    assert (len(wakes), (tmp_path / "d.jsonl").read_bytes()) == (1, b"")
    assert log.flush(only_due=True) == 2
    assert (tmp_path / "d.jsonl").read_bytes() == b'{"i":0}\n{"i":1}\n'
    log.append_line(b'{"i":2}')
    log.close()  # the last line is written on close
    assert [r["i"] for r in log.recent(5)] == [0, 1, 2]
