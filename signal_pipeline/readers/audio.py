"""Reader and writer for recordings stored as WAV files.

Data loggers and sound cards often save vibration as WAV. The sampling rate comes from
the header. Integer PCM is scaled to full scale ``[-1, 1)`` (``x / 2**(bits - 1)``; 8-bit
PCM is unsigned and centred on 128), so the recording is in units of the converter's
full scale, not g — calibrate downstream if absolute amplitudes matter. Floating-point
WAV samples are kept as they are.
"""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path
from typing import IO, Any

import numpy as np
from scipy.io import wavfile

from faultfleet.files import atomic_write
from faultfleet.types import Float64Array
from signal_pipeline.readers._common import (
    read_prefix,
    source_name,
    to_float32_signal,
)
from signal_pipeline.recording import Recording, RecordingError

logger = logging.getLogger(__name__)

_BELOW_ONE = np.nextafter(np.float32(1.0), np.float32(0.0))
_INTEGER_RATE_TOLERANCE = 1e-6


def read_wav(
    path: Path,
    *,
    fs_hz: float | None,
    channel: str | int | None,
    rpm: float | None,
    label: int | None,
    machine_id: str | None,
) -> Recording:
    """Read one channel of a WAV file.

    Parameters
    ----------
    path : Path
        The WAV file (PCM 8/16/24/32-bit or IEEE float).
    fs_hz : float or None
        Optional check: must equal the header's rate in Hz.
    channel : int or None
        0-based channel index; required when the file has several channels.
    rpm, label, machine_id
        Passed through to the recording (WAV does not store them).

    Returns
    -------
    Recording
        ``signal`` of shape (n_frames,), float32, in ``[-1, 1)`` for integer PCM.
    """
    read_prefix(path, 12)
    rate_hz, data = _load(path)
    if fs_hz is not None and abs(fs_hz - rate_hz) > _INTEGER_RATE_TOLERANCE * rate_hz:
        raise RecordingError(
            path,
            f"fs_hz={fs_hz:g} disagrees with the {rate_hz} Hz in the WAV header; omit fs_hz "
            "(the header is used) or fix the file",
        )
    n_channels = 1 if data.ndim == 1 else int(data.shape[1])
    index = _channel_index(path, channel, n_channels)
    frames = data if data.ndim == 1 else data[:, 0 if index is None else index]
    chosen = None if index is None else str(index)
    source = source_name(path, chosen)
    what = "the audio data" if chosen is None else f"channel {chosen}"
    if frames.dtype.kind == "f":
        samples = to_float32_signal(frames, source, what)
    else:
        samples = np.minimum(to_float32_signal(_scale_pcm(frames), source, what), _BELOW_ONE)
    return Recording(
        signal=samples,
        fs_hz=float(rate_hz),
        source=source,
        rpm=rpm,
        label=label,
        machine_id=machine_id,
        channel=chosen,
        metadata={"wav_sample_format": str(data.dtype)},
    )


def write_wav(recording: Recording, path: Path) -> Path:
    """Write the signal as a 32-bit float mono WAV at ``round(fs_hz)`` Hz.

    WAV stores only an integer sampling rate and the samples: ``rpm``, ``label``,
    ``machine_id`` and ``metadata`` are not stored. Use ``.npz`` to keep them.

    Raises
    ------
    RecordingError
        If ``fs_hz`` is not an integer number of Hz (within 1e-6 relative).
    """
    rate_hz = round(recording.fs_hz)
    if abs(recording.fs_hz - rate_hz) > _INTEGER_RATE_TOLERANCE * recording.fs_hz:
        raise RecordingError(
            path,
            f"WAV stores an integer sampling rate, but the recording from "
            f"{recording.source!r} is at {recording.fs_hz!r} Hz; resample it or write .npz instead",
        )

    def write(handle: IO[bytes]) -> None:
        wavfile.write(handle, rate_hz, recording.signal.astype(np.float32))

    return atomic_write(path, write)


def _load(path: Path) -> tuple[int, np.ndarray[Any, Any]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            rate_hz, data = wavfile.read(str(path), mmap=False)
        except Exception as exc:
            # scipy.io.wavfile raises ValueError, EOFError, struct.error, ... on bad input.
            raise RecordingError(
                path,
                f"cannot parse it as a WAV file ({type(exc).__name__}: {exc}); the file is "
                "corrupt, truncated or not a WAV file",
            ) from exc
    for warning in caught:
        message = str(warning.message)
        if "EOF" in message:
            raise RecordingError(path, f"is truncated ({message}); re-export or re-copy the file")
        logger.warning("%s: %s", path, message)
    if data.ndim not in (1, 2):
        raise RecordingError(path, f"audio data has unexpected shape {data.shape}")
    return int(rate_hz), data


def _channel_index(path: Path, channel: str | int | None, n_channels: int) -> int | None:
    if channel is None:
        if n_channels > 1:
            raise RecordingError(
                path,
                f"has {n_channels} channels; pass channel as an integer index 0..{n_channels - 1}",
            )
        return None
    if isinstance(channel, str) and re.fullmatch(r"\d+", channel.strip()):
        channel = int(channel)
    if isinstance(channel, bool) or not isinstance(channel, int):
        raise RecordingError(
            path, f"channel={channel!r}: WAV channels are numbered; pass an integer index"
        )
    if not 0 <= channel < n_channels:
        raise RecordingError(
            path,
            f"channel={channel} is out of range: the file has {n_channels} channel(s), "
            f"indices 0..{n_channels - 1}",
        )
    return channel


def _scale_pcm(frames: np.ndarray[Any, Any]) -> Float64Array:
    """Integer PCM to float64 full scale ``[-1, 1)``."""
    half_scale = 2.0 ** (8 * frames.dtype.itemsize - 1)
    scaled: Float64Array = frames.astype(np.float64)
    if frames.dtype.kind == "u":
        scaled -= half_scale
    scaled /= half_scale
    return scaled
