"""Choose the reader or writer for a recording file by its suffix (case-insensitive)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from signal_pipeline.readers._common import check_label, check_positive
from signal_pipeline.readers.arrays import read_npy, read_npz, write_npz
from signal_pipeline.readers.audio import read_wav, write_wav
from signal_pipeline.readers.cwru import read_mat
from signal_pipeline.readers.tabular import read_csv, write_csv
from signal_pipeline.recording import Recording, RecordingError

SUPPORTED_SUFFIXES: tuple[str, ...] = (".mat", ".csv", ".wav", ".npy", ".npz")
"""File suffixes :func:`read_recording` understands (compared case-insensitively)."""

WRITABLE_SUFFIXES: tuple[str, ...] = (".npz", ".wav", ".csv")
"""File suffixes :func:`write_recording` can produce."""

_WRITERS: dict[str, Callable[[Recording, Path], Path]] = {
    ".npz": write_npz,
    ".wav": write_wav,
    ".csv": write_csv,
}


def read_recording(
    path: str | Path,
    *,
    fs_hz: float | None = None,
    channel: str | int | None = None,
    time_column: str | int | None = None,
    rpm: float | None = None,
    label: int | None = None,
    machine_id: str | None = None,
) -> Recording:
    """Read one channel of a recording file, choosing the reader by suffix.

    Parameters
    ----------
    path : str or Path
        File with one of :data:`SUPPORTED_SUFFIXES`.
    fs_hz : float, optional
        Sampling rate in Hz. Required for ``.mat`` and ``.npy``, and for ``.csv``
        without ``time_column``; checked against the rate stored in ``.wav``/``.npz``.
    channel : str or int, optional
        ``.mat``: ``"DE"`` (default), ``"FE"``, ``"BA"``, ``"X099_DE"`` or a variable
        name. ``.csv``: header name or 0-based column. ``.wav``: 0-based channel.
        ``.npy``: 0-based column of a 2-D array. ``.npz``: array name (default
        ``"signal"``).
    time_column : str or int, optional
        ``.csv`` only: column of timestamps in seconds to derive the rate from.
    rpm : float, optional
        Shaft speed in rev/min; overrides a stored speed.
    label : int, optional
        Health-condition label (non-negative); overrides a stored label.
    machine_id : str, optional
        Machine the recording belongs to.

    Returns
    -------
    Recording
        ``signal`` of shape (n_samples,), float32; ``source`` is ``path[channel]``.

    Raises
    ------
    RecordingError
        For an unsupported suffix or any problem with the file or the arguments.
    """
    file_path = Path(path)
    suffix = file_path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise RecordingError(
            file_path,
            f"unsupported file type {file_path.suffix or '(no suffix)'!r}; supported: "
            f"{', '.join(SUPPORTED_SUFFIXES)} — convert the file to one of them",
        )
    checked_fs = check_positive(fs_hz, "fs_hz", file_path)
    checked_rpm = check_positive(rpm, "rpm", file_path)
    checked_label = check_label(label, "label", file_path)
    if suffix == ".csv":
        return read_csv(
            file_path,
            fs_hz=checked_fs,
            channel=channel,
            time_column=time_column,
            rpm=checked_rpm,
            label=checked_label,
            machine_id=machine_id,
        )
    if time_column is not None:
        raise RecordingError(
            file_path,
            f"time_column={time_column!r} applies only to .csv files; omit it for {suffix} files",
        )
    reader = {".mat": read_mat, ".wav": read_wav, ".npy": read_npy, ".npz": read_npz}[suffix]
    return reader(
        file_path,
        fs_hz=checked_fs,
        channel=channel,
        rpm=checked_rpm,
        label=checked_label,
        machine_id=machine_id,
    )


def write_recording(recording: Recording, path: str | Path) -> Path:
    """Write a recording in the format given by the suffix of ``path``.

    ``.npz`` keeps the signal, rate, rpm, label and scalar metadata; ``.wav`` (32-bit
    float, integer rate only) and ``.csv`` (``time_s,acceleration``) keep only the
    signal and rate. Parent folders are created; the file is replaced atomically.

    Parameters
    ----------
    recording : Recording
        What to write.
    path : str or Path
        Destination with one of :data:`WRITABLE_SUFFIXES`.

    Returns
    -------
    Path
        The written file.
    """
    file_path = Path(path)
    writer = _WRITERS.get(file_path.suffix.lower())
    if writer is None:
        raise RecordingError(
            file_path,
            f"cannot write file type {file_path.suffix or '(no suffix)'!r}; writable: "
            f"{', '.join(WRITABLE_SUFFIXES)}",
        )
    return writer(recording, file_path)
