"""Tests for coordinator.strategies.fedac_centres: the PCA map, EM re-clustering, tuning.

On the hand-made federation of :mod:`tests.coordinator.strategies.fedac_helpers`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from coordinator.strategies.fedac import FedAC
from coordinator.strategies.keys import cluster_key
from faultfleet.types import FloatArray
from tests.coordinator.strategies.fedac_helpers import (
    CLIENTS,
    DIM,
    GROUPED,
    A,
    B,
    answer,
    factory,
    groups_of,
    make,
    point,
)

# -- Algorithm 2: the PCA map -------------------------------------------------------------


def test_the_pca_map_grows_to_d_by_accumulating_rounds() -> None:
    strategy = make(components=4, buffer_size=12, map_every=5)
    rng = np.random.default_rng(0)

    def round_of(clients: Sequence[str]) -> dict[str, FloatArray]:
        return {c: rng.normal(size=DIM).astype(np.float32) for c in clients}

    answer(strategy, 1, round_of(A))  # 3 models: 2 directions
    first = strategy.directions_.shape[0]
    answer(strategy, 2, round_of(B))  # 4 deviations from two rounds: capped at D = 4
    second = strategy.directions_.copy()
    answer(strategy, 3, round_of(A))

    assert (first, second.shape[0]) == (2, 4)
    assert strategy.buffer_.shape == (9, DIM)
    assert strategy.round_metrics()["map_components"] == 4.0
    np.testing.assert_array_equal(strategy.directions_, second)  # D reached: refit sparsely
    for server_round in range(4, 8):
        answer(strategy, server_round, round_of(B))
    assert strategy.buffer_.shape == (12, DIM)  # oldest deviations dropped
    assert strategy.map_round_ == 7  # refitted 5 rounds after round 2


def test_each_round_adds_its_models_minus_their_mean() -> None:
    strategy = make()
    models = {"a0": np.array([1, 0, 0, 0, 0, 0], np.float32), "a1": np.zeros(DIM, np.float32)}

    answer(strategy, 1, models)

    np.testing.assert_allclose(strategy.buffer_, [[0.5, 0, 0, 0, 0, 0], [-0.5, 0, 0, 0, 0, 0]])


# -- E- and M-steps -----------------------------------------------------------------------


def test_the_e_step_moves_a_client_to_its_most_similar_centre_and_the_m_step_averages() -> None:
    strategy = make(n_clusters=2, gc_low=0.0, gc_high=1e9)
    answer(strategy, 1, GROUPED)
    moved = dict(GROUPED, a0=point(-1.0, 0) + np.float32(0.05))

    answer(strategy, 2, moved)

    assert groups_of(strategy) == {frozenset(("a1", "a2")), frozenset(("a0", *B))}
    b_centre = strategy.models[strategy.labels_["b0"]]
    np.testing.assert_allclose(b_centre, np.mean([moved[c] for c in ("a0", *B)], axis=0), atol=1e-6)
    a_centre = strategy.models[strategy.labels_["a1"]]
    np.testing.assert_allclose(a_centre, np.mean([moved["a1"], moved["a2"]], axis=0), atol=1e-6)


def test_clients_that_never_trained_stay_out_of_the_centres() -> None:
    strategy = make(n_clusters=2)

    answer(strategy, 1, {c: GROUPED[c] for c in ("a0", "a1", "b0", "b1")})

    for key in strategy.cluster_keys():
        members = [c for c in ("a0", "a1", "b0", "b1") if strategy.labels_[c] == key]
        expected = np.mean([GROUPED[c] for c in members], axis=0)
        np.testing.assert_allclose(strategy.models[key], expected, atol=1e-6)


# -- cluster-number tuning --------------------------------------------------------------


def test_a_lone_cluster_splits_into_the_two_groups_under_fresh_keys() -> None:
    strategy = make(n_clusters=1)
    answer(strategy, 1, GROUPED)
    assert strategy.num_clusters == 1

    answer(strategy, 2, GROUPED)

    assert groups_of(strategy) == {frozenset(A), frozenset(B)}
    assert strategy.cluster_keys() == [cluster_key(1), cluster_key(2)]
    assert strategy.round_metrics()["splits"] == 1.0
    assert strategy.round_metrics()["clusters"] == 2.0


def test_a_cluster_of_two_groups_splits_when_its_gc_is_above_gc_high() -> None:
    # Groups a and b (±3·e₀) share a cluster, group c (3·e₅) has its own: G_c of the shared
    # cluster is about 9 / 9 = 1 > 0.8, that of c about 0.
    c_group = {
        f"c{i}": point(0.0, i) + np.float32(3.0) * np.eye(DIM, dtype=np.float32)[5]
        for i in range(3)
    }
    strategy = FedAC(
        fraction=1.0, components=4, buffer_size=12, warmup=1, tune_every=2, n_clusters=2, gc_low=0.0
    )
    strategy.initialize([*CLIENTS, *c_group], factory)
    models = {**GROUPED, **c_group}
    answer(strategy, 1, models)
    first, second = strategy.cluster_keys()
    strategy.centres_.labels = {c: second if c in c_group else first for c in strategy.labels_}
    strategy.centres_.update_centres()

    answer(strategy, 2, models)  # the E-step keeps the clusters; no tuning yet
    assert groups_of(strategy) == {frozenset(A + B), frozenset(c_group)}
    answer(strategy, 3, models)

    assert groups_of(strategy) == {frozenset(A), frozenset(B), frozenset(c_group)}
    assert strategy.round_metrics()["splits"] == 1.0


def test_a_singleton_merges_into_the_closest_cluster() -> None:
    # Three seeds on two groups leave one group split into a singleton (G_c = 0) and a pair.
    strategy = make(n_clusters=3, gc_low=1e-4)
    answer(strategy, 1, GROUPED)
    assert strategy.num_clusters == 3

    answer(strategy, 2, GROUPED)

    assert groups_of(strategy) == {frozenset(A), frozenset(B)}
    assert strategy.round_metrics()["merges"] == 1.0


def test_well_separated_tight_clusters_merge_below_gc_low() -> None:
    strategy = make(n_clusters=2, gc_low=0.2)
    answer(strategy, 1, GROUPED)

    answer(strategy, 2, GROUPED)  # G_c ≈ 0.002 < 0.2 for both

    assert strategy.num_clusters == 1


def test_tuning_waits_tune_every_rounds() -> None:
    strategy = make(n_clusters=1, tune_every=3)
    answer(strategy, 1, GROUPED)
    for server_round in (2, 3):
        answer(strategy, server_round, GROUPED)
        assert strategy.num_clusters == 1

    answer(strategy, 4, GROUPED)

    assert strategy.num_clusters == 2
