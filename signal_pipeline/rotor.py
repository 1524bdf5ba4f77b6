"""Rotor unbalance: trial masses on disks A and B and the synchronous (1×) response.

Each standard trial mass m at radius r and angle θ is an unbalance U = m·r·e^{iθ}; the
rotating force on a disk is F = U·ω² (ω the shaft angular speed), so the masses of one disk
add as vectors — two opposite masses cancel up to their manufacturing tolerance (A2O), three
adjacent ones add to (1 + 2·cos Δ)·m·r for hole pitch Δ (A3A). The sensor on the bearing
housing sees the disks' forces through two rigid-rotor modes (cylindrical: disks in phase,
conical: disks in opposite phase), each a single-degree-of-freedom receptance
1 / (M·(ω_m² − ω² + 2iζ·ω_m·ω)); the measured acceleration is −ω² times the displacement
(see e.g. Vance, Zeidan & Murphy, "Machinery Vibration and Rotordynamics", 2010, ch. 2).
"""

from __future__ import annotations

import numpy as np

from faultfleet.types import Float64Array
from signal_pipeline.conditions import RotorCondition
from signal_pipeline.machine import MachineProfile

ADJACENT_HOLE_PITCH_DEG = 30.0
"""Angular pitch of the trial-mass holes on a disk (12 holes), used by A3A."""

TRIAL_MASS_PLACEMENTS: dict[RotorCondition, tuple[tuple[str, float], ...]] = {
    RotorCondition.A1B1O: (("A", 0.0), ("B", 180.0)),
    RotorCondition.A1B1A: (("A", 0.0), ("B", 0.0)),
    RotorCondition.A2O: (("A", 0.0), ("A", 180.0)),
    RotorCondition.A3A: (
        ("A", -ADJACENT_HOLE_PITCH_DEG),
        ("A", 0.0),
        ("A", ADJACENT_HOLE_PITCH_DEG),
    ),
}
"""Disk and angle (degrees) of each standard trial mass, per rotor condition (FLACC §VI)."""


def unbalance_g_mm(rotor: RotorCondition, machine: MachineProfile) -> tuple[complex, complex]:
    """Total unbalance of disks A and B in gram-millimetres, as complex vectors.

    The trial masses of ``rotor`` (each with the machine's manufacturing tolerance) are
    added to the machine's residual unbalance.
    """
    disks = {"A": machine.residual_unbalance_a, "B": machine.residual_unbalance_b}
    for index, (disk, angle_deg) in enumerate(TRIAL_MASS_PLACEMENTS[rotor]):
        mass_g = machine.trial_mass_g * (1.0 + machine.trial_mass_tolerance[index])
        disks[disk] += mass_g * machine.trial_radius_mm * np.exp(1j * np.deg2rad(angle_deg))
    return disks["A"], disks["B"]


def synchronous_response(
    rotor: RotorCondition, machine: MachineProfile, shaft_hz: float
) -> complex:
    """Complex 1× acceleration at the sensor in m/s² (amplitude and phase)."""
    omega = 2.0 * np.pi * shaft_hz
    unbalance_a, unbalance_b = unbalance_g_mm(rotor, machine)
    force_a = unbalance_a * 1e-6 * omega**2  # g·mm → kg·m, then N
    force_b = unbalance_b * 1e-6 * omega**2
    dynamics = machine.rotor
    displacement = 0j
    for mode_hz, mass_kg, shape_b, participation in (
        (dynamics.cylindrical_hz, dynamics.cylindrical_mass_kg, 1.0, 1.0),
        (dynamics.conical_hz, dynamics.conical_mass_kg, -1.0, dynamics.conical_participation),
    ):
        omega_m = 2.0 * np.pi * mode_hz
        receptance = 1.0 / (
            mass_kg * (omega_m**2 - omega**2 + 2j * dynamics.damping_ratio * omega_m * omega)
        )
        displacement += participation * receptance * (force_a + shape_b * force_b)
    return complex(-(omega**2) * displacement * machine.rotor_gain)


def synchronous_vibration(
    rotor: RotorCondition,
    machine: MachineProfile,
    shaft_hz: float,
    shaft_revolutions: Float64Array,
) -> Float64Array:
    """Synchronous vibration (1×, 2×, 3×) in m/s² along a shaft-angle trajectory.

    Parameters
    ----------
    shaft_revolutions : array of shape (n_samples,)
        Cumulative shaft angle in revolutions at each sample.

    The 2× and 3× harmonics model the small non-linearity of the response (fractions of
    the 1× amplitude) plus a fixed 2× from coupling misalignment.
    """
    first = synchronous_response(rotor, machine, shaft_hz)
    amplitude, phase = abs(first), float(np.angle(first))
    angle = 2.0 * np.pi * shaft_revolutions
    second = machine.harmonic_2x * amplitude * np.exp(2j * phase) + machine.misalignment_2x
    out = amplitude * np.cos(angle + phase)
    out += abs(second) * np.cos(2.0 * angle + np.angle(second))
    out += machine.harmonic_3x * amplitude * np.cos(3.0 * angle + 3.0 * phase)
    return out
