"""Robust and differentially private averaging: each rule on small hand-checkable updates."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from coordinator.strategies.aggregate import weighted_average
from coordinator.strategies.fedavg import FedAvg
from coordinator.strategies.keys import GLOBAL
from coordinator.strategies.robust import (
    DEFAULT_POLICY,
    AggregateReport,
    AggregationPolicy,
    Averaging,
    RoundTally,
    clip_scales,
    lower_median,
    robust_average,
)
from faultfleet.errors import UsageError
from faultfleet.tasks import FitResult
from faultfleet.types import FloatArray

BASE = np.array([1.0, -1.0, 0.5], dtype=np.float32)


def updates(
    deltas: Sequence[Sequence[float]], base: FloatArray = BASE
) -> tuple[list[FloatArray], list[FloatArray]]:
    """(weights, deltas) of clients that trained ``base`` into ``base + delta``."""
    d = [np.asarray(x, dtype=np.float32) for x in deltas]
    return [base + x for x in d], d


def test_with_every_rule_off_it_is_exactly_the_weighted_mean() -> None:
    rng = np.random.default_rng(0)
    deltas = rng.normal(size=(5, 3)).tolist()
    weights, d = updates(deltas)
    counts = [3, 10, 1, 7, 7]

    average, report = robust_average(weights, d, counts, AggregationPolicy())

    np.testing.assert_array_equal(average, weighted_average(weights, counts))
    assert report == AggregateReport(updates=5)


def test_the_weight_cap_bounds_a_client_claiming_far_more_data_than_its_peers() -> None:
    weights, d = updates([[1, 0, 0], [1, 0, 0], [0, 0, 9]])
    counts = [10, 20, 10**12]  # lower median 20: the cap is 2 × 20 = 40

    average, report = robust_average(weights, d, counts, AggregationPolicy(weight_cap=2))

    expected = BASE + (10 * d[0] + 20 * d[1] + 40 * d[2]) / 70
    np.testing.assert_allclose(average, expected, rtol=1e-6)
    assert report.weight_capped == 1


def test_adaptive_clipping_scales_an_update_to_the_factor_times_the_median_norm() -> None:
    # norms 1, 2 and 100: lower median 2, bound 3 × 2 = 6
    weights, d = updates([[1, 0, 0], [0, 2, 0], [0, 0, 100]])

    average, report = robust_average(weights, d, [1, 1, 1], AggregationPolicy(clip_factor=3))

    np.testing.assert_allclose(average, BASE + np.array([1, 2, 6]) / 3, rtol=1e-6)
    assert report.norm_clipped == 1


def test_a_fixed_bound_and_an_adaptive_one_apply_the_smaller() -> None:
    norms = np.array([1.0, 2.0, 4.0])

    fixed = clip_scales(norms, AggregationPolicy(clip_norm=1.5))
    both = clip_scales(norms, AggregationPolicy(clip_norm=10.0, clip_factor=1.0))

    np.testing.assert_allclose(fixed, [1.0, 0.75, 0.375])
    np.testing.assert_allclose(both, [1.0, 1.0, 0.5])  # 1 × median 2 < 10


def test_the_lower_median_of_two_is_the_smaller() -> None:
    assert lower_median(np.array([5.0, 1.0])) == 1.0
    assert lower_median(np.array([3.0, 1.0, 2.0])) == 2.0


def test_the_trimmed_mean_of_three_is_the_coordinate_wise_median() -> None:
    weights, d = updates([[1, 5, -9], [2, -4, 0], [30, 0, 1]])

    average, _ = robust_average(weights, d, [1, 1, 1], AggregationPolicy(trim_fraction=0.1))

    np.testing.assert_allclose(average, BASE + np.array([2, 0, 0]), rtol=1e-6)


def test_the_trimmed_mean_keeps_the_weights_of_what_it_keeps() -> None:
    # 4 updates, β = 0.25: one dropped at each end of every coordinate
    weights, d = updates([[0, 0, 0], [1, 1, 1], [3, 3, 3], [100, -100, 7]])
    counts = [5, 1, 3, 2]

    average, _ = robust_average(weights, d, counts, AggregationPolicy(trim_fraction=0.25))

    # coordinate 0 keeps 1 (w 1) and 3 (w 3); coordinate 1 keeps 0 (w 5) and 1 (w 1);
    # coordinate 2 keeps 1 (w 1) and 3 (w 3)
    expected = BASE + np.array([(1 + 9) / 4, 1 / 6, (1 + 9) / 4])
    np.testing.assert_allclose(average, expected, rtol=1e-6)


def test_two_updates_cannot_be_trimmed() -> None:
    weights, d = updates([[1, 1, 1], [3, 3, 3]])

    average, _ = robust_average(weights, d, [1, 1], AggregationPolicy(trim_fraction=0.4))

    np.testing.assert_allclose(average, BASE + 2, rtol=1e-6)


def test_identical_updates_average_to_themselves_under_the_default_policy() -> None:
    weights, d = updates([[0.5, -0.25, 2.0]] * 5)

    average, report = robust_average(weights, d, [10, 20, 30, 40, 50], DEFAULT_POLICY)

    np.testing.assert_allclose(average, weights[0], rtol=1e-6)
    assert report == AggregateReport(updates=5)


def test_a_poisoned_update_moves_the_default_average_about_one_honest_step() -> None:
    # Prepare: 4 honest clients and one sending a constant-class model (a huge bias on one
    # output, the rest zero) with a sample count a million times theirs
    rng = np.random.default_rng(1)
    base = rng.normal(size=200).astype(np.float32)
    honest = [rng.normal(scale=0.1, size=200) for _ in range(4)]
    poisoned = np.zeros(200, dtype=np.float32)
    poisoned[-1] = 1e4
    weights = [base + h.astype(np.float32) for h in honest] + [poisoned]
    deltas = [w - base for w in weights]
    counts = [200, 250, 150, 220, 10**8]

    # Execute
    robust, report = robust_average(weights, deltas, counts, DEFAULT_POLICY)
    plain, _ = robust_average(weights, deltas, counts, AggregationPolicy())
    clean = weighted_average(weights[:4], counts[:4])

    # Assert
    assert report.norm_clipped == 1
    assert report.weight_capped == 1
    assert np.linalg.norm(plain - clean) > 1000
    honest_step = np.median([np.linalg.norm(h) for h in honest])
    assert np.linalg.norm(robust - clean) < 1.5 * honest_step  # about one honest update


def test_differential_privacy_clips_to_c_and_adds_noise_of_sigma_c_over_k() -> None:
    # Prepare: 4 updates of a 20 000-parameter model, two above C = 1
    rng = np.random.default_rng(2)
    size = 20_000
    base = np.zeros(size, dtype=np.float32)
    raw = [rng.normal(size=size) for _ in range(4)]
    deltas = [
        (r / np.linalg.norm(r) * n).astype(np.float32)
        for r, n in zip(raw, [0.5, 0.9, 2, 4], strict=True)
    ]
    policy = AggregationPolicy(noise_multiplier=2.0, clip_norm=1.0)

    # Execute
    average, report = robust_average(
        [base + x for x in deltas], deltas, [1, 1, 1, 10**6], policy, np.random.default_rng(3)
    )

    # Assert: equal weights (the sample counts do not matter), clipped to C = 1
    clipped_mean = (deltas[0] + deltas[1] + deltas[2] / 2 + deltas[3] / 4) / 4
    noise = average - clipped_mean
    assert report.norm_clipped == 2
    assert np.std(noise) == pytest.approx(2.0 * 1.0 / 4, rel=0.03)
    assert abs(np.mean(noise)) < 0.02


def test_private_noise_is_reproducible_from_its_seed_and_fresh_without_one() -> None:
    policy = AggregationPolicy(noise_multiplier=1.0, clip_norm=1.0)
    results = [FitResult("a", "m", BASE + 0.1, np.full(3, 0.1, dtype=np.float32), 5, 0.0)]

    seeded = [Averaging(policy, noise_seed=7).average(results, RoundTally(3))[0] for _ in "ab"]
    next_average = Averaging(policy, noise_seed=7).average(results, RoundTally(3, averages=1))
    fresh = [Averaging(policy).average(results, RoundTally(3))[0] for _ in "ab"]

    np.testing.assert_array_equal(seeded[0], seeded[1])
    assert not np.array_equal(seeded[0], next_average[0])
    assert not np.array_equal(fresh[0], fresh[1])


def test_a_strategy_averages_under_its_policy_and_tallies_the_round() -> None:
    strategy = FedAvg(fraction=1.0)
    strategy.averaging = Averaging(AggregationPolicy(clip_factor=1.0, weight_cap=1.0))
    strategy.initialize(["a", "b", "c"], lambda i: np.zeros(3, dtype=np.float32))
    step = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 50]], dtype=np.float32)
    results = [
        FitResult(c, GLOBAL, s, s, n, 0.0) for c, s, n in zip("abc", step, [1, 1, 9], strict=True)
    ]

    strategy.aggregate_round(4, results, ())

    np.testing.assert_allclose(strategy.models[GLOBAL], [1 / 3, 1 / 3, 1 / 3], rtol=1e-6)
    assert strategy.averaged_ == RoundTally(4, 1, AggregateReport(3, 1, 1))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"clip_factor": -1.0}, "clip_factor must be a finite number >= 0"),
        ({"clip_norm": float("inf")}, "clip_norm must be a finite number >= 0"),
        ({"clip_factor": 0.5}, "clip_factor must be 0 \\(off\\) or >= 1"),
        ({"weight_cap": 0.9}, "weight_cap must be 0 \\(off\\) or >= 1"),
        ({"trim_fraction": 0.5}, "trim_fraction must be below 0.5"),
        ({"noise_multiplier": -0.1}, "noise_multiplier must be a finite number >= 0"),
        ({"noise_multiplier": 1.0}, "noise_multiplier > 0 needs clip_norm > 0"),
        ({"dp_delta": 1.0}, "dp_delta must be in \\(0, 1\\)"),
    ],
)
def test_a_bad_policy_names_the_setting(options: dict[str, float], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        AggregationPolicy(**options)


def test_private_averaging_needs_a_generator() -> None:
    weights, d = updates([[1, 0, 0]])
    policy = AggregationPolicy(noise_multiplier=1.0, clip_norm=1.0)

    with pytest.raises(ValueError, match="needs a generator"):
        robust_average(weights, d, [1], policy)
