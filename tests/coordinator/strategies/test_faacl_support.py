"""Tests for coordinator.strategies.faacl_support: FAACL's tests, bounds, merges, pairing."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import wilcoxon

from coordinator.strategies.faacl_support import (
    Cluster,
    Partition,
    hoeffding_tail,
    merge_clusters,
    mutual_pairs,
    pair_partitions,
    read_losses,
    settle,
    supports_by_mean,
    supports_by_wilcoxon,
    theorem_4_1_delta,
    wilcoxon_p_value,
)
from faultfleet.tasks import GradientResult, LossesResult
from faultfleet.types import Float64Array


def below(n: int, margin: float = 0.5) -> Float64Array:
    """n differences, all below ``margin`` by distinct amounts (no ties)."""
    return margin - 0.1 * np.arange(1, n + 1, dtype=np.float64)


# -- version 1: Wilcoxon signed-rank ---------------------------------------------------------


@pytest.mark.parametrize(("n", "expected"), [(4, 1 / 16), (5, 1 / 32), (10, 1 / 1024)])
def test_all_differences_below_the_margin_give_the_exact_smallest_p_value(
    n: int, expected: float
) -> None:
    # Execute: every d − ε is negative, so W+ = 0 and the exact p-value is 2⁻ⁿ
    p = wilcoxon_p_value(below(n), epsilon=0.5)

    # Assert
    assert p == pytest.approx(expected)


def test_tiny_samples_cannot_reach_the_significance_level() -> None:
    # Four samples cannot go below p = 1/16 > 0.05; five can (1/32)
    assert not supports_by_wilcoxon([below(4)], epsilon=0.5, alpha=0.05)
    assert supports_by_wilcoxon([below(5)], epsilon=0.5, alpha=0.05)


def test_differences_above_the_margin_do_not_support() -> None:
    # Prepare: C2 is worse than C1 by 1 to 2 nats on every sample
    differences = np.linspace(1.0, 2.0, 20)

    # Execute
    p = wilcoxon_p_value(differences, epsilon=0.5)

    # Assert: the null hypothesis ℓ1 + ε < ℓ2 stands
    assert p > 0.99
    assert not supports_by_wilcoxon([differences], epsilon=0.5, alpha=0.05)


def test_the_margin_shifts_the_test() -> None:
    # Prepare: C2 is worse by about 0.3 nats
    rng = np.random.default_rng(0)
    differences = 0.3 + 0.05 * rng.standard_normal(30)

    # Execute / Assert: within a margin of 0.5 it supports, within 0.1 it does not
    assert wilcoxon_p_value(differences, 0.5) < 1e-6
    assert wilcoxon_p_value(differences, 0.1) > 0.99


def test_p_value_is_scipys_one_sided_test_on_the_shifted_differences() -> None:
    # Prepare
    rng = np.random.default_rng(1)
    differences = rng.normal(0.4, 0.5, 80)

    # Execute
    p = wilcoxon_p_value(differences, epsilon=0.5)

    # Assert
    expected = wilcoxon(differences - 0.5, alternative="less", zero_method="zsplit").pvalue
    assert p == pytest.approx(float(expected))


def test_differences_exactly_at_the_margin_are_no_evidence() -> None:
    # Every sample exactly at ε (identical models with ε = 0, say): p = 1, never support
    assert wilcoxon_p_value(np.zeros(20), epsilon=0.0) == 1.0
    assert wilcoxon_p_value(np.full(20, 0.5), epsilon=0.5) == 1.0
    assert wilcoxon_p_value(np.zeros(0), epsilon=0.5) == 1.0


def test_zeros_among_differences_are_split_between_the_ranks() -> None:
    # Prepare: ten samples below the margin, ten exactly on it
    differences = np.concatenate([below(10), np.full(10, 0.5)])

    # Execute
    p_with_zeros = wilcoxon_p_value(differences, 0.5)
    p_without = wilcoxon_p_value(below(10), 0.5)

    # Assert: the ties at the margin weaken the evidence but do not reverse it
    assert p_without < p_with_zeros < 0.05


def test_non_finite_differences_are_refused() -> None:
    with pytest.raises(ValueError, match="finite"):
        wilcoxon_p_value(np.array([0.1, np.inf, 0.2]), 0.5)
    with pytest.raises(ValueError, match="1-d"):
        wilcoxon_p_value(np.zeros((2, 3)), 0.5)


def test_every_member_device_must_pass() -> None:
    # Prepare: two devices clearly pass, one clearly fails
    good, bad = below(12), np.linspace(1.0, 2.0, 12)

    # Execute / Assert
    assert supports_by_wilcoxon([good, good], epsilon=0.5, alpha=0.05)
    assert not supports_by_wilcoxon([good, bad, good], epsilon=0.5, alpha=0.05)
    assert not supports_by_wilcoxon([], epsilon=0.5, alpha=0.05)


# -- version 2: mean difference --------------------------------------------------------------


def test_mean_rule_compares_the_pooled_mean_with_epsilon() -> None:
    assert supports_by_mean([np.array([0.2, 0.4, 0.6])], epsilon=0.5)
    assert supports_by_mean([np.array([0.5, 0.5])], epsilon=0.5)  # at ε: supports
    assert not supports_by_mean([np.array([0.4, 0.7])], epsilon=0.5)
    assert not supports_by_mean([], epsilon=0.5)
    assert not supports_by_mean([np.zeros(0)], epsilon=0.5)


def test_mean_rule_pools_samples_rather_than_averaging_devices() -> None:
    # Prepare: one device with one bad sample, one with nine neutral ones
    per_device = [np.array([2.0]), np.zeros(9)]

    # Execute / Assert: pooled mean 0.2 <= 0.5, although the device means average to 1.0
    assert supports_by_mean(per_device, epsilon=0.5)


# -- Theorem 4.1 -----------------------------------------------------------------------------


def test_hoeffding_tail_values() -> None:
    # exp(−2 (n t)² / (n (b − a)²)) = exp(−2 n t² / (b − a)²)
    assert hoeffding_tail(30, 1.0, 4.0) == pytest.approx(math.exp(-3.75))
    assert hoeffding_tail(100, 0.5, 2.0) == pytest.approx(math.exp(-12.5))
    assert hoeffding_tail(1, 1.0, 1.0) == pytest.approx(math.exp(-2.0))
    assert hoeffding_tail(0, 1.0, 1.0) == 1.0
    assert hoeffding_tail(10, 0.0, 1.0) == 1.0
    assert hoeffding_tail(10, -0.5, 1.0) == 1.0


def test_hoeffding_tail_refuses_an_empty_range() -> None:
    with pytest.raises(ValueError, match="loss_range must be > 0"):
        hoeffding_tail(10, 0.5, 0.0)


def test_theorem_4_1_delta_is_eq_4() -> None:
    # Prepare: m = 4 devices of one distribution among M = 10, n = 50, ε = 0.5, gap = 1.5
    tail_same = math.exp(-2 * 50 * 0.25 / 4.0)
    tail_other = math.exp(-2 * 50 * 1.0 / 4.0)

    # Execute
    delta = theorem_4_1_delta(m=4, big_m=10, n=50, epsilon=0.5, gap=1.5, loss_range=2.0)

    # Assert
    assert delta == pytest.approx(4 * (2 * tail_same + 6 * tail_other))
    assert delta == pytest.approx(8 * math.exp(-6.25) + 24 * math.exp(-25.0))


def test_theorem_4_1_delta_without_other_devices_and_bad_counts() -> None:
    alone = theorem_4_1_delta(m=3, big_m=3, n=20, epsilon=0.4, gap=1.0, loss_range=1.0)
    assert alone == pytest.approx(3 * 2 * math.exp(-2 * 20 * 0.16))
    with pytest.raises(ValueError, match="1 <= m <= M"):
        theorem_4_1_delta(m=5, big_m=3, n=20, epsilon=0.4, gap=1.0, loss_range=1.0)


# -- Algorithm 5: which pairs merge ----------------------------------------------------------


def test_mutual_pairs_merge_each_cluster_at_most_once() -> None:
    # Prepare: a, b, c all mutually supportive; d supports e but not the reverse
    supports = {"a": {"b", "c"}, "b": {"a", "c"}, "c": {"a", "b"}, "d": set(), "e": {"d"}}

    # Execute
    pairs = mutual_pairs(["a", "b", "c", "d", "e"], supports)

    # Assert: a takes b (first in order); c waits; one-way support merges nothing
    assert pairs == [("a", "b")]


def test_mutual_pairs_follow_the_given_order() -> None:
    supports = {"a": {"b", "c"}, "b": {"a", "c"}, "c": {"a", "b"}}
    assert mutual_pairs(["c", "b", "a"], supports) == [("c", "b")]
    assert mutual_pairs(["a", "c", "b"], supports) == [("a", "c")]


def test_mutual_pairs_of_disjoint_groups() -> None:
    supports = {"a": {"c"}, "b": {"d"}, "c": {"a"}, "d": {"b"}}
    assert mutual_pairs(["a", "b", "c", "d"], supports) == [("a", "c"), ("b", "d")]
    assert mutual_pairs(["a", "b"], {}) == []


# -- Algorithm 1: pairing partitions ---------------------------------------------------------


def test_pairing_is_deterministic_for_a_seed_and_covers_every_partition() -> None:
    # Execute
    first = pair_partitions([5, 1, 3, 7, 9], np.random.default_rng(4))
    again = pair_partitions([9, 7, 5, 3, 1], np.random.default_rng(4))

    # Assert: the input order does not matter; an odd partition is left alone, last
    assert first == again
    assert [len(g) for g in first] == [2, 2, 1]
    assert sorted(i for g in first for i in g) == [1, 3, 5, 7, 9]


def test_pairing_depends_on_the_seed() -> None:
    ids = list(range(12))
    draws = {tuple(pair_partitions(ids, np.random.default_rng(seed))) for seed in range(5)}
    assert len(draws) > 1
    assert pair_partitions([], np.random.default_rng(0)) == []
    assert pair_partitions([4], np.random.default_rng(0)) == [(4,)]


# -- reading probe answers -------------------------------------------------------------------


def answer(client: str, n: int, *keys: str) -> LossesResult:
    return LossesResult(client, {k: np.full(n, 0.5, np.float32) for k in keys}, n)


def test_read_losses_returns_float64_per_device_and_model() -> None:
    plan = {"a": ("k0", "k1"), "b": ("k1", "k0")}
    losses = read_losses(plan, [answer("a", 3, "k0", "k1"), answer("b", 0, "k1", "k0")])
    assert list(losses) == ["a"]  # "b" has no validation samples: it abstains
    assert losses["a"]["k1"].dtype == np.float64
    assert losses["a"]["k1"].shape == (3,)


def test_read_losses_refuses_malformed_answers() -> None:
    plan = {"a": ("k0", "k1")}
    with pytest.raises(ValueError, match="unexpected probe answer from 'z'"):
        read_losses(plan, [answer("z", 3, "k0", "k1")])
    with pytest.raises(ValueError, match="unexpected probe answer from 'a'"):
        read_losses(plan, [answer("a", 3, "k0", "k1"), answer("a", 3, "k0", "k1")])
    with pytest.raises(ValueError, match="'a' sent no losses for k1"):
        read_losses(plan, [answer("a", 3, "k0")])
    uneven = LossesResult("a", {"k0": np.zeros(3, np.float32), "k1": np.zeros(4, np.float32)}, 3)
    with pytest.raises(ValueError, match="per-sample vector of the same length"):
        read_losses(plan, [uneven])
    gradient = GradientResult("a", {"k0": 0.1}, {"k0": np.zeros(2, np.float32)}, 4)
    with pytest.raises(TypeError, match="per-sample losses, got GradientResult"):
        read_losses(plan, [gradient])


# -- clusters, merges, stability -------------------------------------------------------------


def test_merge_clusters_unites_members_and_intersects_supports() -> None:
    # Prepare: a ⇄ b; x is supported by a and b, y by a only; a and b share supporter s
    clusters = {
        "a": Cluster(["d3"], {"b", "s", "t"}, 0),
        "b": Cluster(["d1", "d4"], {"a", "s"}, 0),
        "s": Cluster(["d2"], set(), 0),
        "x": Cluster(["d5"], {"a", "b"}, 0),
        "y": Cluster(["d6"], {"a", "s"}, 0),
    }

    # Execute
    merged = merge_clusters(clusters, "a", "b", "ab", lambda d: int(d[1:]))

    # Assert
    assert merged == Cluster(["d1", "d3", "d4"], {"s"}, 0)
    assert clusters["ab"] is merged
    assert set(clusters) == {"ab", "s", "x", "y"}
    assert clusters["x"].supports == {"ab"}
    assert clusters["y"].supports == {"s"}


def test_cluster_json_round_trip() -> None:
    for cluster in (Cluster(["a", "b"], {"k2", "k1"}, 3), Cluster(["c"])):
        key, back = Cluster.from_json(json.loads(json.dumps(cluster.to_json("k9"))))
        assert (key, back) == ("k9", cluster)


@pytest.mark.parametrize(
    ("clusters", "merged", "answered", "changed", "before", "after"),
    [
        (1, True, True, True, 0, (True, 0)),  # one cluster left: nothing to compare
        (3, False, True, False, 2, (True, 0)),  # a quiet round
        (3, False, False, False, 0, (False, 1)),  # nobody answered: undecided
        (3, False, False, False, 1, (True, 0)),  # ... for the second time: patience 2
        (3, True, True, True, 2, (False, 0)),  # a merge is progress
        (3, False, True, True, 0, (False, 1)),  # supports changed
        (3, False, True, True, 1, (True, 0)),  # ... for the second time: patience 2
    ],
)
def test_settle(
    clusters: int,
    merged: bool,
    answered: bool,
    changed: bool,
    before: int,
    after: tuple[bool, int],
) -> None:
    partition = Partition(stable=False, changing_rounds=before)
    settle(
        partition,
        clusters=clusters,
        merged=merged,
        answered=answered,
        changed=changed,
        patience=2,
    )
    assert (partition.stable, partition.changing_rounds) == after


def test_settle_without_patience_waits_for_a_quiet_round() -> None:
    partition = Partition(stable=False, changing_rounds=50)
    settle(partition, clusters=2, merged=False, answered=True, changed=True, patience=None)
    assert (partition.stable, partition.changing_rounds) == (False, 51)
