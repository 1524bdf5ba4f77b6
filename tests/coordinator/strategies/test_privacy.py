"""The privacy spent by DP-FedAvg, accounted with dp-accounting's RDP accountant."""

from __future__ import annotations

import logging
import math
import sys

import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from coordinator.strategies.privacy import (
    PrivacyReport,
    check_accountant,
    privacy_report,
    privacy_spent,
    sampling_rate,
)
from coordinator.strategies.robust import AggregationPolicy
from faultfleet.errors import UsageError


def exact_gaussian_epsilon(sigma: float, delta: float) -> float:
    """ε of one Gaussian mechanism of sensitivity 1 (Balle & Wang 2018, Theorem 8)."""

    def excess(epsilon: float) -> float:
        a = 1 / (2 * sigma)
        return float(
            norm.cdf(a - epsilon * sigma) - math.exp(epsilon) * norm.cdf(-a - epsilon * sigma)
        )

    return float(brentq(lambda e: excess(e) - delta, 0.0, 100.0))


def test_one_unsampled_round_is_bounded_just_above_the_exact_gaussian_epsilon() -> None:
    exact = exact_gaussian_epsilon(1.0, 1e-5)

    accounted = privacy_spent(1.0, rate=1.0, rounds=1, delta=1e-5)

    assert exact <= accounted <= exact + 1.0  # RDP is an upper bound, and a tight one


def test_more_noise_less_sampling_and_fewer_rounds_spend_less() -> None:
    base = privacy_spent(1.0, 0.5, 40, 1e-5)

    assert privacy_spent(2.0, 0.5, 40, 1e-5) < base
    assert privacy_spent(1.0, 0.1, 40, 1e-5) < base
    assert privacy_spent(1.0, 0.5, 10, 1e-5) < base
    assert privacy_spent(1.0, 0.5, 40, 1e-3) < base
    assert privacy_spent(1.0, 0.5, 0, 1e-5) == 0.0


@pytest.mark.parametrize(
    ("fraction", "clients", "full", "rate"),
    [(0.25, 48, False, 12 / 48), (0.5, 18, False, 0.5), (0.01, 10, False, 0.1), (0.3, 7, True, 1)],
)
def test_the_sampling_rate_is_the_share_the_engine_samples(
    fraction: float, clients: int, full: bool, rate: float
) -> None:
    assert sampling_rate(fraction, clients, full) == pytest.approx(rate)


def test_the_report_of_a_private_policy_and_none_without_privacy() -> None:
    policy = AggregationPolicy(noise_multiplier=1.0, clip_norm=0.5, dp_delta=1e-6)

    report = privacy_report(policy, 0.5, 3)

    assert report == PrivacyReport(
        epsilon=privacy_spent(1.0, 0.5, 3, 1e-6),
        delta=1e-6,
        noise_multiplier=1.0,
        clip_norm=0.5,
        sampling_rate=0.5,
        rounds=3,
    )
    assert privacy_report(AggregationPolicy(clip_norm=0.5), 0.5, 3) is None


def test_an_unbounded_epsilon_is_written_as_null() -> None:
    report = PrivacyReport(math.inf, 1e-5, 0.1, 1.0, 1.0, 10)

    assert report.to_json()["epsilon"] is None


def test_without_dp_accounting_privacy_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "dp_accounting", None)  # import raises ImportError

    with pytest.raises(UsageError, match=r"pip install 'faultfleet\[privacy\]'"):
        check_accountant()


def test_the_accountants_convergence_notes_stay_out_of_the_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # With q = 0.5 and σ = 1 some Rényi orders do not converge; the accountant leaves them out
    level = logging.getLogger("absl").level
    with caplog.at_level(logging.WARNING):
        privacy_spent(1.0, 0.5, 40, 1e-5)

    assert [r for r in caplog.records if r.name == "absl"] == []
    assert logging.getLogger("absl").level == level
