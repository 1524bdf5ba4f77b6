"""The labels file: time ranges and labels, written by ``faultfleet label`` or by hand."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from edge_agent.labels_file import (
    LabelRange,
    LabelsFileError,
    append_label,
    parse_time,
    read_labels,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1780000000", 1_780_000_000.0),
        ("1780000000.5", 1_780_000_000.5),
        ("2026-05-04T08:00:00+02:00", datetime(2026, 5, 4, 6, tzinfo=UTC).timestamp()),
        ("2026-05-04T06:00Z", datetime(2026, 5, 4, 6, tzinfo=UTC).timestamp()),
        ("2026-05-04T08:00", datetime(2026, 5, 4, 8).timestamp()),  # local time
    ],
)
def test_times_are_iso_8601_or_unix_seconds(text: str, expected: float) -> None:
    assert parse_time(text) == expected


def test_a_time_that_is_not_one_says_which_forms_work() -> None:
    with pytest.raises(LabelsFileError, match=r"'monday' is not a time; write ISO 8601"):
        parse_time("monday")


def test_appended_ranges_read_back_with_their_notes(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "labels.csv"
    first = LabelRange(1_780_000_000.0, 1_780_003_600.0, 8, "work order 4711")
    second = LabelRange(1_780_010_000.25, 1_780_020_000.0, 0)

    # Execute
    missing = read_labels(path)
    append_label(path, first)
    append_label(path, second)

    # Assert
    assert missing == []
    assert read_labels(path) == [first, second]
    assert path.read_text(encoding="utf-8").splitlines()[0] == "start,end,label,note"


def test_hand_edited_rows_may_be_comments_or_blank(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "labels.csv"
    path.write_text("start,end,label\n# pump 3\n\n100,200,3\n", encoding="utf-8")

    # Execute / Assert
    assert read_labels(path) == [LabelRange(100.0, 200.0, 3)]


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ("100,200", "expected start,end,label"),
        ("200,100,3", "empty or not finite"),
        ("100,200,-1", "class index >= 0"),
        ("100,200,eight", "invalid literal"),
        ("yesterday,200,3", "not a time"),
    ],
)
def test_a_bad_row_is_named_with_its_line(tmp_path: Path, row: str, problem: str) -> None:
    path = tmp_path / "labels.csv"
    path.write_text(f"start,end,label\n{row}\n", encoding="utf-8")

    with pytest.raises(LabelsFileError, match=rf"labels\.csv, line 2: .*{problem}"):
        read_labels(path)
