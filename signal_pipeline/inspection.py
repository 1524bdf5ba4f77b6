"""Condition indicators of one recording and its strongest envelope-spectrum lines.

Indicators follow common condition-monitoring practice (ISO 13373-2 gives the vocabulary):
RMS, peak, crest factor (peak / RMS) and kurtosis (3 for Gaussian noise; impacts raise it).
Envelope lines are matched to the bearing's defect frequencies, their first harmonics and the
shaft-rate sidebands of BPFI when the shaft speed is known.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy import signal as sps
from scipy import stats

from faultfleet.types import Float64Array
from signal_pipeline.bearing import BearingGeometry, DefectFrequencies
from signal_pipeline.recording import Recording
from signal_pipeline.spectrum import envelope_spectrum

MATCH_TOLERANCE = 0.02
"""Relative distance within which a line counts as a defect frequency (slip is 1–2 %)."""
PEAK_SEPARATION_HZ = 3.0
"""Listed lines are at least this far apart, so one broad peak is listed once."""
SEGMENT_SECONDS = 2.0
"""Envelope spectra are averaged over segments of this length (0.5 Hz resolution)."""


@dataclass(frozen=True)
class EnvelopeLine:
    """One peak of the envelope spectrum."""

    frequency_hz: float
    amplitude: float
    match: str | None
    """Name of the defect frequency it matches (e.g. ``"BPFO"``, ``"2×BSF"``), if any."""


@dataclass(frozen=True)
class Inspection:
    """Summary of a recording, as printed by ``faultfleet signals inspect``."""

    source: str
    fs_hz: float
    duration_s: float
    n_samples: int
    rms: float
    peak: float
    crest_factor: float
    kurtosis: float
    band_hz: tuple[float, float]
    rpm: float | None
    defect_frequencies: dict[str, float] | None
    lines: tuple[EnvelopeLine, ...]

    def as_dict(self) -> dict[str, object]:
        """Plain data for JSON output."""
        return asdict(self)


def default_band(fs_hz: float) -> tuple[float, float]:
    """Demodulation band: 1 kHz up to 0.45·fs (at most 10 kHz), where housing modes ring."""
    high = min(0.45 * fs_hz, 10_000.0)
    low = min(1_000.0, high / 4.0)
    return (low, high)


def reference_lines(freqs: DefectFrequencies) -> dict[str, float]:
    """Named frequencies a line can match, in Hz: harmonics 1–4 of each defect frequency,
    1×–3× shaft speed, the cage frequency and the shaft-rate sidebands of BPFI."""
    named = {"FTF": freqs.ftf_hz, "BSF": freqs.bsf_hz}
    for order in (1, 2, 3):
        named[f"{order}×"] = order * freqs.shaft_hz
    for name, hz in (
        ("BPFO", freqs.bpfo_hz),
        ("BPFI", freqs.bpfi_hz),
        ("2×BSF", freqs.ball_strike_hz),
    ):
        named[name] = hz
        for harmonic in (2, 3, 4):
            named[f"{harmonic}×{name}" if name != "2×BSF" else f"{2 * harmonic}×BSF"] = (
                harmonic * hz
            )
    named["BPFI−1×"] = freqs.bpfi_hz - freqs.shaft_hz
    named["BPFI+1×"] = freqs.bpfi_hz + freqs.shaft_hz
    return named


def _match(frequency_hz: float, named: dict[str, float]) -> str | None:
    best = min(named.items(), key=lambda item: abs(item[1] - frequency_hz))
    return best[0] if abs(best[1] - frequency_hz) <= MATCH_TOLERANCE * best[1] else None


def averaged_envelope_spectrum(
    recording: Recording, band_hz: tuple[float, float]
) -> tuple[Float64Array, Float64Array]:
    """Envelope spectrum averaged over consecutive segments of :data:`SEGMENT_SECONDS`."""
    segment = min(recording.n_samples, int(SEGMENT_SECONDS * recording.fs_hz))
    n_segments = recording.n_samples // segment
    blocks = recording.signal[: n_segments * segment].reshape(n_segments, segment)
    freqs, spectra = envelope_spectrum(blocks, recording.fs_hz, band_hz)
    return freqs, spectra.astype(np.float64).mean(axis=0)


def inspect_recording(
    recording: Recording,
    *,
    bearing: BearingGeometry | None = None,
    band_hz: tuple[float, float] | None = None,
    top: int = 8,
    max_frequency_hz: float = 500.0,
) -> Inspection:
    """Compute indicators and the ``top`` strongest envelope lines below ``max_frequency_hz``.

    Lines are matched to defect frequencies when both ``recording.rpm`` and ``bearing`` are
    known.
    """
    x = recording.signal.astype(np.float64)
    rms = float(np.sqrt(np.mean(x**2)))
    peak = float(np.max(np.abs(x)))
    band = band_hz or default_band(recording.fs_hz)
    freqs, spectrum = averaged_envelope_spectrum(recording, band)
    usable = (freqs >= 2.0) & (freqs <= max_frequency_hz)
    indices = np.flatnonzero(usable)
    resolution_hz = float(freqs[1] - freqs[0])
    separation = max(1, round(PEAK_SEPARATION_HZ / resolution_hz))
    peaks, _ = sps.find_peaks(spectrum[indices], distance=separation)
    strongest = indices[peaks[np.argsort(spectrum[indices][peaks])[::-1][:top]]]
    defect = None
    named: dict[str, float] = {}
    if recording.rpm is not None and bearing is not None:
        defect = bearing.defect_frequencies(recording.rpm / 60.0)
        named = reference_lines(defect)
    lines = tuple(
        EnvelopeLine(
            float(freqs[i]), float(spectrum[i]), _match(float(freqs[i]), named) if named else None
        )
        for i in strongest
    )
    return Inspection(
        source=recording.source,
        fs_hz=recording.fs_hz,
        duration_s=recording.duration_s,
        n_samples=recording.n_samples,
        rms=rms,
        peak=peak,
        crest_factor=peak / rms if rms > 0 else float("nan"),
        kurtosis=float(stats.kurtosis(x, fisher=False)) if rms > 0 else float("nan"),
        band_hz=band,
        rpm=recording.rpm,
        defect_frequencies=defect.as_dict() if defect else None,
        lines=lines,
    )
