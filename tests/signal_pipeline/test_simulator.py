from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from faultfleet.types import Float64Array, FloatArray
from signal_pipeline.conditions import BearingCondition, Condition, RotorCondition
from signal_pipeline.machine import MachineProfile
from signal_pipeline.simulator import noise_rms, simulate
from signal_pipeline.spectrum import envelope_spectrum

DEMODULATION_BAND = (1500.0, 5500.0)  # covers the first two housing modes of every machine


def _envelope_lines(
    bearing: BearingCondition, seed: int, fs_hz: float = 12_000.0
) -> tuple[Float64Array, FloatArray, float, dict[str, float]]:
    machine = (
        MachineProfile.nominal()
        if seed == 0
        else MachineProfile.sample(np.random.default_rng(seed))
    )
    sim = simulate(
        Condition(RotorCondition.A1B1O, bearing),
        machine,
        4.0,
        np.random.default_rng(100 + seed),
        fs_hz=fs_hz,
    )
    freqs, spectrum = envelope_spectrum(sim.signal, fs_hz, DEMODULATION_BAND)
    d = sim.defect_frequencies
    named = {"bpfo": d.bpfo_hz, "bpfi": d.bpfi_hz, "ball": d.ball_strike_hz, "shaft": d.shaft_hz}
    return freqs, spectrum, d.shaft_hz, named


def _line(freqs: Float64Array, spectrum: FloatArray, hz: float) -> float:
    """Largest envelope-spectrum value within ±2 % of ``hz``."""
    near = np.abs(freqs - hz) <= 0.02 * hz
    return float(spectrum[near].max())


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_outer_race_envelope_spectrum_peaks_at_bpfo(seed: int) -> None:
    freqs, spectrum, _, named = _envelope_lines(BearingCondition.OUTER_RACE, seed)

    band = (freqs > 5.0) & (freqs < 500.0)
    peak_hz = freqs[band][np.argmax(spectrum[band])]

    assert peak_hz == pytest.approx(named["bpfo"], rel=0.02)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_inner_race_shows_bpfi_with_shaft_rate_sidebands(seed: int) -> None:
    freqs, spectrum, shaft_hz, named = _envelope_lines(BearingCondition.INNER_RACE, seed)
    floor = float(np.median(spectrum[(freqs > 5.0) & (freqs < 500.0)]))

    bpfi = _line(freqs, spectrum, named["bpfi"])
    lower = _line(freqs, spectrum, named["bpfi"] - shaft_hz)
    upper = _line(freqs, spectrum, named["bpfi"] + shaft_hz)

    assert bpfi > 8 * floor
    assert lower > 3 * floor
    assert upper > 3 * floor
    assert bpfi > _line(freqs, spectrum, named["bpfo"])


@pytest.mark.parametrize(
    "bearing", [BearingCondition.SEVERE_BALL_WEAR, BearingCondition.SLIGHT_BALL_WEAR]
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ball_faults_show_twice_the_ball_spin_frequency(
    bearing: BearingCondition, seed: int
) -> None:
    freqs, spectrum, _, named = _envelope_lines(bearing, seed)
    floor = float(np.median(spectrum[(freqs > 5.0) & (freqs < 500.0)]))

    ball = _line(freqs, spectrum, named["ball"])

    assert ball > 5 * floor
    assert ball > _line(freqs, spectrum, named["bpfo"])
    assert ball > _line(freqs, spectrum, named["bpfi"])


def test_healthy_bearing_shows_no_defect_line() -> None:
    freqs, spectrum, _, named = _envelope_lines(BearingCondition.HEALTHY, 0)
    floor = float(np.median(spectrum[(freqs > 5.0) & (freqs < 500.0)]))

    for key in ("bpfo", "bpfi", "ball"):
        assert _line(freqs, spectrum, named[key]) < 5 * floor


@pytest.mark.parametrize("fs_hz", [25_600.0, 48_000.0])
def test_higher_sampling_rates_keep_the_defect_line(fs_hz: float) -> None:
    freqs, spectrum, _, named = _envelope_lines(BearingCondition.OUTER_RACE, 0, fs_hz=fs_hz)

    band = (freqs > 5.0) & (freqs < 500.0)

    assert freqs[band][np.argmax(spectrum[band])] == pytest.approx(named["bpfo"], rel=0.02)


def test_same_seed_gives_the_same_signal_and_another_seed_does_not() -> None:
    condition = Condition.from_label(5)
    machine = MachineProfile.sample(np.random.default_rng(1))

    first = simulate(condition, machine, 0.5, np.random.default_rng(9)).signal
    again = simulate(condition, machine, 0.5, np.random.default_rng(9)).signal
    other = simulate(condition, machine, 0.5, np.random.default_rng(10)).signal

    assert first.dtype == np.float32
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_components_add_up_and_noise_matches_the_snr() -> None:
    machine = MachineProfile.sample(np.random.default_rng(4))
    sim = simulate(
        Condition.from_label(8),
        machine,
        2.0,
        np.random.default_rng(0),
        snr_db=6.0,
        keep_components=True,
    )

    total = sum(c.astype(np.float64) for c in sim.components.values())
    noise = sim.components["noise"].astype(np.float64)

    np.testing.assert_allclose(total, sim.signal, atol=1e-4)
    assert np.sqrt(np.mean(noise**2)) == pytest.approx(
        noise_rms(6.0 + machine.snr_offset_db), rel=1e-3
    )
    assert set(sim.components) == {"rotor", "bearing", "knock", "tones", "noise"}


def test_severity_scales_the_impacts() -> None:
    machine = MachineProfile.nominal()
    condition = Condition.from_label(8)

    def bearing_rms(severity: float) -> float:
        sim = simulate(
            condition,
            machine,
            2.0,
            np.random.default_rng(0),
            severity=severity,
            keep_components=True,
        )
        return float(np.sqrt(np.mean(sim.components["bearing"].astype(np.float64) ** 2)))

    assert bearing_rms(0.5) < bearing_rms(1.0) < bearing_rms(2.0)
    assert bearing_rms(0.0) == 0.0


def test_severe_ball_wear_is_stronger_than_slight_ball_wear() -> None:
    machine = MachineProfile.nominal()

    def bearing_rms(label: int) -> float:
        sim = simulate(
            Condition.from_label(label),
            machine,
            2.0,
            np.random.default_rng(0),
            keep_components=True,
        )
        return float(np.sqrt(np.mean(sim.components["bearing"].astype(np.float64) ** 2)))

    assert bearing_rms(4) > 2 * bearing_rms(0)


def test_speed_follows_the_set_point_with_small_fluctuation() -> None:
    sim = simulate(
        Condition.from_label(0), MachineProfile.nominal(), 3.0, np.random.default_rng(0), rpm=2400.0
    )

    assert sim.rpm == pytest.approx(2400.0, rel=0.01)
    assert sim.rpm != 2400.0
    assert sim.defect_frequencies.bpfo_hz == pytest.approx(sim.rpm / 60 * 3.585, rel=1e-3)


def test_simulation_converts_to_a_labelled_recording() -> None:
    sim = simulate(
        Condition.from_label(10), MachineProfile.nominal(), 0.25, np.random.default_rng(0)
    )

    recording = sim.to_recording(machine_id="m7")

    assert (recording.label, recording.machine_id, recording.fs_hz) == (10, "m7", 12_000.0)
    assert recording.n_samples == 3000
    assert recording.metadata["rotor"] == "A2O"
    assert recording.metadata["bearing"] == "outer-race"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seconds": 0.0}, "seconds must be a positive duration"),
        ({"fs_hz": 500.0}, "fs_hz must be at least"),
        ({"rpm": 10.0}, "rpm must be between"),
        ({"severity": -1.0}, "severity must be a non-negative"),
        ({"snr_db": float("nan")}, "snr_db must be a finite"),
        ({"seconds": 1e-4}, "need at least 16"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, float], message: str) -> None:
    arguments: dict[str, Any] = {"seconds": 1.0} | kwargs
    seconds = arguments.pop("seconds")
    with pytest.raises(ValueError, match=message):
        simulate(
            Condition.from_label(0),
            MachineProfile.nominal(),
            seconds,
            np.random.default_rng(0),
            **arguments,
        )
