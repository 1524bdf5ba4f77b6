"""Reader for MATLAB ``.mat`` recordings, in particular the CWRU bearing data set.

The Case Western Reserve University Bearing Data Center files hold one column vector per
accelerometer, named ``X<nnn>_<sensor>_time`` with ``<nnn>`` the three-digit record
number and ``<sensor>`` one of ``DE`` (drive end), ``FE`` (fan end) or ``BA`` (base), plus
the motor speed as a scalar ``X<nnn>RPM``. The sampling rate is not stored: it is 12 kHz
or 48 kHz depending on the data set, and the caller must pass it.

A few CWRU files hold two records (for example ``X098_*`` and ``X099_*``); then the
caller picks one with ``channel="X099_DE"``. A ``.mat`` file that is not CWRU-like can
still be read when ``channel`` names one of its numeric vector variables.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
from scipy.io import loadmat

from signal_pipeline.readers._common import read_prefix, source_name, to_float32_signal
from signal_pipeline.recording import Recording, RecordingError

SENSORS = ("DE", "FE", "BA")
"""CWRU accelerometer positions: drive end, fan end, base."""

_CHANNEL_VARIABLE = re.compile(r"X(\d{3})_(DE|FE|BA)_time")
_RPM_VARIABLE = re.compile(r"X(\d{3})RPM")
_CHANNEL_REQUEST = re.compile(r"(?:X(\d{3})_)?(DE|FE|BA)(?:_time)?", re.IGNORECASE)
_V73_MARKER = b"MATLAB 7.3"
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def read_mat(
    path: Path,
    *,
    fs_hz: float | None,
    channel: str | int | None,
    rpm: float | None,
    label: int | None,
    machine_id: str | None,
) -> Recording:
    """Read one channel of a MATLAB ``.mat`` file (v4, v6 or v7; not v7.3).

    Parameters
    ----------
    path : Path
        The ``.mat`` file.
    fs_hz : float or None
        Sampling rate in Hz; required, because ``.mat`` files do not store it.
    channel : str or None
        ``"DE"`` (default), ``"FE"`` or ``"BA"`` (any case); ``"X099_DE"`` or
        ``"X099_DE_time"`` to pick one record of a two-record file; or the name of any
        numeric vector variable.
    rpm : float or None
        Shaft speed in rev/min; overrides the file's ``X<nnn>RPM``.
    label, machine_id
        Passed through to the recording.

    Returns
    -------
    Recording
        ``signal`` of shape (n_samples,), float32; ``channel`` is the variable name.
    """
    header = read_prefix(path, 128)
    if _V73_MARKER in header or header.startswith(_HDF5_SIGNATURE):
        raise _v73_error(path)
    variables = _load_variables(path)
    name = _select_variable(path, variables, channel)
    source = source_name(path, name)
    samples = to_float32_signal(
        _as_vector(path, name, variables[name]), source, f"variable {name!r}"
    )
    metadata: dict[str, object] = {}
    match = _CHANNEL_VARIABLE.fullmatch(name)
    if match is not None:
        metadata = {"cwru_record": match.group(1), "cwru_sensor": match.group(2)}
        if rpm is None:
            rpm = _rpm_from_file(path, variables, match.group(1))
    if fs_hz is None:
        raise RecordingError(
            source,
            ".mat files do not store the sampling rate; CWRU files are sampled at 12000 Hz "
            "or 48000 Hz depending on the data set — pass fs_hz (for example fs_hz=12000)",
        )
    return Recording(
        signal=samples,
        fs_hz=fs_hz,
        source=source,
        rpm=rpm,
        label=label,
        machine_id=machine_id,
        channel=name,
        metadata=metadata,
    )


def _v73_error(path: Path) -> RecordingError:
    return RecordingError(
        path,
        "is a MATLAB v7.3 (HDF5) file, which this reader cannot open; re-save it in MATLAB "
        "with save(filename, '-v7') (or read it with h5py and save it as .npz)",
    )


def _load_variables(path: Path) -> dict[str, Any]:
    try:
        raw: dict[str, Any] = loadmat(str(path))
    except NotImplementedError as exc:
        raise _v73_error(path) from exc
    except Exception as exc:
        # scipy's .mat parser raises a wide, undocumented range of exceptions on corrupt
        # input (MatReadError, ValueError, OSError, IndexError, ...); all mean the same.
        raise RecordingError(
            path,
            f"cannot parse it as a MATLAB .mat file ({type(exc).__name__}: {exc}); "
            "the file is corrupt, truncated or not a .mat file",
        ) from exc
    return {key: value for key, value in raw.items() if not key.startswith("__")}


def _describe(variables: dict[str, Any]) -> str:
    if not variables:
        return "(none)"
    return ", ".join(
        f"{name} {getattr(value, 'shape', '?')}" for name, value in sorted(variables.items())
    )


def _select_variable(path: Path, variables: dict[str, Any], channel: str | int | None) -> str:
    if isinstance(channel, int):
        raise RecordingError(
            path,
            f"channel={channel!r}: a .mat channel is a sensor name (DE, FE, BA) or a variable "
            "name, not an integer index",
        )
    if channel is not None and channel in variables:
        return channel
    channels = sorted(name for name in variables if _CHANNEL_VARIABLE.fullmatch(name))
    if not channels:
        wanted = "no channel was given" if channel is None else f"channel {channel!r} is absent"
        raise RecordingError(
            path,
            f"not a CWRU file (no X<nnn>_DE/FE/BA_time variables) and {wanted}; variables "
            f"found: {_describe(variables)}; pass channel='<variable name>' naming a numeric "
            "vector",
        )
    request = _CHANNEL_REQUEST.fullmatch(channel if channel is not None else "DE")
    if request is None:
        raise RecordingError(
            path,
            f"channel {channel!r} is neither a variable in the file nor a CWRU channel "
            f"(DE, FE, BA or e.g. 'X097_DE'); channels present: {', '.join(channels)}",
        )
    record, sensor = request.group(1), request.group(2).upper()
    matches = []
    for name in channels:
        found = _CHANNEL_VARIABLE.fullmatch(name)
        if found is not None and found.group(2) == sensor and record in (None, found.group(1)):
            matches.append(name)
    if not matches:
        wanted = sensor if record is None else f"X{record}_{sensor}"
        raise RecordingError(
            path,
            f"has no {wanted} channel; channels present: {', '.join(channels)}; "
            "pass one of them as channel",
        )
    if len(matches) > 1:
        options = " or ".join(repr(name.removesuffix("_time")) for name in matches)
        raise RecordingError(
            path,
            f"holds several records with a {sensor} channel ({', '.join(matches)}); "
            f"disambiguate with channel={options}",
        )
    return matches[0]


def _as_vector(path: Path, name: str, value: Any) -> np.ndarray[Any, Any]:
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "iuf":
        kind = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
        raise RecordingError(
            path,
            f"variable {name!r} holds {kind}, not numbers; choose a numeric vector variable",
        )
    if value.ndim == 2 and (1 in value.shape or 0 in value.shape):
        return value.reshape(-1)
    if value.ndim != 1:
        raise RecordingError(
            path,
            f"variable {name!r} has shape {value.shape}; expected a vector of shape (n, 1) "
            "or (1, n) — save each channel as its own variable",
        )
    return value


def _rpm_from_file(path: Path, variables: dict[str, Any], record: str) -> float | None:
    """Speed from ``X<record>RPM``, or from the only RPM variable of a one-record file."""
    name = f"X{record}RPM"
    if name not in variables:
        rpm_names = [key for key in variables if _RPM_VARIABLE.fullmatch(key)]
        records = {key[1:4] for key in variables if _CHANNEL_VARIABLE.fullmatch(key)}
        if len(rpm_names) != 1 or len(records) != 1:
            return None
        name = rpm_names[0]
    value = variables[name]
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "iuf" or value.size != 1:
        raise RecordingError(
            path,
            f"variable {name!r} should hold one number (the shaft speed in rev/min), got "
            f"{getattr(value, 'shape', type(value).__name__)}; pass rpm to override it",
        )
    speed = float(value.reshape(-1)[0])
    if not np.isfinite(speed) or speed <= 0:
        raise RecordingError(
            path, f"variable {name!r} holds rpm {speed!r}; pass a positive rpm to override it"
        )
    return speed
