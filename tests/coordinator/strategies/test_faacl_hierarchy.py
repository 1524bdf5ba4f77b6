"""Tests of FAACL's progress: flat convergence, patience, hierarchical pairing (Algs. 1, 7).

Probes are answered by hand with crafted per-sample losses (``faacl_helpers.probe``).
"""

from __future__ import annotations

import numpy as np

from tests.coordinator.strategies.faacl_helpers import (
    Offset,
    by_group,
    make,
    members,
    probe,
    train_all,
)

# -- flat and hierarchical progress ----------------------------------------------------------


def test_flat_freezes_after_a_round_without_change() -> None:
    # Prepare: groups {c0, c1} and {c2, c3}
    strategy = make(4, epsilon=0.5)
    train_all(strategy, 1)
    offset = by_group({"c0": 0, "c1": 0, "c2": 1, "c3": 1}, strategy)

    # Execute / Assert: round 2 merges both groups, round 3 changes nothing → frozen
    probe(strategy, 2, offset)
    assert members(strategy) == [["c0", "c1"], ["c2", "c3"]]
    assert not strategy.frozen
    probe(strategy, 3, offset)
    assert strategy.frozen
    assert strategy.round_metrics()["frozen"] == 1.0
    assert strategy.configure_probe(4, 0, strategy.client_ids_, np.random.default_rng(0)) is None


def test_a_partition_nobody_answers_for_is_given_up_after_patience_rounds() -> None:
    # Prepare
    strategy = make(2, patience=3)
    train_all(strategy, 1)

    # Execute / Assert: asked but silent, then offline, then silent again
    probe(strategy, 2, lambda d, k: 0.0, silent=["c0", "c1"])
    assert not strategy.partitions_[0].stable
    assert strategy.configure_probe(3, 0, [], np.random.default_rng(0)) is None
    assert not strategy.frozen
    probe(strategy, 4, lambda d, k: 0.0, silent=["c0", "c1"])
    assert strategy.frozen
    assert members(strategy) == [["c0"], ["c1"]]


def test_patience_ends_flickering_supports() -> None:
    # Prepare: cluster-1's support of cluster-0 appears and disappears every round
    strategy = make(2, epsilon=0.5, patience=2)
    train_all(strategy, 1)

    def flicker(server_round: int) -> Offset:
        gain = 0.0 if server_round % 2 else 4.0
        return lambda d, k: gain if (d, k) == ("c0", "cluster-1") else 4.0

    # Execute / Assert
    probe(strategy, 2, flicker(3))  # support appears: first change
    assert not strategy.frozen
    probe(strategy, 3, flicker(2))  # and goes: second change → stable
    assert strategy.frozen


def test_without_patience_flickering_never_freezes() -> None:
    strategy = make(2, epsilon=0.5, patience=None)
    train_all(strategy, 1)
    for server_round in range(2, 8):
        gain = 4.0 if server_round % 2 else 0.0  # support appears in even rounds

        def offset(device: str, key: str, gain: float = gain) -> float:
            return gain if key == "cluster-1" else 4.0

        probe(strategy, server_round, offset)
        assert strategy.round_metrics()["support_edges"] == float(gain == 0.0)
    assert not strategy.frozen


def test_hierarchical_pairs_partitions_once_all_are_stable() -> None:
    # Prepare: six singletons in two groups
    groups = {f"c{i}": i % 2 for i in range(6)}
    strategy = make(6, hierarchical=True, epsilon=0.5)
    train_all(strategy, 1)
    assert len(strategy.partitions_) == 6

    # Execute: the first probe pairs the six partitions into three
    probe(strategy, 2, by_group(groups, strategy))

    # Assert: candidates only within a pair → each device compared with one other model
    assert len(strategy.partitions_) == 3
    assert strategy.round_metrics()["probed_models"] == 12.0
    for server_round in range(3, 12):
        probe(strategy, server_round, by_group(groups, strategy), seed=server_round)
    assert members(strategy) == [["c0", "c2", "c4"], ["c1", "c3", "c5"]]
    assert strategy.frozen
    assert len(strategy.partitions_) == 1


def test_hierarchical_pairing_is_deterministic_for_a_seed() -> None:
    def partitions_after_pairing(seed: int) -> list[list[str]]:
        strategy = make(8, hierarchical=True)
        train_all(strategy, 1)
        strategy.configure_probe(2, 0, strategy.client_ids_, np.random.default_rng(seed))
        return sorted(
            sorted(m for c in strategy.clusters_.values() if c.partition == p for m in c.members)
            for p in strategy.partitions_
        )

    assert partitions_after_pairing(3) == partitions_after_pairing(3)
    assert len({str(partitions_after_pairing(seed)) for seed in range(6)}) > 1
    assert all(len(p) == 2 for p in partitions_after_pairing(3))


def test_partial_participation_probes_only_available_members() -> None:
    strategy = make(4, epsilon=0.5)
    train_all(strategy, 1)
    asked = probe(strategy, 2, lambda d, k: 0.0, available=["c1", "c3"])
    assert asked == ["c1", "c3"]
    # c1 and c3 support each other and merge; c0, c2 silent keep their (empty) supports
    assert members(strategy) == [["c0"], ["c1", "c3"], ["c2"]]
