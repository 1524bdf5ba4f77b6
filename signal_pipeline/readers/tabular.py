"""Reader and writer for recordings stored as CSV text.

A CSV recording has one sample per row and one column per channel, optionally a header
row (detected: the first row is a header when one of its cells is not a number) and
optionally a time column in seconds from which the sampling rate is derived. The
delimiter is whichever of ``,``, ``;`` or tab occurs most often in the first row.

Every cell of the chosen columns must be a number: a gap, a unit string or a NaN is an
error naming its line and column, never silently skipped.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import IO

import numpy as np

from faultfleet.files import atomic_write
from faultfleet.types import Float64Array
from signal_pipeline.readers._common import (
    RATE_TOLERANCE,
    rates_disagree,
    read_text,
    source_name,
    to_float32_signal,
)
from signal_pipeline.recording import Recording, RecordingError

TIME_HEADER = "time_s"
"""Header of the time column written by :func:`write_csv` (seconds)."""

SIGNAL_HEADER = "acceleration"
"""Header of the signal column written by :func:`write_csv`."""

_Rows = list[tuple[int, list[str]]]


def read_csv(
    path: Path,
    *,
    fs_hz: float | None,
    channel: str | int | None,
    time_column: str | int | None,
    rpm: float | None,
    label: int | None,
    machine_id: str | None,
) -> Recording:
    """Read one column of a CSV file as a recording.

    Parameters
    ----------
    path : Path
        The CSV file.
    fs_hz : float or None
        Sampling rate in Hz. Required unless ``time_column`` is given.
    channel : str, int or None
        Signal column: header name or 0-based index. May be omitted when the file has
        a single numeric column besides the time column.
    time_column : str, int or None
        Column of timestamps in seconds; they must increase strictly and be uniformly
        spaced within 1 %. The sampling rate is derived from them.
    rpm, label, machine_id
        Passed through to the recording.

    Returns
    -------
    Recording
        ``signal`` of shape (n_rows,), float32; ``channel`` is the column's header (or
        its index when the file has no header and several columns).
    """
    header, rows = _read_rows(path)
    n_columns = len(header) if header is not None else len(rows[0][1])
    names = header if header is not None else [str(index) for index in range(n_columns)]
    time_index = None
    if time_column is not None:
        time_index = _resolve_column(path, header, n_columns, time_column, "time_column")
    if channel is None:
        candidates = [
            index
            for index in range(n_columns)
            if index != time_index and _is_number(rows[0][1][index])
        ]
        if len(candidates) != 1:
            raise RecordingError(
                path,
                f"has {len(candidates)} numeric signal columns ({_describe(header, n_columns)}); "
                "pass channel as a header name or 0-based column index",
            )
        signal_index = candidates[0]
    else:
        signal_index = _resolve_column(path, header, n_columns, channel, "channel")
    if signal_index == time_index:
        raise RecordingError(
            path, f"channel and time_column both select column {names[signal_index]!r}"
        )
    chosen = names[signal_index] if header is not None or n_columns > 1 else None
    source = source_name(path, chosen)
    values = _numeric_column(source, rows, signal_index, names[signal_index])
    if time_index is not None:
        times = _numeric_column(source, rows, time_index, names[time_index])
        derived_hz = _rate_from_times(source, times, rows, names[time_index])
        if fs_hz is not None and rates_disagree(derived_hz, fs_hz):
            raise RecordingError(
                source,
                f"fs_hz={fs_hz:g} disagrees by more than {RATE_TOLERANCE:.0%} with the "
                f"{derived_hz:.6g} Hz implied by time column {names[time_index]!r}; "
                "pass only one of them or fix the other",
            )
        fs_hz = derived_hz if fs_hz is None else fs_hz
    if fs_hz is None:
        raise RecordingError(
            source,
            "the sampling rate is unknown; pass fs_hz, or time_column naming a column "
            "of timestamps in seconds",
        )
    return Recording(
        signal=to_float32_signal(values, source, f"column {names[signal_index]!r}"),
        fs_hz=fs_hz,
        source=source,
        rpm=rpm,
        label=label,
        machine_id=machine_id,
        channel=chosen,
    )


def write_csv(recording: Recording, path: Path) -> Path:
    """Write ``time_s,acceleration`` rows; read back with ``time_column="time_s"``.

    Times are ``i / fs_hz`` with 17 significant digits, so the sampling rate is recovered
    to about 1e-15 relative; samples have 9 significant digits, which round-trip float32
    exactly. ``rpm``, ``label``, ``machine_id`` and ``metadata`` are not stored.
    """
    times = np.arange(recording.n_samples, dtype=np.float64) / recording.fs_hz
    table = np.column_stack([times, recording.signal.astype(np.float64)])

    def write(handle: IO[bytes]) -> None:
        text = io.StringIO()
        np.savetxt(
            text,
            table,
            fmt=("%.17g", "%.9g"),
            delimiter=",",
            header=f"{TIME_HEADER},{SIGNAL_HEADER}",
            comments="",
        )
        handle.write(text.getvalue().encode("utf-8"))

    return atomic_write(path, write)


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _read_rows(path: Path) -> tuple[list[str] | None, _Rows]:
    text = read_text(path)
    first_line = next((line for line in text.splitlines() if line.strip()), "")
    delimiter = max((",", ";", "\t"), key=first_line.count)
    rows: _Rows = []
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        for row in reader:
            cells = [cell.strip() for cell in row]
            if any(cells):
                rows.append((reader.line_num, cells))
    except csv.Error as exc:
        raise RecordingError(path, f"malformed CSV at line {reader.line_num}: {exc}") from exc
    header = None
    if rows and not all(_is_number(cell) for cell in rows[0][1]):
        header = rows.pop(0)[1]
    if not rows:
        raise RecordingError(path, "has no data rows; nothing to read")
    width = len(header) if header is not None else len(rows[0][1])
    for line, cells in rows:
        if len(cells) != width:
            raise RecordingError(
                path,
                f"line {line} has {len(cells)} cells but the {'header' if header else 'first row'}"
                f" has {width}; every row needs one cell per column",
            )
    return header, rows


def _describe(header: list[str] | None, n_columns: int) -> str:
    if header is None:
        return f"no header, column indices 0..{n_columns - 1}"
    return ", ".join(f"{index}: {name!r}" for index, name in enumerate(header))


def _resolve_column(
    path: Path, header: list[str] | None, n_columns: int, wanted: str | int, argument: str
) -> int:
    if isinstance(wanted, str):
        key = wanted.strip()
        if header is not None and key in header:
            if header.count(key) > 1:
                raise RecordingError(
                    path,
                    f"{argument}={wanted!r} matches {header.count(key)} columns; pass the "
                    f"0-based index instead ({_describe(header, n_columns)})",
                )
            return header.index(key)
        if not re.fullmatch(r"\d+", key):
            raise RecordingError(
                path,
                f"{argument}={wanted!r} is not a column of the file "
                f"({_describe(header, n_columns)}); pass a header name or 0-based index",
            )
        index = int(key)
    elif isinstance(wanted, bool):
        raise RecordingError(path, f"{argument}={wanted!r} must be a column name or index")
    else:
        index = wanted
    if not 0 <= index < n_columns:
        raise RecordingError(
            path,
            f"{argument}={wanted!r} is out of range: the file has {n_columns} column(s) "
            f"({_describe(header, n_columns)})",
        )
    return index


def _numeric_column(source: str, rows: _Rows, index: int, name: str) -> Float64Array:
    cells = [cells[index] for _, cells in rows]
    try:
        values = np.asarray(cells, dtype=np.float64)
    except ValueError:
        for line, row in rows:
            if not _is_number(row[index]):
                shown = "an empty cell" if not row[index] else f"{row[index]!r}"
                raise RecordingError(
                    source,
                    f"line {line}, column {name!r} holds {shown}, not a number; fix or remove "
                    "that row",
                ) from None
        raise
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise RecordingError(
            source,
            f"column {name!r} has {bad.size} NaN/Inf value(s), first at line "
            f"{rows[int(bad[0])][0]}; repair or trim the recording",
        )
    return values


def _rate_from_times(source: str, times: Float64Array, rows: _Rows, name: str) -> float:
    """Sampling rate in Hz from strictly increasing, uniformly spaced timestamps (s)."""
    if times.size < 2:
        raise RecordingError(
            source, f"time column {name!r} has a single row, which gives no rate; pass fs_hz"
        )
    steps = np.diff(times)
    backwards = np.flatnonzero(steps <= 0)
    if backwards.size:
        at = int(backwards[0]) + 1
        raise RecordingError(
            source,
            f"timestamps in column {name!r} must increase strictly, but line {rows[at][0]} "
            f"has t = {float(times[at])!r} s after t = {float(times[at - 1])!r} s; sort the rows "
            "or remove duplicates",
        )
    step_s = float(times[-1] - times[0]) / (times.size - 1)
    uneven = np.flatnonzero(np.abs(steps - step_s) > RATE_TOLERANCE * step_s)
    if uneven.size:
        at = int(uneven[0]) + 1
        raise RecordingError(
            source,
            f"timestamps in column {name!r} are not uniformly spaced within "
            f"{RATE_TOLERANCE:.0%}: steps range from {steps.min():.6g} s to {steps.max():.6g} s "
            f"(mean {step_s:.6g} s), first off at line {rows[at][0]}; resample the signal onto "
            "a uniform grid (e.g. numpy.interp or scipy.signal.resample) and pass fs_hz",
        )
    return 1.0 / step_s
