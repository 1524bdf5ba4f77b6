from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from signal_pipeline.machine import MachineProfile


def test_zero_spread_gives_the_nominal_rig() -> None:
    assert MachineProfile.sample(np.random.default_rng(3), spread=0.0) == MachineProfile.nominal()


def test_same_seed_same_machine_and_different_seeds_differ() -> None:
    first = MachineProfile.sample(np.random.default_rng(11))
    again = MachineProfile.sample(np.random.default_rng(11))
    other = MachineProfile.sample(np.random.default_rng(12))

    assert first == again
    assert first != other


def test_spread_scales_the_deviation_from_nominal() -> None:
    nominal = MachineProfile.nominal()
    small = MachineProfile.sample(np.random.default_rng(5), spread=0.5)
    large = MachineProfile.sample(np.random.default_rng(5), spread=1.0)

    for name in ("rpm", "load", "snr_offset_db"):
        deviation_small = abs(getattr(small, name) - getattr(nominal, name))
        deviation_large = abs(getattr(large, name) - getattr(nominal, name))
        assert deviation_large == pytest.approx(2 * deviation_small, rel=1e-9, abs=1e-12)
    # Gains spread log-normally: the log deviation doubles.
    assert np.log(large.rotor_gain) == pytest.approx(2 * np.log(small.rotor_gain))


def test_fleet_properties_stay_in_physical_ranges() -> None:
    rng = np.random.default_rng(0)
    fleet = [MachineProfile.sample(rng) for _ in range(200)]

    rpm = np.array([m.rpm for m in fleet])
    assert rpm.min() >= 1800 * 0.95
    assert rpm.max() <= 1800 * 1.05
    assert all(0.01 <= m.slip <= 0.02 for m in fleet)
    assert all(1000 < m.modes[0].frequency_hz < 4000 for m in fleet)
    assert all(m.rotor.conical_hz > 1.3 * m.rpm / 60 for m in fleet)
    # About half the machines carry a gear and about half run on 60 Hz mains.
    assert 60 < sum(m.gear_teeth > 0 for m in fleet) < 140
    assert 60 < sum(m.line_hz == 60.0 for m in fleet) < 140
    # Machines with the same fault must really differ: housing resonances spread widely.
    first_mode = np.array([m.modes[0].frequency_hz for m in fleet])
    assert first_mode.std() / first_mode.mean() > 0.1


def test_negative_spread_is_rejected() -> None:
    with pytest.raises(ValueError, match="spread must be a non-negative number"):
        MachineProfile.sample(np.random.default_rng(0), spread=-1.0)


def test_profile_is_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        MachineProfile.nominal().rpm = 1000.0  # type: ignore[misc]
