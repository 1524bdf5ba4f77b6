"""Tests for coordinator.strategies.faacl: support, merge, training, hierarchy, join/leave, state.

Most tests drive the strategy by hand with crafted per-sample losses: ``probe`` answers a
probe step with ``BASE + offset(device, key)`` per sample, so a test says how much worse each
model is on each device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from coordinator.engine import RoundEngine
from coordinator.state import load_state, save_state
from coordinator.strategies.base import StrategyState
from coordinator.strategies.faacl import FAACL
from coordinator.strategies.registry import make_strategy
from faultfleet.models.weights import flatten_weights
from faultfleet.simulation.fleet import InProcessFleet
from faultfleet.tasks import Failure, FitResult, LossesResult, TrainConfig
from faultfleet.types import FloatArray
from signal_pipeline.federation import ClientData, Federation
from tests.coordinator.fakes import SyntheticFleet, seeded_factory
from tests.edge_agent.test_training import tiny_cnn, toy_dataset

BASE = np.linspace(0.5, 1.5, 20)
"""Per-sample validation losses of a device's own model (20 samples, no ties)."""
OWN = BASE.astype(np.float32)
JITTER = 0.01 * np.sin(np.arange(20.0))
"""Keeps the differences between two models from being all equal."""

Offset = Callable[[str, str], float]


def zeros(index: int) -> FloatArray:
    return np.zeros(3, dtype=np.float32)


def make(n: int = 4, **options: Any) -> FAACL:
    defaults: dict[str, Any] = {"fraction": 1.0, "hierarchical": False, "init_rounds": 0}
    strategy = FAACL(**{**defaults, **options})
    strategy.initialize([f"c{i}" for i in range(n)], zeros)
    return strategy


def train_all(strategy: FAACL, server_round: int, value: float = 1.0, n: int = 10) -> None:
    """Every client trains every model it is asked to; weights become ``value``."""
    instructions = strategy.configure_round(
        server_round, strategy.client_ids_, np.random.default_rng(0)
    )
    results = [
        FitResult(
            i.client_id,
            i.model_keys[0],
            np.full(3, value, np.float32),
            np.zeros(3, np.float32),
            n,
            0,
        )
        for i in instructions
    ]
    strategy.aggregate_round(server_round, results, ())


def probe(
    strategy: FAACL,
    server_round: int,
    offset: Offset,
    *,
    available: Sequence[str] | None = None,
    silent: Sequence[str] = (),
    seed: int = 0,
) -> list[str]:
    """Run probe step 0; ``silent`` devices fail. Returns the devices asked.

    A device's own model has losses ``BASE``; a candidate ``key`` has
    ``BASE + offset(device, key)`` (plus a small jitter).
    """
    online = strategy.client_ids_ if available is None else available
    rng = np.random.default_rng(seed)
    instructions = strategy.configure_probe(server_round, 0, online, rng) or []
    results, failures = [], []
    for i in instructions:
        if i.client_id in silent:
            failures.append(Failure(i.client_id, "offline"))
            continue
        own, *candidates = i.model_keys
        losses = {own: OWN}
        for k in candidates:
            losses[k] = (BASE + offset(i.client_id, k) + JITTER).astype(np.float32)
        results.append(LossesResult(i.client_id, losses, len(BASE)))
    if instructions:
        strategy.aggregate_probe(server_round, 0, results, failures)
    assert strategy.configure_probe(server_round, 1, online, rng) is None
    return [i.client_id for i in instructions]


def by_group(groups: dict[str, int], strategy: FAACL, worse: float = 5.0) -> Offset:
    """Models of a device's own group cost nothing extra; others cost ``worse`` nats."""

    def offset(device: str, key: str) -> float:
        owners = {groups[m] for m in strategy.clusters_[key].members}
        return 0.0 if owners == {groups[device]} else worse

    return offset


def members(strategy: FAACL) -> list[list[str]]:
    return sorted(sorted(c.members) for c in strategy.clusters_.values())


# -- options ---------------------------------------------------------------------------------


def test_defaults() -> None:
    strategy = FAACL()
    assert FAACL.name == "faacl"
    assert FAACL.probes
    assert (strategy.version, strategy.epsilon, strategy.alpha) == (1, 1.0, 0.05)
    assert strategy.loss_range == 10.0
    assert (strategy.hierarchical, strategy.init_rounds, strategy.patience) == (True, 3, 3)
    assert strategy.fraction == 0.25


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"version": 3}, r"version must be 1 \(Wilcoxon"),
        ({"version": True}, "version must be 1"),
        ({"epsilon": -0.1}, r"epsilon must be a finite number in \[0, ∞\), got -0.1"),
        ({"epsilon": float("nan")}, "epsilon must be a finite number"),
        ({"epsilon": "1"}, "epsilon must be a finite number"),
        ({"alpha": 0.0}, r"alpha must be a finite number in \(0, 1\), got 0.0"),
        ({"alpha": 1.0}, r"alpha must be a finite number in \(0, 1\)"),
        ({"loss_range": 0.0}, r"loss_range must be a finite number in \(0, ∞\)"),
        ({"hierarchical": 1}, "hierarchical must be True or False, got 1"),
        ({"init_rounds": -1}, "init_rounds must be an integer >= 0"),
        ({"init_rounds": 1.5}, "init_rounds must be an integer >= 0"),
        ({"patience": 0}, "patience must be an integer >= 1 .* or None"),
        ({"fraction": 0.0}, r"fraction must be in \(0, 1\]"),
    ],
)
def test_invalid_options_are_refused_by_name(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make(**options)


def test_registry_builds_it_with_options() -> None:
    strategy = make_strategy("faacl", fraction=0.5, options={"version": 2, "epsilon": 0.7})
    assert isinstance(strategy, FAACL)
    assert (strategy.fraction, strategy.version, strategy.epsilon) == (0.5, 2, 0.7)


# -- initialisation (Algorithm 2) ------------------------------------------------------------


def test_initialisation_gives_singletons_on_one_model() -> None:
    # Execute
    strategy = FAACL(init_rounds=2)
    strategy.initialize(["a", "b", "c"], seeded_factory(3))

    # Assert
    assert [strategy.model_key_for(c) for c in "abc"] == ["cluster-0", "cluster-1", "cluster-2"]
    assert strategy.cluster_labels() == {"a": 0, "b": 1, "c": 2}
    for key in strategy.models:
        np.testing.assert_array_equal(strategy.models[key], seeded_factory(3)(0))
    assert strategy.partitions_ == {}  # nobody trained yet
    assert not strategy.frozen


def test_initial_rounds_train_every_available_device_and_do_not_probe() -> None:
    # Prepare
    strategy = FAACL(fraction=0.25, init_rounds=2)
    strategy.initialize([f"c{i}" for i in range(8)], zeros)
    rng = np.random.default_rng(0)
    available = ["c0", "c2", "c3", "c7"]

    # Execute / Assert
    for server_round in (1, 2):
        assert strategy.configure_probe(server_round, 0, available, rng) is None
        instructions = strategy.configure_round(server_round, available, rng)
        assert [(i.client_id, i.model_keys) for i in instructions] == [
            (c, (strategy.model_key_for(c),)) for c in available
        ]
    assert len(strategy.configure_round(3, available, rng)) == 2  # fraction 0.25 of 8


def test_a_cluster_enters_the_clustering_once_trained() -> None:
    # Prepare: hierarchical, c3 offline in round 1
    strategy = make(hierarchical=True)
    rng = np.random.default_rng(0)
    instructions = strategy.configure_round(1, ["c0", "c1", "c2"], rng)
    results = [
        FitResult(
            i.client_id, i.model_keys[0], np.ones(3, np.float32), np.ones(3, np.float32), 5, 0.0
        )
        for i in instructions
    ]

    # Execute
    strategy.aggregate_round(1, results, ())

    # Assert: one singleton partition each for the trained clusters; c3 waits outside
    assert [c.partition for c in strategy.clusters_.values()] == [0, 1, 2, None]
    assert all(p.stable for p in strategy.partitions_.values())
    np.testing.assert_array_equal(strategy.models["cluster-3"], zeros(0))


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


# -- training (Algorithm 6) ------------------------------------------------------------------


def test_training_includes_the_clusters_a_device_supports() -> None:
    # Prepare: cluster-1 supports cluster-0 and cluster-2
    strategy = make(3, epsilon=0.5)
    train_all(strategy, 1)
    useful = {("c0", "cluster-1"): 0.0, ("c2", "cluster-1"): 0.0}
    probe(strategy, 2, lambda d, k: useful.get((d, k), 4.0))

    # Execute
    instructions = strategy.configure_round(2, ["c1", "c2"], np.random.default_rng(0))

    # Assert: one single-model instruction per model, own model first
    assert [(i.client_id, i.model_keys) for i in instructions] == [
        ("c1", ("cluster-1",)),
        ("c1", ("cluster-0",)),
        ("c1", ("cluster-2",)),
        ("c2", ("cluster-2",)),
    ]


def test_each_model_averages_its_members_and_supporters_updates() -> None:
    # Prepare: cluster-1 supports cluster-0
    strategy = make(3, epsilon=0.5)
    train_all(strategy, 1)
    probe(strategy, 2, lambda d, k: 0.0 if (d, k) == ("c0", "cluster-1") else 4.0)
    before = {k: v.copy() for k, v in strategy.models.items()}

    def update(client: str, key: str, value: float, n: int) -> FitResult:
        return FitResult(
            client, key, np.full(3, value, np.float32), np.zeros(3, np.float32), n, 0.0
        )

    results = [update("c0", "cluster-0", 1.0, 10), update("c1", "cluster-1", 2.0, 30)]
    results.append(update("c1", "cluster-0", 3.0, 30))

    # Execute
    strategy.aggregate_round(2, results, ())

    # Assert: (10·1 + 30·3) / 40 = 2.5; cluster-2 got nothing and keeps its model
    np.testing.assert_allclose(strategy.models["cluster-0"], 2.5)
    np.testing.assert_allclose(strategy.models["cluster-1"], 2.0)
    np.testing.assert_array_equal(strategy.models["cluster-2"], before["cluster-2"])


def test_training_a_model_the_device_does_not_serve_is_refused() -> None:
    strategy = make(3)
    train_all(strategy, 1)
    intruding = FitResult("c2", "cluster-0", np.ones(3, np.float32), np.ones(3, np.float32), 5, 0.0)
    with pytest.raises(ValueError, match="neither its cluster's model nor one its cluster"):
        strategy.aggregate_round(2, [intruding], ())


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


# -- state -----------------------------------------------------------------------------------


def test_state_round_trips_clusters_supports_and_partitions() -> None:
    # Prepare: asymmetric support, a merge, a waiting newcomer
    strategy = make(4, epsilon=0.5, hierarchical=True)
    train_all(strategy, 1)
    probe(strategy, 2, lambda d, k: 0.0 if d in ("c0", "c1") else 4.0, seed=1)
    strategy.add_clients(["late"], zeros)
    state = strategy.state_dict()

    # Execute
    restored = FAACL(fraction=1.0, epsilon=0.5, hierarchical=True, init_rounds=0)
    restored.load_state_dict(StrategyState(arrays=dict(state.arrays), meta=state.meta))

    # Assert
    assert restored.client_ids_ == strategy.client_ids_
    assert restored.clusters_ == strategy.clusters_
    assert restored.partitions_ == strategy.partitions_
    assert restored.next_cluster_ == strategy.next_cluster_
    assert restored.round_metrics() == strategy.round_metrics()
    for key, weights in strategy.models.items():
        np.testing.assert_array_equal(restored.models[key], weights)


def test_state_with_mismatched_models_is_refused() -> None:
    strategy = make(2)
    state = strategy.state_dict()
    state.meta["extra"]["clusters"][0]["key"] = "cluster-9"
    with pytest.raises(ValueError, match="clusters and models do not match"):
        make(2).load_state_dict(state)


@pytest.mark.parametrize(
    "options",
    [
        {"hierarchical": False, "version": 2, "init_rounds": 2},
        {"hierarchical": True, "version": 1, "init_rounds": 1},
    ],
    ids=["flat-v2", "hierarchical-v1"],
)
@pytest.mark.parametrize("stop", [2, 4])
def test_resumed_engine_run_equals_uninterrupted(
    options: dict[str, Any], stop: int, tmp_path: Path
) -> None:
    # Prepare: partial participation and two devices offline for the whole run
    groups = [0, 0, 0, 1, 1, 1, 2, 2]

    def engine() -> RoundEngine:
        fleet = SyntheticFleet(groups, offline=["c02", "c05"])
        strategy = FAACL(fraction=0.5, epsilon=1.0, **options)
        return RoundEngine(
            strategy, fleet, model_factory=seeded_factory(), train_config=TrainConfig(), seed=5
        )

    uninterrupted = engine()
    for _ in range(8):
        uninterrupted.run_round()
    first = engine()
    for _ in range(stop):
        first.run_round()
    save_state(tmp_path, first.state())

    # Execute
    resumed = engine()
    resumed.restore(load_state(tmp_path))
    for _ in range(8 - stop):
        resumed.run_round()

    # Assert
    a, b = uninterrupted.strategy, resumed.strategy
    assert isinstance(a, FAACL)
    assert isinstance(b, FAACL)
    assert a.clusters_ == b.clusters_
    assert a.partitions_ == b.partitions_
    assert a.cluster_labels() == b.cluster_labels()
    assert set(a.models) == set(b.models)
    for key, weights in a.models.items():
        np.testing.assert_array_equal(b.models[key], weights)
    labels = a.cluster_labels()
    online = [f"c{i:02d}" for i in range(8) if i not in (2, 5)]
    for x in online:
        for y in online:
            assert (labels[x] == labels[y]) == (groups[int(x[1:])] == groups[int(y[1:])])


# -- end to end on real training -------------------------------------------------------------


def toy_federation() -> Federation:
    """Four machines of the two-bump task; "c" and "d" name the classes the other way round."""

    def machine(name: str, seed: int, flip: bool) -> ClientData:
        return ClientData(
            name,
            int(flip),
            toy_dataset(24, seed, flip=flip),
            toy_dataset(12, 100 + seed, flip=flip),
            toy_dataset(12, 200 + seed, flip=flip),
        )

    clients = tuple(machine(n, i, n in "cd") for i, n in enumerate("abcd"))
    return Federation("toy", clients, 2, ("first-half", "second-half"))


@pytest.mark.parametrize("version", [1, 2])
def test_contradictory_groups_end_in_separate_clusters_on_real_training(version: int) -> None:
    # Prepare: a tiny CNN on four in-process machines, two with swapped labels
    fleet = InProcessFleet(toy_federation(), tiny_cnn(), device=torch.device("cpu"))
    strategy = FAACL(fraction=1.0, version=version, init_rounds=2)
    engine = RoundEngine(
        strategy,
        fleet,
        model_factory=lambda i: flatten_weights(tiny_cnn(i)),
        train_config=TrainConfig("adam", 0.05, 3, 8),
        seed=0,
    )

    # Execute
    reports = [engine.run_round() for _ in range(6)]

    # Assert: same-label machines merged, contradictory ones apart, and the models work
    assert [r.probe_steps for r in reports[:2]] == [0, 0]
    assert members(strategy) == [["a", "b"], ["c", "d"]]
    assert strategy.frozen
    assert strategy.round_metrics()["support_edges"] == 0.0
    assert engine.evaluate().accuracy > 0.9
