"""Tests for coordinator.strategies.flhc, on synthetic fit results (no torch).

The hand-made federations have two groups whose updates point along +e₁ (group a) and −e₁
(group b) with norm 2, so the groups are about 4 apart and members of a group at most 0.6
apart: any threshold between those splits them into exactly two clusters.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
import pytest

from coordinator.engine.rounds import RoundEngine
from coordinator.strategies.base import StrategyState
from coordinator.strategies.fedavg import FedAvg
from coordinator.strategies.flhc import FLHC
from coordinator.strategies.flhc_tree import hierarchical_clusters
from coordinator.strategies.registry import make_strategy
from faultfleet.errors import UsageError
from faultfleet.tasks import FitResult, TrainConfig
from faultfleet.types import FloatArray
from tests.coordinator.fakes import SyntheticFleet, seeded_factory

CLIENTS = ("a0", "a1", "b0", "b1")
E1 = np.array([1.0, 0.0, 0.0], dtype=np.float32)
# Within-group spread 0.3 (a) and 0.6 (b); the groups are 4 apart.
UPDATES: dict[str, FloatArray] = {
    "a0": np.array([2.0, 0.0, 0.0], np.float32),
    "a1": np.array([2.0, 0.3, 0.0], np.float32),
    "b0": np.array([-2.0, 0.0, 0.0], np.float32),
    "b1": np.array([-2.0, 0.0, 0.6], np.float32),
}
SAMPLES = {"a0": 1, "a1": 3, "b0": 2, "b1": 2}
# Three points on a line: single linkage merges at 1 and 2; ward at 1 and √(4/3)·2.5.
LINE = [np.array([x, 0.0], np.float32) for x in (0.0, 1.0, 3.0)]


def factory(j: int) -> FloatArray:
    return np.full(3, float(j), dtype=np.float32)


def make_flhc(clients: tuple[str, ...] = CLIENTS, **options: object) -> FLHC:
    strategy = FLHC(**{"n_warmup": 1, "fraction": 0.5, **options})  # type: ignore[arg-type]
    strategy.initialize(list(clients), factory)
    return strategy


def train_round(
    strategy: FLHC,
    server_round: int,
    available: tuple[str, ...] = CLIENTS,
    updates: Mapping[str, FloatArray] = UPDATES,
    seed: int = 0,
) -> list[str]:
    """Configure a round; every instructed client adds its update to its model. Returns them."""
    instructions = strategy.configure_round(server_round, available, np.random.default_rng(seed))
    results = []
    for ins in instructions:
        (key,) = ins.model_keys
        delta = updates[ins.client_id]
        weights = strategy.models[key] + delta
        results.append(FitResult(ins.client_id, key, weights, delta, SAMPLES[ins.client_id], 0.0))
    strategy.aggregate_round(server_round, results, [])
    return [ins.client_id for ins in instructions]


def test_warmup_is_fedavg() -> None:
    # Prepare: the same fleet, seed and fraction for FL+HC (3 warm-up rounds) and FedAvg
    groups = [0, 0, 1, 1, 2, 2]
    engines = [
        RoundEngine(
            strategy,
            SyntheticFleet(groups),
            model_factory=seeded_factory(),
            train_config=TrainConfig(),
            seed=4,
        )
        for strategy in (FLHC(fraction=0.5, n_warmup=3), FedAvg(fraction=0.5))
    ]

    # Execute
    reports = [[engine.run_round() for _ in range(3)] for engine in engines]

    # Assert: same clients sampled, same global model, nobody clustered yet
    flhc, fedavg = engines
    assert [r.sampled for r in reports[0]] == [r.sampled for r in reports[1]]
    assert all(len(r.sampled) == 3 for r in reports[0])
    np.testing.assert_array_equal(flhc.strategy.models["global"], fedavg.strategy.models["global"])
    assert flhc.strategy.num_clusters == 1
    assert flhc.strategy.round_metrics() == {"clustered": 0.0}


def test_clustering_round_asks_every_available_client_once() -> None:
    # Prepare: fraction 0.5 would sample 2 of 4
    strategy = make_flhc(n_warmup=2)
    rng = np.random.default_rng(0)

    # Execute
    warmup = strategy.configure_round(2, CLIENTS, rng)
    clustering = strategy.configure_round(3, ("b1", "a0", "a1", "stranger"), rng)
    train_round(strategy, 3)
    after = strategy.configure_round(4, CLIENTS, rng)

    # Assert
    assert len(warmup) == 2
    assert [i.client_id for i in clustering] == ["a0", "a1", "b1"]
    assert all(i.model_keys == ("global",) for i in clustering)
    assert len(after) == 2


@pytest.mark.parametrize(
    ("linkage", "metric"),
    [
        ("ward", "euclidean"),
        ("average", "euclidean"),
        ("complete", "euclidean"),
        ("single", "euclidean"),
        ("average", "cosine"),
        ("complete", "cosine"),
        ("single", "cosine"),
    ],
)
def test_two_separated_groups_give_two_clusters(linkage: str, metric: str) -> None:
    # Prepare: a threshold between the within-group spreads and the gap between the groups
    threshold = 1.0 if metric == "euclidean" else 0.5
    strategy = make_flhc(distance_threshold=threshold, linkage=linkage, metric=metric)

    # Execute: round 1 is warm-up, round 2 clusters
    train_round(strategy, 1)
    train_round(strategy, 2)

    # Assert
    assert strategy.clusters_ == {
        "a0": "cluster-0",
        "a1": "cluster-0",
        "b0": "cluster-1",
        "b1": "cluster-1",
    }
    assert set(strategy.models) == {"cluster-0", "cluster-1"}
    assert strategy.round_metrics()["n_clusters"] == 2.0


def test_each_cluster_model_is_the_weighted_average_of_its_members() -> None:
    # Prepare: cluster straight away from the initial model (zeros)
    strategy = make_flhc(n_warmup=0)

    # Execute
    train_round(strategy, 1)

    # Assert: a = (1·[2, 0, 0] + 3·[2, 0.3, 0]) / 4; b = (2·[-2, 0, 0] + 2·[-2, 0, 0.6]) / 4
    np.testing.assert_allclose(strategy.models["cluster-0"], [2.0, 0.225, 0.0], atol=1e-7)
    np.testing.assert_allclose(strategy.models["cluster-1"], [-2.0, 0.0, 0.3], atol=1e-7)

    # Execute: later rounds train each cluster from its own model, with its members only
    trained = train_round(strategy, 2, updates=dict.fromkeys(CLIENTS, E1), seed=1)
    for key, start in (("cluster-0", [2.0, 0.225, 0.0]), ("cluster-1", [-2.0, 0.0, 0.3])):
        members = [c for c in trained if strategy.model_key_for(c) == key]
        expected = np.add(start, E1) if members else start
        np.testing.assert_allclose(strategy.models[key], expected, atol=1e-6)


@pytest.mark.parametrize(
    ("threshold", "expected"),
    [
        pytest.param(10.0, [0, 0, 0], id="above-largest-height-one-cluster"),
        pytest.param(2.0, [0, 0, 0], id="at-largest-height-merges"),
        pytest.param(1.5, [0, 0, 1], id="between-heights"),
        pytest.param(0.5, [0, 1, 2], id="below-smallest-height-singletons"),
    ],
)
def test_threshold_cuts_the_dendrogram(threshold: float, expected: list[int]) -> None:
    # Execute
    labels, heights = hierarchical_clusters(LINE, threshold, linkage_name="single")

    # Assert
    assert labels.tolist() == expected
    np.testing.assert_allclose(heights, [1.0, 2.0])


def test_ward_heights_are_scipy_ward_distances() -> None:
    # Execute
    _, heights = hierarchical_clusters(LINE, 1.0)

    # Assert: {0, 1} (centroid 0.5) joins {3}: √(2·2·1/3)·2.5
    np.testing.assert_allclose(heights, [1.0, np.sqrt(4.0 / 3.0) * 2.5])


@pytest.mark.parametrize(
    ("linkage", "metric", "message"),
    [
        ("ward", "cosine", "linkage='ward' needs metric='euclidean'"),
        ("median", "euclidean", "unknown linkage 'median'"),
        ("single", "manhattan", "metric 'manhattan'"),
    ],
)
def test_hierarchical_clusters_refuses_unsupported_combinations(
    linkage: str, metric: str, message: str
) -> None:
    # Execute / Assert
    with pytest.raises(ValueError, match=message):
        hierarchical_clusters(LINE, 1.0, linkage_name=linkage, metric=metric)


@pytest.mark.parametrize(
    ("threshold", "n_clusters"), [pytest.param(100.0, 1, id="one"), pytest.param(0.1, 4, id="all")]
)
def test_threshold_extremes_in_the_strategy(threshold: float, n_clusters: int) -> None:
    # Prepare
    strategy = make_flhc(n_warmup=0, distance_threshold=threshold)

    # Execute
    train_round(strategy, 1)

    # Assert
    assert strategy.num_clusters == n_clusters
    assert len(strategy.models) == n_clusters


def test_round_metrics_bracket_the_threshold() -> None:
    # Prepare: within-group merges at 0.3 and 0.6, the groups join far above 1.0
    strategy = make_flhc(n_warmup=0, distance_threshold=1.0)

    # Execute
    train_round(strategy, 1)
    metrics = strategy.round_metrics()
    train_round(strategy, 2)

    # Assert
    assert metrics["clustered"] == 1.0
    assert metrics["n_clusters"] == 2.0
    assert metrics["clustered_clients"] == 4.0
    assert metrics["merge_height_below_threshold"] == pytest.approx(0.6)
    assert metrics["merge_height_above_threshold"] > 4.0
    assert strategy.round_metrics() == {"clustered": 1.0}


def test_default_cuts_in_the_largest_gap_and_reports_the_cut() -> None:
    # Prepare: merges at 0.3 and 0.6 inside the groups, then one far above 4; no threshold
    strategy = make_flhc(n_warmup=0)
    assert strategy.distance_threshold is None

    # Execute
    train_round(strategy, 1)
    metrics = strategy.round_metrics()

    # Assert: two clusters, cut at the geometric mean of 0.6 and the groups' height
    labels = strategy.cluster_labels()
    assert labels["a0"] == labels["a1"] != labels["b0"] == labels["b1"]
    top = metrics["merge_height_above_threshold"]
    assert metrics["distance_threshold"] == pytest.approx(np.sqrt(0.6 * top))


def test_no_threshold_obeys_the_cluster_bounds() -> None:
    strategy = make_flhc(n_warmup=0, distance_threshold=None, min_clusters=3)

    train_round(strategy, 1)

    assert strategy.num_clusters == 3


def test_evidence_is_the_clustering_rounds_cosines_and_weakest_heights() -> None:
    # Prepare
    strategy = make_flhc(n_warmup=0, distance_threshold=1.0)

    # Execute
    before = strategy.cluster_evidence()
    train_round(strategy, 1)
    evidence = strategy.cluster_evidence()

    # Assert: cos(a0, b0) = −1; the weakest merges are the within-group heights 0.3 and 0.6
    earlier, similarity = before.similarity_matrix(), evidence.similarity_matrix()
    assert earlier is not None
    assert similarity is not None
    assert not before.settled
    assert np.isnan(earlier).all()
    assert evidence.settled
    assert similarity[0, 2] == pytest.approx(-1.0)
    assert np.isnan(similarity[0, 0])
    a, b = evidence.labels[0], evidence.labels[2]
    assert dict(evidence.weakest_merges) == pytest.approx({a: 0.3, b: 0.6})


def test_clients_absent_at_clustering_stay_on_the_global_model() -> None:
    # Prepare: b1 is offline in the clustering round
    strategy = make_flhc(n_warmup=0, fraction=1.0)

    # Execute
    train_round(strategy, 1, available=("a0", "a1", "b0"))
    global_before = strategy.models["global"].copy()
    train_round(strategy, 2)

    # Assert: b1 alone trained the global model in round 2; nobody is re-clustered
    assert strategy.model_key_for("b1") == "global"
    assert strategy.num_clusters == 3
    np.testing.assert_allclose(strategy.models["global"], global_before + UPDATES["b1"])
    np.testing.assert_allclose(strategy.models["cluster-1"], UPDATES["b0"] * 2)


def test_clustering_waits_for_a_round_with_answers() -> None:
    # Prepare
    strategy = make_flhc(n_warmup=0)

    # Execute: nobody is available in round 1
    train_round(strategy, 1, available=())
    first = strategy.clustered_
    train_round(strategy, 2)

    # Assert
    assert not first
    assert strategy.clustered_
    assert strategy.num_clusters == 2


def test_state_round_trip_continues_identically() -> None:
    # Prepare: b1 missed the clustering round, so the global model is kept too
    uninterrupted = make_flhc()
    train_round(uninterrupted, 1)
    train_round(uninterrupted, 2, available=("a0", "a1", "b0"))
    state = uninterrupted.state_dict()
    saved = StrategyState(
        arrays={k: v.copy() for k, v in state.arrays.items()},
        meta=json.loads(json.dumps(state.meta)),
    )

    # Execute
    resumed = FLHC(n_warmup=1, fraction=0.5)
    resumed.load_state_dict(saved)
    for strategy in (uninterrupted, resumed):
        for server_round in (3, 4):
            train_round(strategy, server_round, seed=server_round)

    # Assert
    assert resumed.cluster_labels() == uninterrupted.cluster_labels()
    assert resumed.clustered_
    assert resumed.num_clusters == 3
    assert list(resumed.models) == list(uninterrupted.models)
    for key, model in uninterrupted.models.items():
        np.testing.assert_array_equal(resumed.models[key], model)


def test_registry_passes_the_fraction() -> None:
    # Execute
    strategy = make_strategy("flhc", fraction=0.5, options={"n_warmup": 3})

    # Assert
    assert isinstance(strategy, FLHC)
    assert (strategy.fraction, strategy.n_warmup, strategy.linkage) == (0.5, 3, "ward")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min_clusters": 3, "max_clusters": 2}, r"flhc: max_clusters must be an integer >= 3"),
        (
            {"metric": "cosine"},
            r"linkage='ward' needs metric='euclidean', got metric='cosine'; use linkage=",
        ),
    ],
)
def test_rules_between_two_options_are_refused(options: dict[str, object], message: str) -> None:
    # Prepare: __init__ only stores
    strategy = FLHC(**options)  # type: ignore[arg-type]

    # Execute / Assert: checked when built by name, and again on initialize
    with pytest.raises(UsageError, match=message):
        make_strategy("flhc", options=options)
    with pytest.raises(UsageError, match=message):
        strategy.initialize(list(CLIENTS), factory)


def test_result_for_another_model_raises() -> None:
    # Prepare
    strategy = make_flhc(n_warmup=0)
    train_round(strategy, 1)
    wrong = FitResult("a0", "cluster-1", np.zeros(3, np.float32), np.zeros(3, np.float32), 1, 0.0)

    # Execute / Assert
    with pytest.raises(ValueError, match="trained 'cluster-1', expected 'cluster-0'"):
        strategy.aggregate_round(2, [wrong], [])
