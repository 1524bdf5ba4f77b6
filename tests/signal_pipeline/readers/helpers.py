"""Small builders shared by the reader tests."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from signal_pipeline.recording import Recording


def names(path: Path | str, problem: str) -> str:
    """A ``match`` pattern: the message names ``path`` and then contains ``problem``."""
    return re.escape(str(path)) + r".*" + problem


def sine_recording(
    n_samples: int = 64,
    fs_hz: float = 1000.0,
    *,
    rpm: float | None = None,
    label: int | None = None,
    metadata: dict[str, object] | None = None,
) -> Recording:
    """A hand-checkable recording: 50 Hz sine of amplitude 0.5, float32."""
    t_s = np.arange(n_samples) / fs_hz
    signal = (0.5 * np.sin(2 * np.pi * 50.0 * t_s)).astype(np.float32)
    return Recording(
        signal=signal,
        fs_hz=fs_hz,
        source="memory",
        rpm=rpm,
        label=label,
        metadata=dict(metadata or {}),
    )
