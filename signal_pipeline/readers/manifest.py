"""Manifests: lists of recording files with the machine and label of each.

A manifest is a CSV file with a header row, or a TOML file of ``[[recording]]`` tables,
with these fields:

==============  ========  ==========================================================
field           required  meaning
==============  ========  ==========================================================
``path``        yes       recording file, relative to the manifest's folder (or absolute)
``machine_id``  yes       machine (federated client) the recording belongs to
``label``       yes       health-condition label, a non-negative integer
``fs_hz``       no        sampling rate in Hz (see :func:`~.dispatch.read_recording`)
``rpm``         no        shaft speed in rev/min
``channel``     no        channel, column or array to read
``time_column`` no        CSV recordings: column of timestamps in seconds
==============  ========  ==========================================================

In a CSV manifest an empty cell means "not given", and a ``channel`` or
``time_column`` made of digits is a 0-based index.

Every listed file must lie in the manifest's folder or below it, once ``..`` and symbolic
links are resolved: a manifest cannot make a reader open ``/etc/passwd`` or another
plant's data. Pass ``allow_outside_folder=True`` (the agent's ``[source]
manifest_outside_folder``, ``faultfleet signals federation --manifest-outside-folder``) to
accept files anywhere.

Example (TOML)::

    [[recording]]
    path = "cwru/97.mat"
    machine_id = "rig-a"
    label = 0
    fs_hz = 12000
"""

from __future__ import annotations

import csv
import io
import math
import re
import tomllib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from signal_pipeline.readers._common import read_text
from signal_pipeline.readers.dispatch import read_recording
from signal_pipeline.recording import Recording, RecordingError

MANIFEST_FIELDS = ("path", "machine_id", "label", "fs_hz", "rpm", "channel", "time_column")
"""Fields a manifest entry may have."""

REQUIRED_FIELDS = ("path", "machine_id", "label")
"""Fields every manifest entry must have."""

_SAME_RATE_TOLERANCE = 1e-6
_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class ManifestEntry:
    """One recording listed in a manifest.

    Parameters
    ----------
    path : Path
        Recording file, resolved against the manifest's folder.
    machine_id : str
        Machine the recording belongs to.
    label : int
        Health-condition label, non-negative.
    fs_hz : float or None
        Sampling rate in Hz, when given.
    rpm : float or None
        Shaft speed in rev/min, when given.
    channel : str, int or None
        Channel, column or array to read, when given.
    time_column : str, int or None
        CSV time column (seconds), when given.
    """

    path: Path
    machine_id: str
    label: int
    fs_hz: float | None = None
    rpm: float | None = None
    channel: str | int | None = None
    time_column: str | int | None = None


def load_manifest(path: str | Path, *, allow_outside_folder: bool = False) -> list[ManifestEntry]:
    """Parse and check a ``.csv`` or ``.toml`` manifest, without reading the recordings.

    Parameters
    ----------
    path : str or Path
        The manifest.
    allow_outside_folder : bool
        Accept listed files outside the manifest's folder (refused by default).

    Raises
    ------
    RecordingError
        Naming the manifest and the row (CSV, 1-based data row) or entry (TOML, 1-based)
        for unknown or missing fields, bad values, files outside the manifest's folder,
        files that do not exist, duplicate entries, or a manifest without entries.
    """
    return [entry for _, entry in _load_entries(Path(path), allow_outside_folder)]


def read_manifest(path: str | Path, *, allow_outside_folder: bool = False) -> list[Recording]:
    """Read every recording a manifest lists, with its machine id and label.

    ``allow_outside_folder`` as for :func:`load_manifest`.

    Returns
    -------
    list of Recording
        In manifest order.

    Raises
    ------
    RecordingError
        As :func:`load_manifest`; if a listed recording cannot be read (naming the entry
        and the file); or if one machine's recordings have different sampling rates.
    """
    manifest = Path(path)
    recordings = []
    for where, entry in _load_entries(manifest, allow_outside_folder):
        try:
            recording = read_recording(
                entry.path,
                fs_hz=entry.fs_hz,
                channel=entry.channel,
                time_column=entry.time_column,
                rpm=entry.rpm,
                label=entry.label,
                machine_id=entry.machine_id,
            )
        except RecordingError as exc:
            raise RecordingError(manifest, f"{where} cannot be read: {exc}") from exc
        recordings.append(recording)
    _check_one_rate_per_machine(manifest, recordings)
    return recordings


def _load_entries(manifest: Path, allow_outside_folder: bool) -> list[tuple[str, ManifestEntry]]:
    suffix = manifest.suffix.lower()
    if suffix == ".csv":
        raw = _csv_rows(manifest)
    elif suffix == ".toml":
        raw = _toml_entries(manifest)
    else:
        raise RecordingError(
            manifest,
            f"unsupported manifest type {manifest.suffix or '(no suffix)'!r}; use .csv or .toml",
        )
    if not raw:
        raise RecordingError(manifest, "lists no recordings; add at least one entry")
    entries = [
        (where, _entry(manifest, where, fields, allow_outside_folder)) for where, fields in raw
    ]
    seen: dict[tuple[Path, str | int | None, str | int | None], str] = {}
    for where, entry in entries:
        key = (entry.path, entry.channel, entry.time_column)
        if key in seen:
            raise RecordingError(
                manifest,
                f"{where} repeats {seen[key]} ({entry.path}, channel {entry.channel!r}); "
                "remove the duplicate so no recording is counted twice",
            )
        seen[key] = where
    return entries


def _check_fields(manifest: Path, where: str, names: list[str]) -> None:
    unknown = [name for name in names if name not in MANIFEST_FIELDS]
    if unknown:
        raise RecordingError(
            manifest,
            f"{where}: unknown field(s) {', '.join(map(repr, unknown))}; allowed: "
            f"{', '.join(MANIFEST_FIELDS)}",
        )


def _csv_rows(manifest: Path) -> list[tuple[str, dict[str, object]]]:
    reader = csv.reader(io.StringIO(read_text(manifest), newline=""))
    try:
        lines = [[cell.strip() for cell in row] for row in reader]
    except csv.Error as exc:
        raise RecordingError(manifest, f"malformed CSV at line {reader.line_num}: {exc}") from exc
    lines = [row for row in lines if any(row)]
    if not lines:
        return []
    header, data = lines[0], lines[1:]
    _check_fields(manifest, "header", header)
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise RecordingError(manifest, f"header repeats column(s) {', '.join(repeated)}")
    missing = [name for name in REQUIRED_FIELDS if name not in header]
    if missing:
        raise RecordingError(
            manifest,
            f"header lacks required column(s) {', '.join(missing)}; required: "
            f"{', '.join(REQUIRED_FIELDS)}",
        )
    rows: list[tuple[str, dict[str, object]]] = []
    for number, cells in enumerate(data, start=1):
        if len(cells) > len(header):
            raise RecordingError(
                manifest,
                f"row {number} has {len(cells)} cells but the header has {len(header)} columns",
            )
        rows.append((f"row {number}", {k: v for k, v in zip(header, cells, strict=False) if v}))
    return rows


def _toml_entries(manifest: Path) -> list[tuple[str, dict[str, object]]]:
    try:
        document = tomllib.loads(read_text(manifest))
    except tomllib.TOMLDecodeError as exc:
        raise RecordingError(manifest, f"is not valid TOML: {exc}") from exc
    unknown = sorted(set(document) - {"recording"})
    if unknown:
        raise RecordingError(
            manifest,
            f"unknown top-level key(s) {', '.join(unknown)}; allowed: recording "
            "(write each entry as a [[recording]] table)",
        )
    tables = document.get("recording", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise RecordingError(
            manifest, "'recording' must be an array of tables, written [[recording]]"
        )
    entries: list[tuple[str, dict[str, object]]] = []
    for number, table in enumerate(tables, start=1):
        _check_fields(manifest, f"entry {number}", list(table))
        entries.append((f"entry {number}", dict(table)))
    return entries


def _entry(
    manifest: Path, where: str, fields: dict[str, object], allow_outside_folder: bool
) -> ManifestEntry:
    for name in REQUIRED_FIELDS:
        if name not in fields:
            raise RecordingError(manifest, f"{where}: missing required field {name!r}")
    raw_path = _text(manifest, where, "path", fields["path"])
    machine_id = _text(manifest, where, "machine_id", fields["machine_id"])
    file_path = manifest.parent / Path(raw_path).expanduser()
    if not allow_outside_folder:
        _check_inside(manifest, where, raw_path, file_path)
    if not file_path.is_file():
        raise RecordingError(
            manifest,
            f"{where}: listed file {raw_path!r} does not exist (looked for {file_path}); "
            "fix the path (relative paths start at the manifest's folder)",
        )
    return ManifestEntry(
        path=file_path,
        machine_id=machine_id,
        label=_label(manifest, where, fields["label"]),
        fs_hz=_positive(manifest, where, "fs_hz", fields.get("fs_hz")),
        rpm=_positive(manifest, where, "rpm", fields.get("rpm")),
        channel=_column(manifest, where, "channel", fields.get("channel")),
        time_column=_column(manifest, where, "time_column", fields.get("time_column")),
    )


def _check_inside(manifest: Path, where: str, raw_path: str, file_path: Path) -> None:
    """Refuse a listed file that resolves (``..``, symbolic links) outside the manifest's
    folder."""
    folder = manifest.parent.resolve()
    resolved = file_path.resolve()
    if not resolved.is_relative_to(folder):
        raise RecordingError(
            manifest,
            f"{where}: listed file {raw_path!r} resolves to {resolved}, outside the "
            f"manifest's folder {folder}; move the recording into that folder, or allow "
            "files elsewhere ([source] manifest_outside_folder = true for an agent, "
            "--manifest-outside-folder for faultfleet signals federation)",
        )


def _text(manifest: Path, where: str, name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RecordingError(manifest, f"{where}: {name} must be a non-empty string, got {value!r}")
    return value.strip()


def _label(manifest: Path, where: str, value: object) -> int:
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise RecordingError(manifest, f"{where}: label must be a non-negative integer, got {value!r}")


def _positive(manifest: Path, where: str, name: str, value: object) -> float | None:
    if value is None:
        return None
    number = math.nan
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = math.nan
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise RecordingError(manifest, f"{where}: {name} must be a positive number, got {value!r}")
    return number


def _column(manifest: Path, where: str, name: str, value: object) -> str | int | None:
    if value is None:
        return None
    if isinstance(value, str):
        return int(value) if _DIGITS.fullmatch(value) else value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise RecordingError(
        manifest, f"{where}: {name} must be a name or a non-negative index, got {value!r}"
    )


def _check_one_rate_per_machine(manifest: Path, recordings: list[Recording]) -> None:
    by_machine: dict[str, list[Recording]] = defaultdict(list)
    for recording in recordings:
        by_machine[str(recording.machine_id)].append(recording)
    for machine_id, group in by_machine.items():
        reference_hz = group[0].fs_hz
        if all(abs(r.fs_hz - reference_hz) <= _SAME_RATE_TOLERANCE * reference_hz for r in group):
            continue
        by_rate: dict[str, list[str]] = defaultdict(list)
        for recording in group:
            by_rate[f"{recording.fs_hz:g} Hz"].append(recording.source)
        listing = "; ".join(f"{rate}: {', '.join(files)}" for rate, files in by_rate.items())
        raise RecordingError(
            manifest,
            f"machine {machine_id!r} mixes sampling rates ({listing}); resample its "
            "recordings to one rate or give each rate its own machine_id",
        )
