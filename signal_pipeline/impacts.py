"""Bearing-defect impact trains and the housing resonances they ring.

Follows the phenomenological model of McFadden & Smith ("Model for the vibration produced by
a single point defect in a rolling element bearing", JSV 96, 1984) as extended by Antoni &
Randall ("Differential diagnosis of gear and bearing faults", 2002; the 2011 tutorial §2):

* a localised defect produces one impact each time a rolling element passes it, at the
  characteristic rate (BPFO, BPFI, or 2×BSF for a ball defect, which strikes both races);
* rolling elements slip, so each interval between impacts varies randomly by 1–2 %;
* the impact strength follows the Stribeck load distribution q(θ) = (1 − (1 − cos θ)/(2ε))^1.5
  at the angle θ where it happens: constant for a stationary outer-race defect, modulated at
  shaft rate for an inner-race defect, at cage rate for a ball defect;
* each impact rings the housing's structural resonances (damped oscillators, kHz range).

A larger defect lasts longer under the rolling element: the impact is a half-sine pulse whose
width grows with severity, which moves its energy to lower frequencies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import signal as sps

from faultfleet.types import Float64Array
from signal_pipeline.conditions import BearingCondition
from signal_pipeline.machine import MachineProfile, Mode

REFERENCE_SHAFT_HZ = 30.0
"""Shaft speed at which the impact amplitudes below are specified (1800 rpm)."""


@dataclass(frozen=True)
class DefectModel:
    """How one bearing condition strikes: rate, strength, pulse width and modulation."""

    amplitude: float
    """Peak impact amplitude at the reference speed and nominal load (m/s² per mode gain)."""
    pulse_width_s: float
    """Duration of the half-sine contact pulse at severity 1."""
    load_zone_floor: float
    """Fraction of the strength left outside the load zone (transmission through the cage)."""
    alternate_factor: float = 1.0
    """Relative strength of every second impact (ball defects hit the inner race then)."""


DEFECT_MODELS: dict[BearingCondition, DefectModel] = {
    BearingCondition.SLIGHT_BALL_WEAR: DefectModel(2.7, 0.06e-3, 0.3, 0.6),
    BearingCondition.SEVERE_BALL_WEAR: DefectModel(7.4, 0.35e-3, 0.3, 0.6),
    BearingCondition.OUTER_RACE: DefectModel(5.0, 0.2e-3, 1.0),
    BearingCondition.INNER_RACE: DefectModel(5.9, 0.2e-3, 0.25),
}
"""Impact models per faulty bearing condition; a healthy bearing has none."""


def load_distribution(angle_rad: Float64Array, load_zone: float) -> Float64Array:
    """Stribeck load distribution q(θ) for load distribution factor ε = ``load_zone``."""
    base = 1.0 - (1.0 - np.cos(angle_rad)) / (2.0 * load_zone)
    return np.clip(base, 0.0, None) ** 1.5


def _defect_order(condition: BearingCondition, machine: MachineProfile) -> float:
    geometry = machine.bearing
    if condition is BearingCondition.OUTER_RACE:
        return geometry.bpfo_order
    if condition is BearingCondition.INNER_RACE:
        return geometry.bpfi_order
    return 2.0 * geometry.bsf_order


def _half_sine(width_samples: int) -> Float64Array:
    if width_samples <= 1:
        return np.ones(1)
    return np.sin(np.pi * (np.arange(width_samples) + 0.5) / width_samples)


def bearing_excitation(
    condition: BearingCondition,
    machine: MachineProfile,
    shaft_revolutions: Float64Array,
    fs_hz: float,
    severity: float,
    rng: np.random.Generator,
) -> Float64Array:
    """Force-like impact train of a bearing defect, before the housing resonances.

    Parameters
    ----------
    shaft_revolutions : array of shape (n_samples,)
        Cumulative shaft angle in revolutions at each sample (increasing).
    fs_hz : float
        Sampling rate in Hz.
    severity : float
        Multiplies the impact amplitude; the pulse width grows with its square root.

    Returns
    -------
    array of shape (n_samples,)
        Zero for a healthy bearing.
    """
    n = shaft_revolutions.shape[0]
    model = DEFECT_MODELS.get(condition)
    if model is None or severity == 0.0:
        return np.zeros(n)
    order = _defect_order(condition, machine)
    defect_cycles = order * (shaft_revolutions - shaft_revolutions[0])
    # Slip: every interval between impacts is 1 ± slip defect cycles (a random walk in phase).
    n_max = int(np.ceil(defect_cycles[-1] * 1.2)) + 8
    intervals = np.clip(1.0 + machine.slip * rng.standard_normal(n_max), 0.5, 1.5)
    impact_cycles = rng.uniform(0.0, 1.0) + np.cumsum(intervals) - 1.0
    impact_cycles = impact_cycles[impact_cycles < defect_cycles[-1]]
    positions = np.interp(impact_cycles, defect_cycles, np.arange(n, dtype=np.float64))
    revolutions_at_impact = np.interp(positions, np.arange(n), shaft_revolutions)

    if condition is BearingCondition.OUTER_RACE:
        angle = np.zeros_like(positions)  # defect sits at the centre of the load zone
    elif condition is BearingCondition.INNER_RACE:
        angle = 2.0 * np.pi * revolutions_at_impact + rng.uniform(0.0, 2.0 * np.pi)
    else:  # the defective ball orbits with the cage
        angle = 2.0 * np.pi * machine.bearing.ftf_order * revolutions_at_impact + rng.uniform(
            0.0, 2.0 * np.pi
        )
    modulation = model.load_zone_floor + (1.0 - model.load_zone_floor) * load_distribution(
        angle, machine.load_zone
    )
    alternate = np.where(np.arange(positions.shape[0]) % 2 == 0, 1.0, model.alternate_factor)
    shaft_hz = (shaft_revolutions[-1] - shaft_revolutions[0]) * fs_hz / max(n - 1, 1)
    strength = (
        model.amplitude
        * severity
        * machine.bearing_gain
        * (shaft_hz / REFERENCE_SHAFT_HZ)
        * (0.5 + machine.load)
        / 1.1
    )
    amplitudes = strength * modulation * alternate
    amplitudes *= 1.0 + 0.1 * rng.standard_normal(amplitudes.shape[0])
    train = np.bincount(
        np.minimum(np.rint(positions).astype(np.int64), n - 1), weights=amplitudes, minlength=n
    )
    width = round(float(model.pulse_width_s * np.sqrt(severity) * fs_hz))
    pulses = sps.oaconvolve(train, _half_sine(width))[:n] if width > 1 else train
    return np.asarray(pulses, dtype=np.float64)


def knock_excitation(
    machine: MachineProfile, n_samples: int, fs_hz: float, rng: np.random.Generator
) -> Float64Array:
    """Random knocks unrelated to the bearing (a Poisson process at ``knock_rate_hz``)."""
    count = int(rng.poisson(machine.knock_rate_hz * n_samples / fs_hz))
    positions = rng.integers(0, n_samples, size=count)
    reference = DEFECT_MODELS[BearingCondition.SEVERE_BALL_WEAR].amplitude
    amplitudes = machine.knock_amplitude * reference * rng.lognormal(0.0, 0.5, size=count)
    return np.bincount(positions, weights=amplitudes, minlength=n_samples).astype(np.float64)


def ring_modes(
    excitations: list[tuple[Float64Array, tuple[float, ...]]],
    modes: tuple[Mode, ...],
    fs_hz: float,
) -> Float64Array:
    """Response of the housing's modes to several excitations.

    Each mode is a damped oscillator discretised by impulse invariance, h[k] =
    r^k·sin(k·θ) with r = exp(−ζ·ω_n/fs) and θ = ω_d/fs, so a unit impulse rings with a
    peak near 1. Modes at or above 0.45·fs are removed, as the recorder's anti-alias filter
    would. ``excitations`` pairs each excitation with its per-mode gains.
    """
    n = excitations[0][0].shape[0]
    out = np.zeros(n)
    for index, mode in enumerate(modes):
        if mode.frequency_hz >= 0.45 * fs_hz:
            continue
        drive = sum((gains[index] * x for x, gains in excitations), start=np.zeros(n))
        omega_n = 2.0 * np.pi * mode.frequency_hz
        r = np.exp(-mode.damping_ratio * omega_n / fs_hz)
        theta = omega_n * np.sqrt(1.0 - mode.damping_ratio**2) / fs_hz
        b = [0.0, r * np.sin(theta)]
        a = [1.0, -2.0 * r * np.cos(theta), r * r]
        out += mode.gain * sps.lfilter(b, a, drive)
    return out
