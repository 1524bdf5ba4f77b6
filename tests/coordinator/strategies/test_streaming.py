"""Streaming aggregation against the exact path: plain mean, lagged bounds, privacy."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from coordinator.strategies.aggregate import weighted_average
from coordinator.strategies.robust import AggregateReport, AggregationPolicy, robust_average
from coordinator.strategies.sketch import UpdateSketcher
from coordinator.strategies.streaming import PartialTotal, StreamBounds, UpdateStream, fold_all
from faultfleet.errors import UsageError
from faultfleet.tasks import FitResult

BASE = np.linspace(-1, 1, 50).astype(np.float32)
PLAIN = AggregationPolicy()


def results(seed: int, k: int, scale: float = 0.1) -> list[FitResult]:
    rng = np.random.default_rng(seed)
    return [
        FitResult(
            f"c{i}",
            "global",
            (BASE + scale * rng.standard_normal(50)).astype(np.float32),
            None,
            int(rng.integers(1, 100)),
            0.5,
            base=BASE,
        )
        for i in range(k)
    ]


def stream(policy: AggregationPolicy = PLAIN, bounds: StreamBounds | None = None) -> UpdateStream:
    return UpdateStream(1, {"global": BASE}, policy, {"global": bounds or StreamBounds()})


def test_the_plain_stream_equals_the_weighted_mean_up_to_rounding() -> None:
    updates = results(0, 30)

    streamed = fold_all(stream(), updates).average("global")
    exact = weighted_average([r.weights for r in updates], [r.num_samples for r in updates])

    np.testing.assert_allclose(streamed, exact, rtol=0, atol=1e-6)


def test_lagged_bounds_clip_and_cap_as_the_exact_rules_do_with_those_bounds() -> None:
    # Prepare: last round's medians; this round has one huge update claiming many samples
    updates = results(1, 9)
    loud = FitResult("loud", "global", BASE + 50.0, None, 10_000, 0.5, base=BASE)
    bounds = StreamBounds(norm=0.7, samples=40.0)
    policy = AggregationPolicy(clip_factor=2.0, weight_cap=2.0)

    # Execute
    folded = fold_all(stream(policy, bounds), [*updates, loud])

    # Assert: the loud update is clipped to 2 × 0.7 and weighs 2 × 40
    expected = BASE.astype(np.float64) * 0
    weights = []
    for r in [*updates, loud]:
        delta = r.delta.astype(np.float64)
        norm = float(np.linalg.norm(delta))
        weight = min(float(r.num_samples), 80.0)
        expected += weight * delta * min(1.0, 1.4 / norm)
        weights.append(weight)
    np.testing.assert_allclose(folded.average("global"), BASE + expected / sum(weights), atol=1e-5)
    assert folded.report("global").norm_clipped >= 1
    assert folded.report("global").weight_capped == 1
    assert folded.next_bounds("global").norm == pytest.approx(
        sorted(np.linalg.norm(r.delta) for r in [*updates, loud])[4], rel=1e-5
    )


def test_a_first_round_without_bounds_is_the_plain_mean() -> None:
    updates = results(2, 8)
    policy = AggregationPolicy(clip_factor=2.0, weight_cap=2.0)

    streamed = fold_all(stream(policy), updates).average("global")

    exact = weighted_average([r.weights for r in updates], [r.num_samples for r in updates])
    np.testing.assert_allclose(streamed, exact, atol=1e-6)


def test_privacy_streams_clipped_updates_with_the_exact_paths_noise() -> None:
    updates = results(3, 6, scale=1.0)
    policy = AggregationPolicy(noise_multiplier=1.0, clip_norm=0.5)

    folded = UpdateStream(4, {"global": BASE}, policy, {}, noise_seed=9)
    streamed = fold_all(folded, updates).average("global", index=0)
    exact, _ = robust_average(
        [r.weights for r in updates],
        [r.delta for r in updates],
        [r.num_samples for r in updates],
        policy,
        np.random.default_rng([9, 4, 0]),
    )

    np.testing.assert_allclose(streamed, exact, atol=1e-5)


def test_a_trimmed_mean_cannot_stream() -> None:
    with pytest.raises(UsageError, match="cannot take a trimmed mean"):
        stream(AggregationPolicy(trim_fraction=0.1))


def test_a_second_update_of_a_client_and_an_unknown_model_are_refused() -> None:
    (first,) = results(4, 1)
    folded = stream()
    folded.add(first)

    with pytest.raises(ValueError, match="more than once"):
        folded.add(first)
    with pytest.raises(ValueError, match="unknown model"):
        folded.add(FitResult("c9", "other", BASE, None, 1, 0.0, base=BASE))


def test_updates_folded_from_several_threads_all_count() -> None:
    updates = results(5, 40)
    folded = UpdateStream(1, {"global": BASE}, PLAIN, {}, UpdateSketcher(50, 16, seed=0))
    threads = [threading.Thread(target=fold_all, args=(folded, updates[i::4])) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    exact = weighted_average([r.weights for r in updates], [r.num_samples for r in updates])
    np.testing.assert_allclose(folded.average("global"), exact, atol=1e-6)
    assert {u.client_id for u in folded.updates()} == {r.client_id for r in updates}
    assert all(u.sketch is not None and u.sketch.shape == (17,) for u in folded.updates())


def test_a_retracted_update_leaves_the_fold_of_the_others() -> None:
    # Prepare: clipping and capping on, so the retracted term is a clipped, capped one
    updates = results(4, 8)
    loud = FitResult("loud", "global", BASE + 50.0, None, 10_000, 0.5, base=BASE)
    policy = AggregationPolicy(clip_factor=2.0, weight_cap=2.0)
    bounds = StreamBounds(norm=0.7, samples=40.0)

    # Execute
    with_loud = fold_all(stream(policy, bounds), [*updates, loud])
    with_loud.retract(loud)

    # Assert
    without = fold_all(stream(policy, bounds), updates)
    np.testing.assert_allclose(with_loud.average("global"), without.average("global"), atol=1e-6)
    assert with_loud.report("global") == without.report("global")
    assert [u.client_id for u in with_loud.updates()] == [r.client_id for r in updates]
    with pytest.raises(ValueError, match="no update of 'loud'"):
        with_loud.retract(loud)


# -- the updates' mean as sent (CFL's ε₁) ---------------------------------------------------


def raw_mean_norm(updates: list[FitResult]) -> float:
    mean = weighted_average([r.delta for r in updates], [r.num_samples for r in updates])
    return float(np.linalg.norm(mean.astype(np.float64)))


def test_the_mean_update_norm_is_of_the_updates_as_sent_under_any_rules() -> None:
    # Prepare: one loud update the rules clip and cap, and a retracted one
    updates = results(5, 8)
    loud = FitResult("loud", "global", BASE + 50.0, None, 10_000, 0.5, base=BASE)
    gone = FitResult("gone", "global", BASE - 3.0, None, 7, 0.5, base=BASE)
    policy = AggregationPolicy(clip_factor=2.0, weight_cap=2.0)
    bounds = StreamBounds(norm=0.7, samples=40.0)
    kept = UpdateStream(1, {"global": BASE}, policy, {"global": bounds}, raw_means=True)

    # Execute
    fold_all(kept, [*updates, loud, gone]).retract(gone)

    # Assert: the raw mean's norm, while the average moved by the clipped, capped mean
    expected = raw_mean_norm([*updates, loud])
    assert kept.mean_update_norm("global") == pytest.approx(expected, rel=1e-6)
    moved = float(np.linalg.norm(kept.average("global") - BASE))
    assert moved < 0.1 * expected


def test_without_rules_the_mean_update_norm_needs_no_second_sum() -> None:
    updates = results(6, 8)

    plain = fold_all(stream(), updates)

    assert plain._raw_sums is None
    assert plain.mean_update_norm("global") == pytest.approx(raw_mean_norm(updates), rel=1e-6)


def test_a_stream_without_raw_means_under_rules_refuses_to_guess_them() -> None:
    clipped = fold_all(stream(AggregationPolicy(clip_norm=1.0)), results(7, 3))

    with pytest.raises(ValueError, match="keeps no raw means"):
        clipped.mean_update_norm("global")


def test_partial_sums_cannot_join_a_stream_that_keeps_raw_means() -> None:
    policy = AggregationPolicy(clip_factor=2.0)
    kept = UpdateStream(1, {"global": BASE}, policy, {}, raw_means=True)
    part = PartialTotal(np.zeros(50), 1.0, AggregateReport(1))

    with pytest.raises(ValueError, match="partial sums do not carry"):
        kept.absorb([], {"global": part})
