"""Tests of FAACL's joining and leaving devices (coordinator.strategies.faacl_clusters, §4.4).

Probes are answered by hand with crafted per-sample losses (``faacl_helpers.probe``).
"""

from __future__ import annotations

import numpy as np
import pytest

from faultfleet.tasks import FitResult
from tests.coordinator.strategies.faacl_helpers import (
    by_group,
    make,
    members,
    probe,
    train_all,
    zeros,
)

# -- joining and leaving ---------------------------------------------------------------------


def test_a_joining_device_waits_until_trained_then_reactivates_the_clustering() -> None:
    # Prepare: a frozen flat federation of two groups
    strategy = make(4, epsilon=0.5)
    train_all(strategy, 1)
    groups = {"c0": 0, "c1": 0, "c2": 1, "c3": 1, "new": 1}
    for server_round in (2, 3):
        probe(strategy, server_round, by_group(groups, strategy))
    assert strategy.frozen

    # Execute: "new" joins
    strategy.add_clients(["new"], zeros)

    # Assert: a singleton on the initial θ, outside the partitions until it trains
    key = strategy.model_key_for("new")
    assert strategy.clusters_[key].members == ["new"]
    assert strategy.clusters_[key].partition is None
    assert not strategy.model_ready("new")
    assert strategy.model_ready("c0")
    assert strategy.training_keys("new") == (key,)
    assert not strategy.frozen
    assert probe(strategy, 4, by_group(groups, strategy)) == []
    train_all(strategy, 4)
    assert strategy.clusters_[key].partition is not None
    assert strategy.model_ready("new")
    probe(strategy, 5, by_group(groups, strategy))
    probe(strategy, 6, by_group(groups, strategy))
    assert members(strategy) == [["c0", "c1"], ["c2", "c3", "new"]]
    assert strategy.frozen


def test_joining_refuses_known_or_repeated_ids() -> None:
    strategy = make(2)
    with pytest.raises(ValueError, match="already registered: c1"):
        strategy.add_clients(["c1"], zeros)
    with pytest.raises(ValueError, match="unique"):
        strategy.add_clients(["x", "x"], zeros)


def test_a_leaving_device_leaves_its_cluster_and_an_empty_cluster_is_deleted() -> None:
    # Prepare: {c0, c1} merged; c2 supports it one-way; c3 alone
    strategy = make(4, epsilon=0.5)
    train_all(strategy, 1)
    groups = {"c0": 0, "c1": 0, "c2": 1, "c3": 2}
    probe(strategy, 2, by_group(groups, strategy))
    merged = strategy.model_key_for("c0")
    supports = {("c0", "cluster-2"), ("c1", "cluster-2")}
    probe(strategy, 3, lambda d, k: 0.0 if (d, k) in supports else by_group(groups, strategy)(d, k))
    assert strategy.supporters(merged) == ["cluster-2"]

    # Execute
    strategy.remove_clients(["c1", "c2"])

    # Assert
    assert strategy.client_ids_ == ("c0", "c3")
    assert members(strategy) == [["c0"], ["c3"]]
    assert "cluster-2" not in strategy.models
    assert strategy.supporters(merged) == []
    assert strategy.cluster_labels() == {"c0": 0, "c3": 1}
    assert not strategy.frozen  # the partition is tested again
    with pytest.raises(KeyError):
        strategy.model_key_for("c1")


def test_leaving_empties_a_partition_and_a_waiting_cluster() -> None:
    # Prepare: hierarchical, c0 and c1 alone in their partitions, c4 never trained
    strategy = make(5, hierarchical=True)
    instructions = strategy.configure_round(1, ["c0", "c1", "c2", "c3"], np.random.default_rng(0))
    results = [
        FitResult(
            i.client_id, i.model_keys[0], np.ones(3, np.float32), np.ones(3, np.float32), 5, 0
        )
        for i in instructions
    ]
    strategy.aggregate_round(1, results, ())
    strategy.configure_probe(2, 0, [], np.random.default_rng(1))  # pairs the four partitions
    assert len(strategy.partitions_) == 2

    # Execute: both clusters of one pair and the waiting one leave
    pair = [
        c
        for c in strategy.client_ids_
        if strategy.clusters_[strategy.model_key_for(c)].partition == min(strategy.partitions_)
    ]
    strategy.remove_clients([*pair, "c4"])

    # Assert
    assert len(strategy.partitions_) == 1
    assert sorted(strategy.client_ids_) == sorted({"c0", "c1", "c2", "c3"} - set(pair))
    assert set(strategy.models) == {strategy.model_key_for(c) for c in strategy.client_ids_}


def test_leaving_refuses_unknown_clients_and_an_empty_federation() -> None:
    strategy = make(2)
    with pytest.raises(ValueError, match="unknown clients: zz"):
        strategy.remove_clients(["zz"])
    with pytest.raises(ValueError, match="cannot remove every client"):
        strategy.remove_clients(["c0", "c1"])
