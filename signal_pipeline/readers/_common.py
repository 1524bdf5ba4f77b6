"""Checks and file helpers shared by every reader and writer in this package.

Nothing here knows about a file format: these are the rules every format follows — a
signal is a non-empty 1-D numeric array whose finiteness is checked in its original
dtype before it becomes float32, and explicit arguments are validated before use. Files
are written with :func:`faultfleet.files.atomic_write`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from faultfleet.types import FloatArray
from signal_pipeline.recording import RecordingError

RATE_TOLERANCE = 0.01
"""Relative disagreement between two sampling rates (1 %) above which a reader refuses."""


def source_name(path: Path, channel: str | None) -> str:
    """``Recording.source`` for a file and the channel read from it: ``path[channel]``."""
    return f"{path}[{channel}]" if channel is not None else str(path)


def to_float32_signal(values: npt.NDArray[Any], source: str | Path, what: str) -> FloatArray:
    """Check samples in their original dtype, then convert them to float32.

    Parameters
    ----------
    values : array of shape (n_samples,)
        Samples as stored in the file (any integer or floating dtype).
    source : str or Path
        File (and channel) named in error messages.
    what : str
        Human name of the array ("variable 'X097_DE_time'", "column 'acc'"), for messages.

    Returns
    -------
    array of shape (n_samples,), float32

    Raises
    ------
    RecordingError
        If the array is not numeric, not 1-D, empty, holds NaN/Inf, or holds values
        beyond the float32 range (which would silently become Inf).
    """
    if values.dtype.kind not in "iuf":
        raise RecordingError(
            source,
            f"{what} has dtype {values.dtype}; expected integer or floating-point samples",
        )
    if values.ndim != 1:
        raise RecordingError(
            source,
            f"{what} has shape {values.shape}; expected a 1-D signal — select one channel",
        )
    if values.size == 0:
        raise RecordingError(source, f"{what} is empty (0 samples); nothing to read")
    if values.dtype.kind == "f":
        bad = ~np.isfinite(values)
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            raise RecordingError(
                source,
                f"{what} has {int(bad.sum())} NaN/Inf sample(s), first at index {first}; "
                "repair or trim the recording",
            )
    with np.errstate(over="ignore"):
        samples = values.astype(np.float32)
    overflow = np.isinf(samples)  # finite before, so infinite only by float32 overflow
    if overflow.any():
        first = int(np.flatnonzero(overflow)[0])
        raise RecordingError(
            source,
            f"{what} has a sample of magnitude {float(values[first]):.6g} at index "
            f"{first}, beyond the float32 range; rescale the recording",
        )
    return samples


def check_positive(value: float | None, name: str, source: str | Path) -> float | None:
    """Return ``value`` as a float after checking it is a positive finite number (or None)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise RecordingError(source, f"{name} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise RecordingError(source, f"{name} must be a positive finite number, got {value!r}")
    return number


def check_label(value: object, name: str, source: str | Path) -> int | None:
    """Return ``value`` as an int after checking it is a non-negative integer (or None)."""
    if value is None:
        return None
    if isinstance(value, bool | np.bool_):
        raise RecordingError(source, f"{name} must be a non-negative integer, got {value!r}")
    if isinstance(value, float | np.floating) and float(value).is_integer():
        value = int(value)
    if not isinstance(value, int | np.integer) or int(value) < 0:
        raise RecordingError(source, f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def rates_disagree(first_hz: float, second_hz: float, tolerance: float = RATE_TOLERANCE) -> bool:
    """Whether two sampling rates differ by more than ``tolerance`` relative to the first."""
    return abs(first_hz - second_hz) > tolerance * abs(first_hz)


def read_prefix(path: Path, n_bytes: int) -> bytes:
    """Open ``path`` and return its first ``n_bytes`` bytes (fewer if the file is shorter).

    Every reader calls this first, so a missing or unreadable file gets one clear message
    whatever its format.
    """
    try:
        with path.open("rb") as handle:
            return handle.read(n_bytes)
    except FileNotFoundError as exc:
        raise RecordingError(path, "file does not exist; check the path") from exc
    except IsADirectoryError as exc:
        raise RecordingError(path, "is a folder, not a recording file") from exc
    except OSError as exc:
        raise RecordingError(
            path, f"cannot read the file ({exc.strerror or exc}); check its permissions"
        ) from exc


def read_text(path: Path) -> str:
    """The whole file decoded as UTF-8 (a leading byte-order mark is dropped)."""
    read_prefix(path, 1)
    try:
        return path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise RecordingError(
            path, f"is not UTF-8 text (undecodable byte at offset {exc.start}); save it as UTF-8"
        ) from exc
    except OSError as exc:
        raise RecordingError(path, f"cannot read the file ({exc.strerror or exc})") from exc
