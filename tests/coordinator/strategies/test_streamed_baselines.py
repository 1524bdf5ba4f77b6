"""FedAvg, fixed clusters, IFCA and FAACL streaming their rounds: the same models as the
list (no robust rules), IFCA's evidence the same pairs and cosines, the bounds kept in the
state, and when each takes the list instead."""

from __future__ import annotations

import json

import numpy as np
import pytest

from coordinator.engine.rounds import RoundEngine
from coordinator.strategies.base import Strategy, StrategyState
from coordinator.strategies.evidence import SameModelSimilarity
from coordinator.strategies.faacl import FAACL
from coordinator.strategies.fedavg import FedAvg
from coordinator.strategies.fixed import FixedClusters
from coordinator.strategies.ifca import IFCA
from coordinator.strategies.registry import make_strategy
from coordinator.strategies.robust import DEFAULT_POLICY, AggregationPolicy, Averaging
from faultfleet.errors import UsageError
from faultfleet.tasks import FitResult, TrainConfig
from faultfleet.types import FloatArray
from tests.coordinator.fakes import SyntheticFleet, seeded_factory

N_PARAMS = 3000
CLIENTS = [f"c{i:03d}" for i in range(150)]  # 50 a model: more than its 32 partners


def model(j: int) -> FloatArray:
    return np.full(N_PARAMS, 0.1 * j, dtype=np.float32)


def trained(strategy: Strategy, server_round: int, keys: dict[str, str]) -> list[FitResult]:
    """Each client of ``keys`` trains the model named there: the model plus noise of its own
    (its group's direction for IFCA's groups)."""
    results = []
    for i, (client, key) in enumerate(keys.items()):
        rng = np.random.default_rng([server_round, i])
        base = strategy.models[key]
        direction = np.sin(np.arange(N_PARAMS) * sum(map(ord, key))).astype(np.float32)
        weights = base + 0.1 * direction + rng.normal(0, 0.01, N_PARAMS).astype(np.float32)
        results.append(FitResult(client, key, weights, None, 10 + i, 0.5, base=base))
    return results


def fedavg(streaming: str) -> FedAvg:
    strategy = FedAvg(fraction=1.0, streaming=streaming)
    strategy.initialize(CLIENTS, model)
    return strategy


def ifca(pairwise: str) -> IFCA:
    strategy = IFCA(fraction=1.0, n_clusters=3, pairwise=pairwise)
    strategy.initialize(CLIENTS, model)
    return strategy


ALL_GLOBAL = dict.fromkeys(CLIENTS, "global")
CHOICES = {c: f"cluster-{i % 3}" for i, c in enumerate(CLIENTS)}


def test_a_streamed_fedavg_round_is_the_listed_one() -> None:
    streamed, listed = fedavg("on"), fedavg("off")
    assert streamed.open_stream(1) is not None
    assert listed.open_stream(1) is None

    for server_round in (1, 2, 3):
        for strategy in (streamed, listed):
            strategy.aggregate_round(server_round, trained(strategy, server_round, ALL_GLOBAL), [])

    np.testing.assert_allclose(streamed.models["global"], listed.models["global"], atol=1e-6)
    assert streamed.averaged_.averages == listed.averaged_.averages == 1
    assert streamed.stream_bounds_["global"].norm is not None
    assert listed.stream_bounds_ == {}


def test_auto_streams_from_a_thousand_registered_clients() -> None:
    small, large = FedAvg(streaming="auto"), FedAvg(streaming="auto")
    small.initialize(CLIENTS, model)
    large.initialize([f"m{i:04d}" for i in range(1000)], model)

    assert small.open_stream(1) is None
    assert large.open_stream(1) is not None


def test_a_trimmed_mean_takes_the_list() -> None:
    strategy = fedavg("on")
    strategy.averaging = Averaging(AggregationPolicy(trim_fraction=0.2))

    strategy.aggregate_round(1, trained(strategy, 1, ALL_GLOBAL), [])

    assert strategy.open_stream(2) is None
    assert strategy.averaged_.averages == 1


def test_a_bad_streaming_value_is_refused_by_name() -> None:
    with pytest.raises(UsageError, match="streaming"):
        FedAvg(streaming="sometimes").initialize(CLIENTS, model)


def test_a_streamed_update_of_another_model_is_refused() -> None:
    strategy = fedavg("on")
    stream = strategy.open_stream(1)
    assert stream is not None
    stream.models["other"] = model(1)  # a stream that took an update FedAvg never sent
    stream.add(FitResult(CLIENTS[0], "other", model(2), None, 5, 0.5, base=model(1)))

    with pytest.raises(ValueError, match="FedAvg has 'global' only"):
        strategy.aggregate_stream(1, stream, [])


@pytest.mark.parametrize("name", ["fedavg", "ifca"])
def test_the_streams_bounds_survive_a_saved_state(name: str) -> None:
    strategy: FedAvg | IFCA = fedavg("on") if name == "fedavg" else ifca("sketch")
    strategy.averaging = Averaging(DEFAULT_POLICY)
    keys = ALL_GLOBAL if name == "fedavg" else CHOICES
    strategy.aggregate_round(1, trained(strategy, 1, keys), [])
    state = strategy.state_dict()
    resumed: FedAvg | IFCA = (
        FedAvg(fraction=1.0, streaming="on")
        if name == "fedavg"
        else IFCA(fraction=1.0, n_clusters=3, pairwise="sketch")
    )
    resumed.load_state_dict(
        StrategyState(
            {k: v.copy() for k, v in state.arrays.items()}, json.loads(json.dumps(state.meta))
        )
    )

    assert resumed.stream_bounds_ == strategy.stream_bounds_
    assert len(strategy.stream_bounds_) == len(set(keys.values()))


def test_a_streamed_ifca_round_keeps_the_lists_models_and_evidence() -> None:
    # Prepare: the sketched IFCA streams; a second one's evidence is recorded from the list
    streamed, exact = ifca("sketch"), ifca("exact")
    assert streamed.open_stream(1) is not None
    assert exact.open_stream(1) is None
    assert streamed.comparer_.sketcher is not None
    listed = SameModelSimilarity(CLIENTS, streamed.comparer_)

    # Execute
    for server_round in (1, 2):
        results = {id(s): trained(s, server_round, CHOICES) for s in (streamed, exact)}
        listed.record(server_round, sorted(results[id(streamed)], key=lambda r: r.client_id))
        exact.aggregate_round(server_round, results[id(exact)], [])
        stream = streamed.open_stream(server_round)  # as the engine does, in arrival order
        assert stream is not None
        for result in reversed(results[id(streamed)]):
            stream.add(result)
        streamed.aggregate_stream(server_round, stream, [])

    # Assert: the models of the exact (list) path, the list's pairs and sketch cosines
    for key, weights in exact.models.items():
        np.testing.assert_allclose(streamed.models[key], weights, atol=1e-6)
    assert streamed.fit_keys_ == exact.fit_keys_ == CHOICES
    mine, theirs = streamed.same_model_.pairs_, listed.pairs_
    assert len(mine) == len(theirs) > 0
    np.testing.assert_array_equal(mine.first, theirs.first)
    np.testing.assert_array_equal(mine.second, theirs.second)
    np.testing.assert_array_equal(mine.value, theirs.value)


def test_faacl_streams_under_sketches_and_keeps_bounds_of_its_live_models_only() -> None:
    # Prepare: the engine drives FAACL over a synthetic fleet of three groups, on sketches
    options = {"epsilon": 1.0, "init_rounds": 1, "pairwise": "sketch", "sketch_epsilon": 0.25}
    strategy = make_strategy("faacl", fraction=0.5, options=options)
    strategy.averaging = Averaging(DEFAULT_POLICY)
    exact = make_strategy("faacl", fraction=0.5, options={**options, "pairwise": "exact"})
    fleet = SyntheticFleet([0] * 6 + [1] * 6 + [2] * 6, dim=N_PARAMS, seed=3)
    engine = RoundEngine(
        strategy, fleet, model_factory=seeded_factory(N_PARAMS), train_config=TrainConfig(), seed=0
    )
    exact.initialize([f"x{i}" for i in range(4)], model)

    # Execute
    for _ in range(5):
        engine.run_round()
    assert isinstance(strategy, FAACL)
    state = strategy.state_dict()
    resumed = make_strategy("faacl", fraction=0.5, options=options)
    assert isinstance(resumed, FAACL)
    resumed.load_state_dict(
        StrategyState(
            {k: v.copy() for k, v in state.arrays.items()}, json.loads(json.dumps(state.meta))
        )
    )

    # Assert: streamed (bounds exist only on that path), none left for merged-away models
    assert isinstance(exact, FAACL)
    assert exact.open_stream(1) is None
    assert strategy.open_stream(6) is not None
    assert strategy.stream_bounds_
    assert set(strategy.stream_bounds_) <= set(strategy.models)
    assert resumed.stream_bounds_ == strategy.stream_bounds_


def test_fixed_clusters_stream_each_cluster_as_the_list_averages_it() -> None:
    # Prepare: three given clusters, streamed and listed
    assignment = {c: i % 3 for i, c in enumerate(CLIENTS)}
    streamed = FixedClusters(fraction=1.0, assignment=assignment, streaming="on")
    listed = FixedClusters(fraction=1.0, assignment=assignment, streaming="off")
    for strategy in (streamed, listed):
        strategy.initialize(CLIENTS, model)

    # Execute
    for server_round in (1, 2):
        for strategy in (streamed, listed):
            strategy.aggregate_round(server_round, trained(strategy, server_round, CHOICES), [])

    # Assert: the same three models; a cluster's update from another cluster's client refused
    assert streamed.open_stream(3) is not None
    assert listed.open_stream(3) is None
    assert set(streamed.stream_bounds_) == set(CHOICES.values())
    for key, weights in listed.models.items():
        np.testing.assert_allclose(streamed.models[key], weights, atol=1e-6)
    wrong = trained(streamed, 3, {CLIENTS[0]: "cluster-1"})
    with pytest.raises(ValueError, match="not its cluster's 'cluster-0'"):
        streamed.aggregate_round(3, wrong, [])
