"""Readers for NumPy ``.npy``/``.npz`` recordings and the ``.npz`` writer.

``.npy`` holds bare samples: a 1-D array, or a 2-D array of shape (n_samples,
n_channels) with ``channel`` as the column index; the sampling rate must be passed.

``.npz`` is this project's own format: the signal under ``signal`` (or the key given as
``channel``), optional 0-d arrays ``fs`` (Hz), ``rpm`` (rev/min) and ``label``, and any
other 0-d string or number array as metadata (for example ``rotor``, ``bpfo_hz``).
Pickled object arrays are never loaded (``allow_pickle=False``).
"""

from __future__ import annotations

import functools
import logging
import math
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from faultfleet.files import atomic_write
from signal_pipeline.readers._common import (
    RATE_TOLERANCE,
    check_label,
    check_positive,
    rates_disagree,
    read_prefix,
    source_name,
    to_float32_signal,
)
from signal_pipeline.recording import Recording, RecordingError

logger = logging.getLogger(__name__)

SIGNAL_KEY = "signal"
"""Default ``.npz`` key of the samples."""

RESERVED_KEYS = (SIGNAL_KEY, "fs", "rpm", "label")
"""``.npz`` keys with a fixed meaning; never metadata."""

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK"

_Array = np.ndarray[Any, Any]


def read_npy(
    path: Path,
    *,
    fs_hz: float | None,
    channel: str | int | None,
    rpm: float | None,
    label: int | None,
    machine_id: str | None,
) -> Recording:
    """Read a ``.npy`` array of shape (n_samples,) or (n_samples, n_channels).

    ``channel`` is the 0-based column of a 2-D array (optional for a single column);
    ``fs_hz`` (Hz) is required. Returns a recording whose ``signal`` has shape
    (n_samples,), float32.
    """
    if read_prefix(path, len(_NPY_MAGIC)) != _NPY_MAGIC:
        raise RecordingError(path, "is not a .npy file (no NumPy header); check the file")
    with path.open("rb") as handle:
        array = _guarded_load(path, None, lambda: np.load(handle, allow_pickle=False))
    column, chosen = _select_column(path, array, channel)
    source = source_name(path, chosen)
    samples = to_float32_signal(
        column, source, "the array" if chosen is None else f"column {chosen}"
    )
    if fs_hz is None:
        raise RecordingError(source, ".npy files do not store the sampling rate; pass fs_hz")
    return Recording(
        signal=samples,
        fs_hz=fs_hz,
        source=source,
        rpm=rpm,
        label=label,
        machine_id=machine_id,
        channel=chosen,
    )


def read_npz(
    path: Path,
    *,
    fs_hz: float | None,
    channel: str | int | None,
    rpm: float | None,
    label: int | None,
    machine_id: str | None,
) -> Recording:
    """Read the array ``channel`` (default ``"signal"``) of a ``.npz`` archive.

    Stored ``fs``/``rpm``/``label`` are used unless the argument is given; an explicit
    ``fs_hz`` that differs from a stored ``fs`` by more than 1 % is an error. Other 0-d
    string/number arrays become ``metadata`` (``str``, ``int``, ``float`` or ``bool``).
    """
    if not read_prefix(path, len(_ZIP_MAGIC)).startswith(_ZIP_MAGIC):
        raise RecordingError(path, "is not a .npz archive (no zip header); check the file")
    arrays = _load_archive(path)
    if isinstance(channel, int):
        raise RecordingError(path, f"channel={channel!r}: pass the .npz array name, not an index")
    key = SIGNAL_KEY if channel is None else channel.strip()
    if key not in arrays:
        listing = ", ".join(f"{name} {value.shape}" for name, value in sorted(arrays.items()))
        raise RecordingError(
            path, f"has no array {key!r}; arrays present: {listing or '(none)'}; pass channel"
        )
    source = source_name(path, key)
    samples = to_float32_signal(arrays[key], source, f"array {key!r}")
    stored_fs = check_positive(_scalar(source, arrays, "fs"), "stored 'fs'", source)
    if fs_hz is not None and stored_fs is not None and rates_disagree(stored_fs, fs_hz):
        raise RecordingError(
            source,
            f"fs_hz={fs_hz:g} disagrees by more than {RATE_TOLERANCE:.0%} with the stored "
            f"fs = {stored_fs:g} Hz; omit fs_hz or fix the file",
        )
    fs_hz = fs_hz if fs_hz is not None else stored_fs
    if fs_hz is None:
        raise RecordingError(source, "no sampling rate: pass fs_hz or store an 'fs' array")
    if rpm is None:
        rpm = check_positive(_scalar(source, arrays, "rpm"), "stored 'rpm'", source)
    if label is None:
        label = check_label(_scalar(source, arrays, "label"), "stored 'label'", source)
    ignored = {key, *RESERVED_KEYS}
    return Recording(
        signal=samples,
        fs_hz=fs_hz,
        source=source,
        rpm=rpm,
        label=label,
        machine_id=machine_id,
        channel=key,
        metadata=_metadata({k: v for k, v in arrays.items() if k not in ignored}),
    )


def write_npz(recording: Recording, path: Path) -> Path:
    """Write ``signal``, ``fs``, ``rpm``/``label`` when known, and scalar metadata.

    Metadata entries that are ``str``, ``int``, ``float`` or ``bool`` are stored as 0-d
    arrays; other entries (and the rare value a 0-d array cannot hold exactly, such as a
    string ending in NUL) are skipped with a logged warning. ``machine_id``, ``channel``
    and ``source`` are not stored.

    Raises
    ------
    RecordingError
        If a metadata key is one of the reserved names ``signal``, ``fs``, ``rpm``,
        ``label``.
    """
    arrays: dict[str, _Array] = {
        SIGNAL_KEY: recording.signal.astype(np.float32),
        "fs": np.asarray(recording.fs_hz, dtype=np.float64),
    }
    if recording.rpm is not None:
        arrays["rpm"] = np.asarray(recording.rpm, dtype=np.float64)
    if recording.label is not None:
        arrays["label"] = np.asarray(recording.label, dtype=np.int64)
    for name, value in recording.metadata.items():
        if name in RESERVED_KEYS:
            raise RecordingError(
                path,
                f"metadata key {name!r} (recording from {recording.source!r}) collides with "
                f"a reserved .npz array name ({', '.join(RESERVED_KEYS)}); rename it",
            )
        stored = _storable(value)
        if stored is None:
            logger.warning("%s: metadata %r cannot be stored as a 0-d array; skipped", path, name)
            continue
        arrays[name] = stored

    def write(handle: IO[bytes]) -> None:
        with zipfile.ZipFile(handle, mode="w", compression=zipfile.ZIP_STORED) as archive:
            for name, array in arrays.items():
                with archive.open(f"{name}.npy", mode="w", force_zip64=True) as member:
                    np.lib.format.write_array(member, array, allow_pickle=False)

    return atomic_write(path, write)


def _storable(value: object) -> _Array | None:
    """``value`` as a 0-d array that reads back equal, or None (tuples, None, huge ints,
    strings ending in NUL, which numpy drops)."""
    if not isinstance(value, str | int | float | np.generic):
        return None
    stored = np.asarray(value)
    if stored.dtype.kind not in "biufU":
        return None
    item = stored.item()
    if item != value and not (isinstance(item, float) and math.isnan(item)):
        return None
    return stored


def _guarded_load(path: Path, key: str | None, load: Callable[[], Any]) -> Any:
    where = "" if key is None else f"array {key!r}: "
    try:
        return load()
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise RecordingError(
                path,
                f"{where}holds Python objects (a pickled object array), which are never "
                "loaded for safety; re-save it as a numeric array, e.g. "
                "np.save(path, array.astype(np.float32))",
            ) from exc
        raise _corrupt(path, where, exc) from exc
    except Exception as exc:
        # numpy/zipfile raise OSError, EOFError, BadZipFile, zlib.error, ... on bad input.
        raise _corrupt(path, where, exc) from exc


def _corrupt(path: Path, where: str, exc: Exception) -> RecordingError:
    return RecordingError(
        path,
        f"{where}cannot be loaded ({type(exc).__name__}: {exc}); the file is corrupt or truncated",
    )


def _load_archive(path: Path) -> dict[str, _Array]:
    arrays: dict[str, _Array] = {}
    # np.load gets an open file, not the path: given a path, it leaks the file handle
    # when the zip directory is corrupt.
    with path.open("rb") as handle:
        archive = _guarded_load(path, None, lambda: np.load(handle, allow_pickle=False))
        with archive:
            for key in archive.files:
                value = _guarded_load(path, key, functools.partial(archive.__getitem__, key))
                if not isinstance(value, np.ndarray):
                    raise RecordingError(
                        path, f"member {key!r} is not a NumPy array; check the file"
                    )
                arrays[key] = value
    return arrays


def _select_column(
    path: Path, array: _Array, channel: str | int | None
) -> tuple[_Array, str | None]:
    if array.ndim == 1:
        if channel is not None:
            raise RecordingError(
                path, f"channel={channel!r} given, but the array is 1-D; omit channel"
            )
        return array, None
    if array.ndim != 2:
        raise RecordingError(
            path,
            f"array has shape {array.shape}; expected (n_samples,) or (n_samples, n_channels)",
        )
    if channel is None:
        if array.shape[1] == 1:
            return array[:, 0], None
        raise RecordingError(
            path,
            f"array has shape {array.shape}, i.e. {array.shape[1]} columns; pass channel as a "
            f"column index 0..{array.shape[1] - 1} (rows are samples)",
        )
    if isinstance(channel, str) and re.fullmatch(r"\d+", channel.strip()):
        channel = int(channel)
    if isinstance(channel, bool) or not isinstance(channel, int):
        raise RecordingError(path, f"channel={channel!r}: pass an integer column index")
    if not 0 <= channel < array.shape[1]:
        raise RecordingError(
            path,
            f"channel={channel} is out of range for an array of shape {array.shape}; "
            f"columns are 0..{array.shape[1] - 1}",
        )
    return array[:, channel], str(channel)


def _scalar(source: str, arrays: dict[str, _Array], key: str) -> float | int | None:
    if key not in arrays:
        return None
    value = arrays[key]
    if value.size != 1 or value.dtype.kind not in "iuf":
        raise RecordingError(
            source,
            f"stored {key!r} should be a single number, got dtype {value.dtype} and shape "
            f"{value.shape}; fix the file or pass {key if key != 'fs' else 'fs_hz'} explicitly",
        )
    number: float | int = value.reshape(-1)[0].item()
    return number


def _metadata(arrays: dict[str, _Array]) -> dict[str, object]:
    metadata: dict[str, object] = {}
    for key, value in sorted(arrays.items()):
        if value.ndim != 0:
            continue
        if value.dtype.kind == "S":
            metadata[key] = value.item().decode("utf-8", errors="replace")
        elif value.dtype.kind in "biufU":
            metadata[key] = value.item()
    return metadata
