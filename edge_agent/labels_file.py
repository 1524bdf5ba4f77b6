"""The labels file: time ranges of an agent's live windows and the label found for them.

A maintenance finding labels what the machine went through after the fact: "from Monday
08:00 to Tuesday 10:00 pump 3 ran with outer-race damage (label 8)". One CSV file per agent
(``[labels] file``, by default ``state_dir/labels.csv``) holds one range per row::

    start,end,label
    2026-05-04T08:00:00+02:00,2026-05-05T10:00:00+02:00,8
    1780000000,1780003600,0

``start`` is included, ``end`` excluded; each is an ISO 8601 time (without an offset: the
machine's local time) or Unix seconds, compared with the timestamp each diagnosis carries
(``agents/{id}/diagnoses``, ``diagnoses.jsonl``). ``label`` is the class index, as in the
manifests. An optional fourth column ``note`` is kept for people. ``faultfleet label``
appends rows; people may edit the file by hand. A later row wins where ranges overlap.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from faultfleet.errors import UsageError
from faultfleet.files import atomic_write

HEADER = ("start", "end", "label", "note")


class LabelsFileError(UsageError):
    """A labels file or a time that cannot be read; the message names the row."""


@dataclass(frozen=True)
class LabelRange:
    """Windows diagnosed from ``start`` (included) to ``end`` (excluded), Unix seconds,
    are of class ``label``."""

    start: float
    end: float
    label: int
    note: str = ""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start) and math.isfinite(self.end)) or self.end <= self.start:
            raise LabelsFileError(
                f"the range {self.start!r} to {self.end!r} is empty or not finite; give an "
                "end after its start"
            )
        if self.label < 0:
            raise LabelsFileError(f"label {self.label} must be a class index >= 0")


def parse_time(text: str) -> float:
    """Unix seconds from ``"2026-05-04T08:00"`` (local time), ``"…+02:00"``, ``"…Z"`` or a
    number of seconds."""
    value = text.strip()
    try:
        return float(value)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise LabelsFileError(
            f"{text!r} is not a time; write ISO 8601 (2026-05-04T08:00, local time, or "
            "2026-05-04T08:00+02:00) or Unix seconds"
        ) from None
    return moment.timestamp()


def read_labels(path: Path) -> list[LabelRange]:
    """The ranges of ``path``, in file order; none when the file does not exist.

    Raises
    ------
    LabelsFileError
        A row that cannot be read, naming the file and the line.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as error:
        raise LabelsFileError(f"cannot read the labels file {path}: {error}") from error
    ranges = []
    rows = csv.reader(io.StringIO(text))
    for line, row in enumerate(rows, 1):
        cells = [cell.strip() for cell in row]
        if not any(cells) or cells[0].startswith("#") or (line == 1 and cells[0] == "start"):
            continue
        if len(cells) not in (3, 4):
            raise LabelsFileError(
                f"{path}, line {line}: expected start,end,label[,note], got {len(cells)} cells"
            )
        try:
            label = int(cells[2])
            ranges.append(LabelRange(parse_time(cells[0]), parse_time(cells[1]), label, *cells[3:]))
        except (ValueError, LabelsFileError) as error:
            raise LabelsFileError(f"{path}, line {line}: {error}") from None
    return ranges


def append_label(path: Path, label: LabelRange) -> None:
    """Add ``label`` as the last row of ``path`` (created with its header if missing)."""
    existing = path.read_text(encoding="utf-8") if path.exists() else ",".join(HEADER) + "\n"
    if existing and not existing.endswith("\n"):
        existing += "\n"
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(
        [_iso(label.start), _iso(label.end), label.label, label.note]
    )
    text = (existing + buffer.getvalue()).encode("utf-8")
    atomic_write(path, lambda f: f.write(text))


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds).astimezone().isoformat()
