from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from signal_pipeline.bearing import SKF_6205
from signal_pipeline.conditions import Condition
from signal_pipeline.inspection import default_band, inspect_recording
from signal_pipeline.machine import MachineProfile
from signal_pipeline.recording import Recording
from signal_pipeline.simulator import simulate


def _outer_race_recording() -> Recording:
    sim = simulate(Condition.from_label(8), MachineProfile.nominal(), 6.0, np.random.default_rng(2))
    return sim.to_recording()


def test_indicators_of_a_sine_are_textbook_values() -> None:
    t = np.arange(48_000) / 12_000.0
    recording = Recording(np.sin(2 * np.pi * 50 * t).astype(np.float32), 12_000.0, "sine")

    report = inspect_recording(recording)

    assert report.rms == pytest.approx(1 / np.sqrt(2), rel=1e-4)
    assert report.crest_factor == pytest.approx(np.sqrt(2), rel=1e-3)
    assert report.kurtosis == pytest.approx(1.5, rel=1e-3)
    assert report.duration_s == pytest.approx(4.0)


def test_outer_race_line_is_matched_to_bpfo() -> None:
    report = inspect_recording(_outer_race_recording(), bearing=SKF_6205)

    assert report.lines[0].match == "BPFO"
    assert report.defect_frequencies is not None
    assert report.lines[0].frequency_hz == pytest.approx(
        report.defect_frequencies["bpfo_hz"], rel=0.02
    )
    assert report.kurtosis > 3.0


def test_lines_are_not_matched_without_shaft_speed() -> None:
    recording = dataclasses.replace(_outer_race_recording(), rpm=None)

    report = inspect_recording(recording, bearing=SKF_6205)

    assert report.defect_frequencies is None
    assert all(line.match is None for line in report.lines)
    assert len(report.lines) == 8


@pytest.mark.parametrize(
    ("fs_hz", "band"), [(12_000.0, (1000.0, 5400.0)), (48_000.0, (1000.0, 10_000.0))]
)
def test_default_band_stays_where_housing_modes_ring(
    fs_hz: float, band: tuple[float, float]
) -> None:
    assert default_band(fs_hz) == pytest.approx(band)
