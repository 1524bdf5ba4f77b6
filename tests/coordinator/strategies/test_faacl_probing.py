"""Tests for coordinator.strategies.faacl_probing: support (Algorithms 3, 4) and merge (5).

Probes are answered by hand with crafted per-sample losses (``faacl_helpers.probe``).
"""

from __future__ import annotations

import numpy as np
import pytest

from faultfleet.tasks import LossesResult
from tests.coordinator.strategies.faacl_helpers import (
    JITTER,
    OWN,
    by_group,
    make,
    members,
    probe,
    train_all,
)

# -- support (Algorithms 3 and 4) ------------------------------------------------------------


def test_probe_asks_every_available_member_for_every_candidate() -> None:
    # Prepare
    strategy = make(3)
    train_all(strategy, 1)

    # Execute
    instructions = strategy.configure_probe(2, 0, ["c0", "c2"], np.random.default_rng(0))

    # Assert: own model first, then the other clusters of the partition
    assert instructions is not None
    assert [(i.client_id, i.model_keys) for i in instructions] == [
        ("c0", ("cluster-0", "cluster-1", "cluster-2")),
        ("c2", ("cluster-2", "cluster-0", "cluster-1")),
    ]
    assert all(i.split == "val" and i.per_sample for i in instructions)


def test_asymmetric_support_without_merge() -> None:
    # Prepare: c1's model is as good as c0's own on c0, c0's model is bad on c1
    strategy = make(2, epsilon=0.5)
    train_all(strategy, 1)
    offsets = {("c0", "cluster-1"): -0.1, ("c1", "cluster-0"): 3.0}

    # Execute
    probe(strategy, 2, lambda d, k: offsets.get((d, k), 0.0))

    # Assert: cluster-1 supports cluster-0, not the reverse; nothing merges
    assert strategy.supporters("cluster-0") == ["cluster-1"]
    assert strategy.supporters("cluster-1") == []
    assert members(strategy) == [["c0"], ["c1"]]
    assert strategy.round_metrics()["support_edges"] == 1.0
    assert not strategy.frozen


@pytest.mark.parametrize("version", [1, 2])
def test_every_answering_member_decides_version_1_and_the_pool_version_2(version: int) -> None:
    # Prepare: c0 and c1 merge first; c2 stays apart
    strategy = make(3, version=version, epsilon=0.5)
    train_all(strategy, 1)
    groups = {"c0": 0, "c1": 0, "c2": 1}
    probe(strategy, 2, by_group(groups, strategy))
    assert members(strategy) == [["c0", "c1"], ["c2"]]
    merged = strategy.model_key_for("c0")

    # Execute: c2's model is fine on c0 (−0.2) but 1.0 worse on c1 (pooled mean 0.4 <= 0.5)
    offsets = {("c0", "cluster-2"): -0.2, ("c1", "cluster-2"): 1.0, ("c2", merged): 5.0}
    probe(strategy, 3, lambda d, k: offsets.get((d, k), 0.0))

    # Assert: version 1 needs every member to pass, version 2 looks at the pooled mean
    expected = [] if version == 1 else ["cluster-2"]
    assert strategy.supporters(merged) == expected


def test_supports_are_recomputed_and_kept_for_silent_clusters() -> None:
    # Prepare: c1 and c2 both support c0 (one-way)
    strategy = make(3, epsilon=0.5)
    train_all(strategy, 1)
    help_c0 = {("c1", "cluster-0"): 4.0, ("c2", "cluster-0"): 4.0, ("c1", "cluster-2"): 4.0}
    help_c0 |= {("c2", "cluster-1"): 4.0}
    probe(strategy, 2, lambda d, k: help_c0.get((d, k), 0.0))
    assert strategy.supporters("cluster-0") == ["cluster-1", "cluster-2"]

    # Execute: c0 is silent: its supports stay; c1 now finds cluster-2 useful
    again = help_c0 | {("c1", "cluster-2"): 0.0, ("c2", "cluster-1"): 4.0}
    asked = probe(strategy, 3, lambda d, k: again.get((d, k), 0.0), silent=["c0"])

    # Assert
    assert asked == ["c0", "c1", "c2"]
    assert strategy.supporters("cluster-0") == ["cluster-1", "cluster-2"]
    assert strategy.supporters("cluster-1") == ["cluster-2"]
    assert strategy.round_metrics()["probe_failures"] == 1.0


def test_version_2_reports_the_hoeffding_bound() -> None:
    # Prepare
    strategy = make(2, version=2, epsilon=0.5, loss_range=2.0)
    train_all(strategy, 1)

    # Execute
    probe(strategy, 2, lambda d, k: 3.0)

    # Assert: eq. 20 with n = 20 pooled samples: 2·exp(−2·20·0.25/4)
    metrics = strategy.round_metrics()
    assert metrics["hoeffding_split_bound"] == pytest.approx(2 * np.exp(-2.5))
    assert metrics["probed_devices"] == 2.0
    assert metrics["probed_models"] == 4.0
    assert metrics["loss_difference_range"] == pytest.approx(np.ptp(JITTER), abs=1e-5)


def test_probe_answers_are_validated() -> None:
    strategy = make(2)
    train_all(strategy, 1)
    with pytest.raises(ValueError, match="none was asked"):
        strategy.aggregate_probe(2, 0, [], [])
    strategy.configure_probe(2, 0, ["c0"], np.random.default_rng(0))
    stranger = LossesResult("c1", {"cluster-0": OWN, "cluster-1": OWN}, 20)
    with pytest.raises(ValueError, match="unexpected probe answer from 'c1'"):
        strategy.aggregate_probe(2, 0, [stranger], [])
    strategy.configure_probe(2, 0, ["c0"], np.random.default_rng(0))
    partial = LossesResult("c0", {"cluster-0": OWN}, 20)
    with pytest.raises(ValueError, match="sent no losses for cluster-1"):
        strategy.aggregate_probe(2, 0, [partial], [])


# -- merge (Algorithm 5) ---------------------------------------------------------------------


def test_merge_unites_members_and_intersects_supports() -> None:
    # Prepare: c0 ⇄ c1 mutually; c2 supports both c0 and c1; c3 supports c0 only.
    strategy = make(4, epsilon=0.5)
    train_all(strategy, 1)
    strategy.models_["cluster-0"] = np.full(3, 1.0, np.float32)
    strategy.models_["cluster-1"] = np.full(3, 2.0, np.float32)
    good = {
        ("c0", "cluster-1"), ("c1", "cluster-0"), ("c0", "cluster-2"), ("c1", "cluster-2"),
        ("c0", "cluster-3"), ("c2", "cluster-0"), ("c3", "cluster-1"),
    }  # fmt: skip
    # cluster-1's model is the better one on the union (−0.1 on c0, 0 on c1)
    better = {("c0", "cluster-1"): -0.1}

    # Execute
    probe(strategy, 2, lambda d, k: better.get((d, k), 0.0 if (d, k) in good else 4.0))

    # Assert: new key, union, C'.sup = {cluster-2}; cluster-3 dropped (supported c0 only)
    assert members(strategy) == [["c0", "c1"], ["c2"], ["c3"]]
    merged = strategy.model_key_for("c0")
    assert merged == "cluster-4"
    assert strategy.supporters(merged) == ["cluster-2"]
    # c2 (supported by c0 only) loses it; c3 was supported by c1 only: dropped too
    assert strategy.supporters("cluster-2") == []
    assert strategy.supporters("cluster-3") == []
    np.testing.assert_array_equal(strategy.models[merged], np.full(3, 2.0, np.float32))
    assert set(strategy.models) == {"cluster-2", "cluster-3", "cluster-4"}
    assert strategy.round_metrics()["merges"] == 1.0


def test_other_clusters_keep_a_merged_cluster_that_supported_them_with_both_halves() -> None:
    # Prepare: c0 ⇄ c1; both support c2 (one-way)
    strategy = make(3, epsilon=0.5)
    train_all(strategy, 1)
    bad = {("c0", "cluster-2"), ("c1", "cluster-2")}

    # Execute
    probe(strategy, 2, lambda d, k: 4.0 if (d, k) in bad else 0.0)

    # Assert: cluster-2 is now supported by the merged cluster; tie → first cluster's model
    merged = strategy.model_key_for("c0")
    assert strategy.supporters("cluster-2") == [merged]
    assert strategy.training_keys("c1") == (merged, "cluster-2")


def test_keys_are_never_reused() -> None:
    strategy = make(4, epsilon=0.5, hierarchical=True)
    train_all(strategy, 1)
    for server_round in range(2, 6):
        probe(strategy, server_round, lambda d, k: 0.0)
    assert members(strategy) == [["c0", "c1", "c2", "c3"]]
    assert strategy.model_key_for("c0") == "cluster-6"  # 4 singletons + 3 merges
    assert strategy.frozen
