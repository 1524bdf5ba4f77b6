from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from signal_pipeline.federation import Federation
from signal_pipeline.scenarios import MIXED_FAULT_GROUPS, VibrationSettings, mixed_fault


def _small(
    seed: int,
    settings: VibrationSettings | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Federation:
    """Two machines per group, 40-60 windows each."""
    return mixed_fault(
        seed,
        clients_per_group=2,
        windows_per_client=(40, 60),
        settings=settings,
        progress=progress,
    )


@pytest.fixture(scope="module")
def small_mixed_fault() -> Federation:
    return _small(3)


def test_mixed_fault_follows_flacc_section_vi(small_mixed_fault: Federation) -> None:
    federation = small_mixed_fault
    assert len(federation.clients) == 12
    assert federation.n_classes == 12
    assert federation.sample_shape == (1, 1024)
    np.testing.assert_array_equal(federation.groups, np.repeat(np.arange(6), 2))
    for client in federation.clients:
        labels = set(np.unique(client.train.y).tolist())
        assert labels == set(MIXED_FAULT_GROUPS[client.group])
        n = len(client.train) + len(client.test)
        assert 40 <= n <= 60
        # 85/15 train/test, plus an extra validation slice of about 15 %.
        assert len(client.test) / n == pytest.approx(0.15, abs=0.04)
        assert len(client.val) / n == pytest.approx(0.15, abs=0.04)
        assert client.train.x.dtype == np.float32


def test_full_size_mixed_fault_plan_matches_the_paper() -> None:
    federation = mixed_fault(
        0, windows_per_client=(200, 600), settings=VibrationSettings(window_length=16)
    )

    counts = [len(c.train) + len(c.test) for c in federation.clients]
    assert len(federation.clients) == 48
    assert min(counts) >= 200
    assert max(counts) <= 600
    assert len(set(federation.groups.tolist())) == 6


def test_mixed_fault_is_deterministic_per_seed() -> None:
    settings = VibrationSettings(window_length=256)
    first = _small(5, settings)
    again = _small(5, settings)
    other = _small(6, settings)

    np.testing.assert_array_equal(first.clients[4].test.x, again.clients[4].test.x)
    assert not np.array_equal(first.clients[4].train.x[:5], other.clients[4].train.x[:5])


def test_machines_of_one_group_differ_and_spread_zero_makes_them_alike() -> None:
    def band_energy_ratio(spread: float) -> float:
        settings = VibrationSettings(machine_spread=spread, snr_db=20.0)
        federation = _small(1, settings)
        a, b = federation.clients[4], federation.clients[5]  # same group (4, 8)
        spectra = [np.abs(np.fft.rfft(c.train.x[:, 0], axis=-1)).mean(axis=0) for c in (a, b)]
        return float(np.abs(np.log(spectra[0][50:] / spectra[1][50:])).mean())

    assert band_energy_ratio(1.0) > 1.5 * band_energy_ratio(0.0)


def test_progress_is_reported_per_client() -> None:
    calls: list[tuple[int, int]] = []

    _small(0, VibrationSettings(window_length=64), lambda d, t: calls.append((d, t)))

    assert calls == [(i, 12) for i in range(1, 13)]


def test_bad_settings_are_named() -> None:
    with pytest.raises(ValueError, match="test_fraction must be in"):
        VibrationSettings(test_fraction=1.5)
    with pytest.raises(ValueError, match="windows_per_client"):
        mixed_fault(0, windows_per_client=(10, 5))
