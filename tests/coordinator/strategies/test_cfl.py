"""Tests for coordinator.strategies.cfl, on synthetic fit results (no torch).

The federations are built so the splitting criteria can be checked by hand: within the one
cluster, group a's updates point along +e₁ and group b's along −e₁ (norm 2 > ε₂ = 1.6), so
the sample-weighted mean update is about 0 (< ε₁ = 0.4).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
import pytest

from coordinator.strategies import cfl as cfl_module
from coordinator.strategies.aggregate import weighted_average
from coordinator.strategies.base import StrategyState
from coordinator.strategies.cfl import CFL
from coordinator.strategies.robust import DEFAULT_POLICY, AggregationPolicy, Averaging
from faultfleet.errors import UsageError
from faultfleet.scoring import adjusted_rand_index
from faultfleet.tasks import FitResult
from faultfleet.types import FloatArray

GROUPS = {"a0": 0, "a1": 0, "b0": 1, "b1": 1}
E1 = np.array([1.0, 0.0, 0.0], dtype=np.float32)
E2 = np.array([0.0, 1.0, 0.0], dtype=np.float32)


def factory(j: int) -> FloatArray:
    return np.full(3, float(j), dtype=np.float32)


def make_cfl(clients: Mapping[str, int] = GROUPS, **options: int | float | str) -> CFL:
    strategy = CFL(**{"min_rounds": 3, **options})  # type: ignore[arg-type]
    strategy.initialize(list(clients), factory)
    return strategy


def opposite_updates(
    clients: Mapping[str, int], scale: float = 2.0, common: float = 0.0, seed: int = 0
) -> dict[str, FloatArray]:
    """±scale·e₁ by group, plus ``common``·e₂ for everyone and a little noise."""
    rng = np.random.default_rng(seed)
    return {
        c: np.asarray(
            (scale if g == 0 else -scale) * E1 + common * E2 + rng.normal(0, 0.01, 3),
            dtype=np.float32,
        )
        for c, g in clients.items()
    }


def train_round(
    strategy: CFL,
    server_round: int,
    updates: Mapping[str, FloatArray],
    num_samples: Mapping[str, int] | None = None,
) -> None:
    """Every client in ``updates`` trains its cluster's model by adding its update."""
    instructions = strategy.configure_round(server_round, list(updates), np.random.default_rng(0))
    results = []
    for ins in instructions:
        (key,) = ins.model_keys
        delta = updates[ins.client_id]
        n = 1 if num_samples is None else num_samples[ins.client_id]
        results.append(FitResult(ins.client_id, key, strategy.models[key] + delta, delta, n, 0.0))
    strategy.aggregate_round(server_round, results, [])


def groups_found(strategy: CFL, clients: Mapping[str, int]) -> float:
    labels = strategy.cluster_labels()
    return adjusted_rand_index([clients[c] for c in clients], [labels[c] for c in clients])


def test_starts_as_one_cluster_trained_by_everyone() -> None:
    # Prepare
    strategy = make_cfl()

    # Execute
    instructions = strategy.configure_round(1, list(GROUPS), np.random.default_rng(0))

    # Assert
    assert [ins.client_id for ins in instructions] == list(GROUPS)
    assert all(ins.model_keys == ("cluster-0",) for ins in instructions)
    np.testing.assert_array_equal(strategy.models["cluster-0"], factory(0))


def test_splits_into_the_true_groups_at_min_rounds() -> None:
    # Prepare
    strategy = make_cfl()

    # Execute / Assert: no split in the warm-up rounds 1 and 2
    for server_round in (1, 2):
        train_round(strategy, server_round, opposite_updates(GROUPS, seed=server_round))
        assert strategy.num_clusters == 1
    train_round(strategy, 3, opposite_updates(GROUPS, seed=3))

    # Assert
    assert groups_found(strategy, GROUPS) == 1.0
    assert set(strategy.models) == {"cluster-1", "cluster-2"}
    assert strategy.model_key_for("a0") == "cluster-1"
    assert strategy.last_splits_ == [("cluster-0", "cluster-1", "cluster-2")]
    np.testing.assert_array_equal(strategy.models["cluster-1"], strategy.models["cluster-2"])


def test_model_is_the_weighted_average_and_norms_are_reported() -> None:
    # Prepare: updates [3, 4, 0] (n=1) and [0, 0, 0] (n=3)
    strategy = make_cfl({"a0": 0, "b0": 1})
    updates = {"a0": np.array([3, 4, 0], np.float32), "b0": np.zeros(3, np.float32)}

    # Execute
    train_round(strategy, 1, updates, num_samples={"a0": 1, "b0": 3})

    # Assert: mean update [0.75, 1, 0] has norm 1.25; the largest update has norm 5
    np.testing.assert_allclose(strategy.models["cluster-0"], [0.75, 1.0, 0.0])
    mean_norm, max_norm = strategy.last_norms_["cluster-0"]
    assert mean_norm == pytest.approx(1.25)
    assert max_norm == pytest.approx(5.0)


@pytest.mark.parametrize(
    ("scale", "common", "last_round"),
    [
        pytest.param(2.0, 0.5, 5, id="mean-norm-above-eps1"),
        pytest.param(1.5, 0.0, 5, id="max-norm-below-eps2"),
        pytest.param(2.0, 0.0, 2, id="before-min-rounds"),
    ],
)
def test_no_split_unless_every_criterion_holds(
    scale: float, common: float, last_round: int
) -> None:
    # Prepare
    strategy = make_cfl()

    # Execute
    for server_round in range(1, last_round + 1):
        train_round(strategy, server_round, opposite_updates(GROUPS, scale, common))

    # Assert
    assert strategy.num_clusters == 1
    assert set(strategy.models) == {"cluster-0"}


def test_no_split_of_a_cluster_too_small_to_hold_two() -> None:
    # Prepare: 3 members, but a split needs 2 · min_cluster_size = 4
    clients = {"a0": 0, "a1": 0, "b0": 1}
    strategy = make_cfl(clients, min_rounds=1)

    # Execute
    train_round(strategy, 1, opposite_updates(clients), num_samples={"a0": 1, "a1": 1, "b0": 2})

    # Assert
    assert strategy.last_norms_["cluster-0"][0] < strategy.eps1
    assert strategy.num_clusters == 1


def test_no_split_when_a_member_did_not_answer() -> None:
    # Prepare
    clients = {**GROUPS, "b2": 1}
    strategy = make_cfl(clients, min_rounds=1)

    # Execute: b2 is unavailable; the four that answer would satisfy both criteria
    train_round(strategy, 1, opposite_updates(GROUPS))

    # Assert
    assert strategy.num_clusters == 1
    assert strategy.last_norms_["cluster-0"][1] > strategy.eps2


def test_splits_recursively_into_three_clusters() -> None:
    # Prepare: a (2 clients, 2 samples each) against b ∪ c (4 clients, 1 sample each)
    clients = {"a0": 0, "a1": 0, "b0": 1, "b1": 1, "c0": 2, "c1": 2}
    samples = {c: 2 if g == 0 else 1 for c, g in clients.items()}
    strategy = make_cfl(clients, min_rounds=1, min_cluster_size=1)
    first = opposite_updates({c: min(g, 1) for c, g in clients.items()})

    # Execute: round 1 splits a from b ∪ c; in round 2, b and c pull apart along ±e₂
    train_round(strategy, 1, first, samples)
    pulls = {0: 0.1 * E1, 1: 2 * E2, 2: -2 * E2}
    second = {c: pulls[g] for c, g in clients.items()}
    train_round(strategy, 2, second, samples)

    # Assert
    assert groups_found(strategy, clients) == 1.0
    assert set(strategy.models) == {"cluster-1", "cluster-3", "cluster-4"}
    assert strategy.last_splits_ == [("cluster-2", "cluster-3", "cluster-4")]
    assert strategy.next_cluster_id_ == 5


def test_state_round_trip_continues_identically() -> None:
    # Prepare: split in round 3, then save
    uninterrupted = make_cfl(min_cluster_size=1)
    for server_round in (1, 2, 3):
        train_round(uninterrupted, server_round, opposite_updates(GROUPS, seed=server_round))
    state = uninterrupted.state_dict()
    saved = StrategyState(
        arrays={k: v.copy() for k, v in state.arrays.items()},
        meta=json.loads(json.dumps(state.meta)),
    )

    # Execute: both continue; group b now pulls apart and is split again
    resumed = CFL(min_rounds=3, min_cluster_size=1)
    resumed.load_state_dict(saved)
    updates = {"a0": 0.1 * E1, "a1": 0.1 * E1, "b0": 2 * E2, "b1": -2 * E2}
    for strategy in (uninterrupted, resumed):
        train_round(strategy, 4, updates)

    # Assert
    assert resumed.cluster_labels() == uninterrupted.cluster_labels()
    assert resumed.num_clusters == 3
    assert resumed.next_cluster_id_ == uninterrupted.next_cluster_id_ == 5
    assert list(resumed.models) == list(uninterrupted.models)
    for key, model in uninterrupted.models.items():
        np.testing.assert_array_equal(resumed.models[key], model)


def test_fraction_below_one_raises() -> None:
    # Prepare
    strategy = CFL(fraction=0.5)

    # Execute / Assert
    with pytest.raises(UsageError, match=r"cfl: fraction must be a finite number equal to 1"):
        strategy.initialize(list(GROUPS), factory)


def test_similarity_criterion_splits_two_groups_whatever_the_norms() -> None:
    # Prepare: norms far outside eps1/eps2 (mean 0.5 of the scale 50), yet opposite groups
    strategy = make_cfl(criterion="similarity", eps1=0.4, eps2=1.6)
    big = {c: 25.0 * u for c, u in opposite_updates(GROUPS, common=2.0).items()}

    # Execute
    for server_round in (1, 2, 3):
        train_round(strategy, server_round, big)

    # Assert: split at min_rounds, into the groups; the share is reported
    assert strategy.num_clusters == 2
    assert groups_found(strategy, GROUPS) == pytest.approx(1.0)


def test_similarity_criterion_keeps_one_group_together() -> None:
    # Prepare: four clients of one group, updates along e₁ with noise
    one_group = dict.fromkeys(("a0", "a1", "a2", "a3"), 0)
    strategy = make_cfl(one_group, criterion="similarity")
    updates = opposite_updates(one_group)

    # Execute
    for server_round in (1, 2, 3, 4):
        train_round(strategy, server_round, updates)

    # Assert
    assert strategy.num_clusters == 1
    assert strategy.round_metrics()["cross_share"] > 0.9


def test_result_for_another_cluster_raises() -> None:
    # Prepare
    strategy = make_cfl()
    for server_round in (1, 2, 3):
        train_round(strategy, server_round, opposite_updates(GROUPS, seed=server_round))
    wrong = FitResult("a0", "cluster-2", np.zeros(3, np.float32), np.zeros(3, np.float32), 1, 0.0)

    # Execute / Assert
    with pytest.raises(ValueError, match="its cluster is 'cluster-1'"):
        strategy.aggregate_round(4, [wrong], [])


# -- under sketches: the round streams ------------------------------------------------------

EIGHT = {f"{g}{i}": int(g == "b") for g in "ab" for i in range(4)}


def opposite_updates_wide(seed: int, scale: float = 2.0) -> dict[str, FloatArray]:
    """±scale along the first of 2,000 coordinates by group, with noise: wide enough that the
    sketch (at 8 clients and ε = 0.25) really compresses."""
    rng = np.random.default_rng(seed)
    direction = np.zeros(2000, dtype=np.float32)
    direction[0] = 1.0
    return {
        c: np.asarray(
            (scale if g == 0 else -scale) * direction + rng.normal(0, 0.02, 2000), np.float32
        )
        for c, g in EIGHT.items()
    }


def make_wide(pairwise: str, **options: object) -> CFL:
    strategy = CFL(min_rounds=2, pairwise=pairwise, **options)  # type: ignore[arg-type]
    strategy.initialize(list(EIGHT), lambda j: np.zeros(2000, np.float32))
    return strategy


def test_under_sketches_a_round_streams_and_splits_as_the_list_path_would() -> None:
    # Prepare: the same rounds for a sketched and an exact CFL, no robust rules
    sketched, exact = make_wide("sketch"), make_wide("exact")
    assert sketched.open_stream(1) is not None
    assert exact.open_stream(1) is None

    # Execute
    for server_round in (1, 2):
        for strategy in (sketched, exact):
            train_round(strategy, server_round, opposite_updates_wide(server_round))

    # Assert: the same split, the same models and the same (exact) norms
    assert sketched.comparer_.sketcher is not None
    assert sketched.comparer_.sketcher.dim < 2000
    assert sketched.cluster_labels() == exact.cluster_labels()
    assert groups_found(sketched, EIGHT) == 1.0
    for key, model in exact.models.items():
        np.testing.assert_allclose(sketched.models[key], model, atol=1e-6)
    for key, (mean, largest) in exact.last_norms_.items():
        assert sketched.last_norms_[key] == pytest.approx((mean, largest), rel=1e-6)


@pytest.mark.parametrize("criterion", ["norms", "similarity"])
def test_under_sketches_no_member_by_member_matrix_is_made(
    criterion: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: making the m × m cosine matrix of sketches fails the test
    def refuse(sketches: object) -> None:
        raise AssertionError("the m × m matrix of the sketches was made")

    monkeypatch.setattr(cfl_module, "sketch_cosine_matrix", refuse)
    sketched = make_wide("sketch", criterion=criterion)
    exact = make_wide("exact", criterion=criterion)

    # Execute: the evidence, the bipartition and the share read the sketches themselves
    for server_round in (1, 2):
        for strategy in (sketched, exact):
            train_round(strategy, server_round, opposite_updates_wide(server_round))

    # Assert: the split of the exact cosines, its share within the sketch's error
    assert sketched.last_splits_ == [("cluster-0", "cluster-1", "cluster-2")]
    assert sketched.cluster_labels() == exact.cluster_labels()
    if criterion == "similarity":
        assert sketched.last_shares_["cluster-0"] == pytest.approx(
            exact.last_shares_["cluster-0"], abs=0.05
        )


def test_streamed_norms_are_those_of_the_updates_as_sent_whatever_the_robust_rules() -> None:
    # Prepare: the default robust policy; round 2 has one update 50 times the others'
    sketched = make_wide("sketch")
    sketched.averaging = Averaging(DEFAULT_POLICY)
    train_round(sketched, 1, opposite_updates_wide(1, scale=0.1))
    loud = opposite_updates_wide(2, scale=0.1)
    loud["a0"] = loud["a0"] * 50
    counts = {c: 10 + i for i, c in enumerate(EIGHT)}

    # Execute: the engine's path (open, fold as they arrive, aggregate)
    stream = sketched.open_stream(2)
    assert stream is not None
    model = sketched.models["cluster-0"]
    for client, delta in loud.items():
        stream.add(FitResult(client, "cluster-0", model + delta, delta, counts[client], 0.0))
    sketched.aggregate_stream(2, stream, [])

    # Assert: ε₁ and ε₂ see the updates as sent; the model moved by the clipped mean
    raw_mean = weighted_average(list(loud.values()), list(counts.values()))
    mean_norm, max_norm = sketched.last_norms_["cluster-0"]
    assert mean_norm == pytest.approx(float(np.linalg.norm(raw_mean)), rel=1e-5)
    assert max_norm == pytest.approx(float(np.linalg.norm(loud["a0"])), rel=1e-6)
    moved = float(np.linalg.norm(sketched.models["cluster-0"] - model))
    assert moved < 0.5 * mean_norm
    assert sketched.averaged_.report.norm_clipped == 1


def test_a_split_passes_its_bounds_to_both_halves_and_the_state_keeps_them() -> None:
    strategy = make_wide("sketch")
    strategy.averaging = Averaging(DEFAULT_POLICY)
    for server_round in (1, 2):
        train_round(strategy, server_round, opposite_updates_wide(server_round))
    state = strategy.state_dict()
    resumed = CFL(min_rounds=2, pairwise="sketch")
    resumed.load_state_dict(
        StrategyState(
            {k: v.copy() for k, v in state.arrays.items()}, json.loads(json.dumps(state.meta))
        )
    )

    assert set(strategy.stream_bounds_) == {"cluster-1", "cluster-2"}
    assert strategy.stream_bounds_["cluster-1"] == strategy.stream_bounds_["cluster-2"]
    assert strategy.stream_bounds_["cluster-1"].norm is not None
    assert resumed.stream_bounds_ == strategy.stream_bounds_


def test_a_trimmed_mean_takes_the_list_even_under_sketches() -> None:
    strategy = make_wide("sketch")
    strategy.averaging = Averaging(AggregationPolicy(trim_fraction=0.2))

    train_round(strategy, 1, opposite_updates_wide(1))

    assert strategy.open_stream(2) is None
    assert strategy.averaged_.averages == 1


def test_under_sketches_a_large_round_keeps_sampled_pairs_until_measured_again() -> None:
    # Prepare: 60 clients in two opposite groups, more than 32 partners + 1; a split at
    # round 2 (the similarity criterion), rounds 1 and 2 before it record the whole round
    sixty = {f"{g}{i:02d}": int(g == "b") for g in "ab" for i in range(30)}

    def updates(seed: int) -> dict[str, FloatArray]:
        rng = np.random.default_rng(seed)
        direction = np.zeros(2000, dtype=np.float32)
        direction[0] = 1.0
        return {
            c: np.asarray((2 if g == 0 else -2) * direction + rng.normal(0, 0.02, 2000), np.float32)
            for c, g in sixty.items()
        }

    def run(pairwise: str) -> CFL:
        strategy = CFL(min_rounds=2, pairwise=pairwise, criterion="similarity")
        strategy.initialize(list(sixty), lambda j: np.zeros(2000, np.float32))
        for server_round in (1, 2, 3):
            train_round(strategy, server_round, updates(server_round))
        return strategy

    # Execute
    sketched, exact = run("sketch"), run("exact")

    # Assert: the split found both ways; the evidence of 32 partners a client and a round,
    # accumulated over the two rounds that recorded (a pair of round 1 not drawn again stays)
    assert groups_found(sketched, sixty) == groups_found(exact, sixty) == 1.0
    evidence = sketched.cluster_evidence()
    assert sketched.evidence_.matrix.size == 0
    assert "each client with 32 sampled others" in evidence.measure
    known = evidence.similarity_matrix()
    full = exact.cluster_evidence().similarity_matrix()
    assert known is not None
    assert full is not None
    pairs = ~np.isnan(known)
    assert 60 * 32 < np.count_nonzero(pairs) < 60 * 59
    assert np.count_nonzero(~np.isnan(full)) == 60 * 59
    np.testing.assert_allclose(known[pairs], full[pairs], atol=0.25)  # the JL bound's ε
    restored = CFL(min_rounds=2, pairwise="sketch", criterion="similarity")
    restored.initialize(list(sixty), lambda j: np.zeros(2000, np.float32))
    state = sketched.state_dict()
    restored.load_state_dict(
        StrategyState(
            {k: v.copy() for k, v in state.arrays.items()}, json.loads(json.dumps(state.meta))
        )
    )
    np.testing.assert_array_equal(restored.cluster_evidence().similarity_matrix(), known)
