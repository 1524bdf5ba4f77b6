"""FL+HC streaming its rounds under sketches (coordinator.strategies.flhc): the clusters and
heights of the exact path, every cluster starting from the clustering round's global
average, the arrival order not mattering, the medians kept in the state, and a trimmed mean
taking the list.

Two groups of six clients whose updates point along two random directions of a 3,000-
parameter model (the sketch, d = 491 at ε = 0.25 for 12 clients, is shorter), with norms
from 1 to 2 and a little noise of their own.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from coordinator.strategies.base import StrategyState
from coordinator.strategies.flhc import FLHC
from coordinator.strategies.keys import GLOBAL
from coordinator.strategies.robust import DEFAULT_POLICY, AggregationPolicy, Averaging, lower_median
from coordinator.strategies.streaming import StreamBounds
from faultfleet.scoring import adjusted_rand_index
from faultfleet.tasks import FitResult
from faultfleet.types import FloatArray

N_PARAMS = 3000
EPSILON = 0.25
GROUPS = [0] * 6 + [1] * 6
CLIENTS = [f"c{i:02d}" for i in range(len(GROUPS))]
DIRECTIONS = np.random.default_rng(11).normal(size=(2, N_PARAMS)).astype(np.float32)


def model(j: int) -> FloatArray:
    return np.zeros(N_PARAMS, dtype=np.float32)


def make(pairwise: str, n_warmup: int = 0) -> FLHC:
    strategy = FLHC(fraction=1.0, n_warmup=n_warmup, pairwise=pairwise, sketch_epsilon=EPSILON)
    strategy.initialize(CLIENTS, model)
    return strategy


def trained(strategy: FLHC, server_round: int) -> list[FitResult]:
    """Every client trains the model it is given: its group's direction, its own norm
    (1 to 2) and noise, and its own sample count."""
    results = []
    for i, (client, group) in enumerate(zip(CLIENTS, GROUPS, strict=True)):
        (key,) = strategy.fit_models(server_round, client)
        rng = np.random.default_rng([server_round, i])
        direction = DIRECTIONS[group] / np.linalg.norm(DIRECTIONS[group])
        noise = rng.normal(0, 0.2 / np.sqrt(N_PARAMS), N_PARAMS).astype(np.float32)
        delta = ((1 + i / len(CLIENTS)) * direction + noise).astype(np.float32)
        base = strategy.models[key]
        results.append(FitResult(client, key, base + delta, None, 10 + 3 * i, 0.5, base=base))
    return results


def test_streamed_clustering_finds_the_exact_clusters_and_heights() -> None:
    # Prepare / Execute: the same clustering round, exact and streamed
    exact, streamed = make("exact"), make("sketch")
    results = trained(exact, 1)
    exact.aggregate_round(1, results, [])
    streamed.aggregate_round(1, results, [])

    # Assert: the true groups both times, dendrogram heights within ε of the exact ones
    assert streamed.comparer_.sketcher is not None
    labels = [streamed.cluster_labels()[c] for c in CLIENTS]
    assert adjusted_rand_index(GROUPS, labels) == 1
    assert adjusted_rand_index(GROUPS, [exact.cluster_labels()[c] for c in CLIENTS]) == 1
    assert exact.last_heights_ is not None
    assert streamed.last_heights_ is not None
    # the merge of the two groups is in the units of the updates' norms (about 2 apart)
    top_exact, top_streamed = exact.last_heights_.max(), streamed.last_heights_.max()
    assert top_exact > 1.0
    assert abs(top_streamed - top_exact) <= EPSILON * top_exact


def test_streamed_clusters_start_from_the_rounds_global_average() -> None:
    # Prepare
    strategy = make("sketch")
    results = trained(strategy, 1)

    # Execute
    strategy.aggregate_round(1, results, [])

    # Assert: both clusters hold the sample-weighted mean of every update, no global model
    counts = np.array([r.num_samples for r in results], dtype=np.float64)
    deltas = np.stack([r.delta for r in results]).astype(np.float64)
    average = counts @ deltas / counts.sum()
    assert set(strategy.models) == {"cluster-0", "cluster-1"}
    for key in strategy.models:
        np.testing.assert_allclose(strategy.models[key], average, rtol=1e-5, atol=1e-7)
    # and each the round's medians as the bounds of its next round
    norms = np.linalg.norm(deltas, axis=1)
    medians = StreamBounds(lower_median(norms), lower_median(counts))
    assert set(strategy.stream_bounds_) == {"cluster-0", "cluster-1"}
    for bounds in strategy.stream_bounds_.values():
        assert bounds.norm == pytest.approx(medians.norm, rel=1e-6)
        assert bounds.samples == medians.samples


def test_a_stream_folded_in_any_order_gives_the_lists_round() -> None:
    # Prepare
    listed, streamed = make("sketch"), make("sketch")
    results = trained(listed, 1)

    # Execute: the list (in client order), and a live stream fed in reverse arrival order
    listed.aggregate_round(1, results, [])
    stream = streamed.open_stream(1)
    assert stream is not None
    for result in reversed(results):
        stream.add(result)
    streamed.aggregate_stream(1, stream, [])

    # Assert: the same clusters, evidence, heights and models
    assert streamed.cluster_labels() == listed.cluster_labels()
    np.testing.assert_array_equal(
        streamed.cluster_evidence().similarity_matrix(),
        listed.cluster_evidence().similarity_matrix(),
    )
    assert streamed.last_heights_ is not None
    assert listed.last_heights_ is not None
    np.testing.assert_allclose(streamed.last_heights_, listed.last_heights_, rtol=1e-9)
    for key, values in listed.models.items():
        np.testing.assert_allclose(streamed.models[key], values, rtol=1e-6, atol=1e-8)


def test_streamed_medians_survive_a_restart() -> None:
    # Prepare: a warm-up round, then the clustering round, under the robust policy
    strategy = make("sketch", n_warmup=1)
    strategy.averaging = Averaging(DEFAULT_POLICY)
    for server_round in (1, 2):
        strategy.aggregate_round(server_round, trained(strategy, server_round), [])
    state, saved_bounds = strategy.state_dict(), dict(strategy.stream_bounds_)

    # Execute: resume from the saved state, then one more round for both
    resumed = FLHC(fraction=1.0, n_warmup=1, pairwise="sketch", sketch_epsilon=EPSILON)
    resumed.averaging = Averaging(DEFAULT_POLICY)
    resumed.load_state_dict(
        StrategyState(
            {k: v.copy() for k, v in state.arrays.items()}, json.loads(json.dumps(state.meta))
        )
    )
    resumed_bounds = dict(resumed.stream_bounds_)
    results = trained(strategy, 3)
    loud = results[-1]  # ten times its norm: clipped against the saved median
    assert loud.base is not None
    results[-1] = FitResult(
        loud.client_id, loud.model_key, loud.base + 10 * loud.delta, None, 40, 0.5, base=loud.base
    )
    strategy.aggregate_round(3, results, [])
    resumed.aggregate_round(3, results, [])

    # Assert: the bounds came back, and the clipped round is the same
    assert resumed_bounds == saved_bounds
    assert set(resumed_bounds) == {"cluster-0", "cluster-1"}
    assert strategy.averaged_.report.norm_clipped > 0
    assert resumed.averaged_.report == strategy.averaged_.report
    for key, values in strategy.models.items():
        np.testing.assert_array_equal(resumed.models[key], values)


def test_a_trimmed_mean_takes_the_list_and_still_clusters_on_sketches() -> None:
    # Prepare
    strategy = make("sketch")
    strategy.averaging = Averaging(AggregationPolicy(trim_fraction=0.2))
    results = trained(strategy, 1)

    # Execute
    assert strategy.open_stream(1) is None
    strategy.aggregate_round(1, results, [])

    # Assert: the true groups, each cluster averaged over its own members (the list path)
    labels = [strategy.cluster_labels()[c] for c in CLIENTS]
    assert adjusted_rand_index(GROUPS, labels) == 1
    assert not np.allclose(strategy.models["cluster-0"], strategy.models["cluster-1"])
    assert GLOBAL not in strategy.models


def test_under_sketches_a_large_round_keeps_sampled_pairs_for_the_run() -> None:
    # Prepare: 60 clients in two groups, more than 32 partners + 1
    many = [f"m{i:02d}" for i in range(60)]

    def run(pairwise: str) -> FLHC:
        strategy = FLHC(fraction=1.0, n_warmup=0, pairwise=pairwise, sketch_epsilon=EPSILON)
        strategy.initialize(many, model)
        stream = strategy.open_stream(1)
        results = []
        for i, client in enumerate(many):
            direction = DIRECTIONS[i % 2] / np.linalg.norm(DIRECTIONS[i % 2])
            noise = np.random.default_rng(i).normal(0, 0.01, N_PARAMS).astype(np.float32)
            base = strategy.models[GLOBAL]
            delta = (direction + noise).astype(np.float32)
            results.append(FitResult(client, GLOBAL, base + delta, None, 10, 0.5, base=base))
        if stream is None:
            strategy.aggregate_round(1, results, [])
        else:
            for result in results:
                stream.add(result)
            strategy.aggregate_stream(1, stream, [])
        for server_round in (2, 3):  # later rounds record no evidence: it stays
            strategy.aggregate_round(server_round, [], [])
        return strategy

    # Execute
    sketched, exact = run("sketch"), run("exact")

    # Assert: 32 partners each instead of 59, their cosines the sketches' (close to exact)
    evidence = sketched.cluster_evidence()
    assert sketched.evidence_.matrix.size == 0
    assert len(evidence.similarity) == 60 * 32 // 2  # type: ignore[arg-type]
    assert "each client with 32 sampled others" in evidence.measure
    known, full = evidence.similarity_matrix(), exact.cluster_evidence().similarity_matrix()
    assert known is not None
    assert full is not None
    assert np.count_nonzero(~np.isnan(full)) == 60 * 59
    pairs = ~np.isnan(known)
    np.testing.assert_allclose(known[pairs], full[pairs], atol=EPSILON)  # the JL bound
    assert sketched.cluster_labels() == exact.cluster_labels()

    # and they survive a restart
    state = sketched.state_dict()
    assert "extra/similarity" not in state.arrays
    restored = FLHC(fraction=1.0, n_warmup=0, pairwise="sketch", sketch_epsilon=EPSILON)
    restored.initialize(many, model)
    restored.load_state_dict(
        StrategyState(
            {k: v.copy() for k, v in state.arrays.items()}, json.loads(json.dumps(state.meta))
        )
    )
    np.testing.assert_array_equal(restored.cluster_evidence().similarity_matrix(), known)
