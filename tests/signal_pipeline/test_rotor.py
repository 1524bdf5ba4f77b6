from __future__ import annotations

import numpy as np
import pytest

from signal_pipeline.conditions import BearingCondition, Condition, RotorCondition
from signal_pipeline.machine import MachineProfile
from signal_pipeline.rotor import synchronous_response, unbalance_g_mm
from signal_pipeline.simulator import simulate

# Expected order of the 1× amplitude from the trial masses alone: two opposite masses on A
# cancel; one on A and one opposite on B excite only the conical mode, which the sensor
# next to A sees weakly; the same pair aligned excites the cylindrical mode fully; three
# adjacent masses on A add to (1 + 2·cos 30°) ≈ 2.73 masses.
ORDER = (RotorCondition.A2O, RotorCondition.A1B1O, RotorCondition.A1B1A, RotorCondition.A3A)


def test_unbalance_vectors_add_as_the_masses_say() -> None:
    nominal = MachineProfile.nominal()
    one_mass = nominal.trial_mass_g * nominal.trial_radius_mm

    a2o = unbalance_g_mm(RotorCondition.A2O, nominal)
    a3a = unbalance_g_mm(RotorCondition.A3A, nominal)
    a1b1o = unbalance_g_mm(RotorCondition.A1B1O, nominal)

    assert abs(a2o[0]) == pytest.approx(0.0, abs=1e-9)
    assert abs(a3a[0]) == pytest.approx(one_mass * (1 + 2 * np.cos(np.pi / 6)))
    assert a1b1o[0] == pytest.approx(-a1b1o[1])


@pytest.mark.parametrize("seed", range(12))
def test_one_times_amplitude_orders_as_the_masses_say_on_every_machine(seed: int) -> None:
    machine = MachineProfile.sample(np.random.default_rng(seed))
    shaft_hz = machine.rpm / 60

    amplitudes = [abs(synchronous_response(r, machine, shaft_hz)) for r in ORDER]

    assert amplitudes == sorted(amplitudes)
    # Opposite masses on one disk nearly cancel: only the residual unbalance remains, a
    # small fraction of what the same two masses give when aligned.
    assert amplitudes[0] < 0.15 * amplitudes[2]


def test_measured_one_times_amplitude_orders_like_the_physics() -> None:
    machine = MachineProfile.nominal()
    fs_hz, seconds = 12_000.0, 4.0

    measured = []
    for rotor in ORDER:
        sim = simulate(
            Condition(rotor, BearingCondition.HEALTHY),
            machine,
            seconds,
            np.random.default_rng(0),
            fs_hz=fs_hz,
        )
        spectrum = np.abs(np.fft.rfft(sim.signal * np.hanning(sim.signal.size)))
        freqs = np.fft.rfftfreq(sim.signal.size, 1 / fs_hz)
        near = np.abs(freqs - sim.defect_frequencies.shaft_hz) < 0.5
        measured.append(float(spectrum[near].max()))

    assert measured == sorted(measured)
    assert measured[2] > 2 * measured[1]


def test_synchronous_response_grows_with_speed_below_the_critical_speed() -> None:
    machine = MachineProfile.nominal()

    slow = abs(synchronous_response(RotorCondition.A1B1A, machine, 20.0))
    fast = abs(synchronous_response(RotorCondition.A1B1A, machine, 30.0))

    # Force ∝ ω², acceleration ∝ ω² × displacement: at least the fourth power of speed.
    assert fast / slow > (30 / 20) ** 4
