"""One contract suite run against every strategy (scikit-learn's parametrize_with_checks idea)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from coordinator.engine.rounds import RoundEngine
from coordinator.engine.state import load_state, save_state
from coordinator.strategies.base import Strategy
from coordinator.strategies.quality import assess
from coordinator.strategies.registry import STRATEGIES, make_strategy
from coordinator.strategies.robust import DEFAULT_POLICY, AggregationPolicy, Averaging
from faultfleet.tasks import FitInstruction, FitResult, FitTask, TrainConfig, client_seed
from tests.coordinator.fakes import SyntheticFleet, seeded_factory

GROUPS = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]

# Small-scale settings so every strategy does something interesting within a few rounds.
OPTIONS: dict[str, dict[str, object]] = {
    "fedavg": {},
    "local": {},
    "flacc": {"n_sep": 3},
    "ifca": {"n_clusters": 3},
    "jgl": {"n_clusters": 3, "batch_size": 8},
    "cfl": {"min_rounds": 2, "eps1": 10.0, "eps2": 0.0},
    "flhc": {"n_warmup": 2, "distance_threshold": 1.0},
    "faacl": {"epsilon": 1.0, "init_rounds": 0},
    "fedac": {"n_clusters": 2, "components": 4, "buffer_size": 8, "warmup": 1, "tune_every": 2},
    "fixed": {"assignment": {f"c{i:02d}": g for i, g in enumerate(GROUPS)}},
}

Factory = Callable[[], Strategy]


def factory_for(name: str) -> Factory:
    def build() -> Strategy:
        return make_strategy(name, fraction=0.5, options=OPTIONS[name])

    return build


def flacc_sketched() -> Strategy:
    """FLACC comparing sketches, sampling pairs (4 partners of 6 per round) and streaming."""
    options = {**OPTIONS["flacc"], "pairwise": "sketch", "partners": 4, "sketch_epsilon": 0.9}
    return make_strategy("flacc", fraction=0.5, options=options)


def strategy_factories() -> list[tuple[str, Factory]]:
    named = [(name, factory_for(name)) for name in sorted(STRATEGIES)]
    return [*named, ("flacc-sketch", flacc_sketched)]


def engine_for(strategy: Strategy, fleet: SyntheticFleet, seed: int = 0) -> RoundEngine:
    return RoundEngine(
        strategy, fleet, model_factory=seeded_factory(), train_config=TrainConfig(), seed=seed
    )


def run(strategy: Strategy, rounds: int, seed: int = 0) -> RoundEngine:
    engine = engine_for(strategy, SyntheticFleet(GROUPS), seed)
    for _ in range(rounds):
        engine.run_round()
    return engine


def test_every_registered_strategy_is_covered() -> None:
    assert set(OPTIONS) == set(STRATEGIES)


def test_configure_round_samples_only_available_clients(new_strategy: Factory) -> None:
    fleet = SyntheticFleet(GROUPS, offline=["c00", "c05"])
    strategy = new_strategy()
    engine = engine_for(strategy, fleet)
    instructions = strategy.configure_round(1, fleet.available(), engine.rng)
    sampled = [i.client_id for i in instructions]
    assert sampled
    assert not {"c00", "c05"} & set(sampled)
    assert len(set(sampled)) == len(sampled)
    expected = len(fleet.available()) if strategy.full_participation else 6
    assert len(sampled) == expected
    for instruction in instructions:
        assert set(instruction.model_keys) <= set(strategy.models)


def test_same_seed_same_run(new_strategy: Factory) -> None:
    first, second = run(new_strategy(), 6), run(new_strategy(), 6)
    assert first.strategy.cluster_labels() == second.strategy.cluster_labels()
    for key, weights in first.strategy.models.items():
        np.testing.assert_array_equal(weights, second.strategy.models[key])


def test_aggregate_does_not_depend_on_client_order(new_strategy: Factory) -> None:
    fleet = SyntheticFleet(GROUPS)
    a, b = new_strategy(), new_strategy()
    engine_a, engine_b = engine_for(a, fleet), engine_for(b, fleet)
    for server_round in range(1, 5):
        instructions = a.configure_round(server_round, fleet.available(), engine_a.rng)
        b.configure_round(server_round, fleet.available(), engine_b.rng)
        tasks = _tasks(a, instructions, server_round)
        outcome = fleet.fit(server_round, tasks)
        a.aggregate_round(server_round, outcome.results, ())
        b.aggregate_round(server_round, outcome.results[::-1], ())
    assert a.cluster_labels() == b.cluster_labels()
    for key, weights in a.models.items():
        np.testing.assert_array_equal(weights, b.models[key])


AVERAGINGS = {
    "robust": Averaging(DEFAULT_POLICY),
    "private": Averaging(AggregationPolicy(noise_multiplier=1.0, clip_norm=0.5), noise_seed=3),
}


@pytest.mark.parametrize("averaging", AVERAGINGS.values(), ids=AVERAGINGS.keys())
def test_robust_and_private_aggregates_do_not_depend_on_client_order(
    new_strategy: Factory, averaging: Averaging
) -> None:
    fleet = SyntheticFleet(GROUPS)
    a, b = new_strategy(), new_strategy()
    a.averaging = b.averaging = averaging
    engine_a, engine_b = engine_for(a, fleet), engine_for(b, fleet)
    for server_round in range(1, 5):
        instructions = a.configure_round(server_round, fleet.available(), engine_a.rng)
        b.configure_round(server_round, fleet.available(), engine_b.rng)
        outcome = fleet.fit(server_round, _tasks(a, instructions, server_round))
        a.aggregate_round(server_round, outcome.results, ())
        b.aggregate_round(server_round, outcome.results[::-1], ())
    assert a.cluster_labels() == b.cluster_labels()
    for key, weights in a.models.items():
        np.testing.assert_array_equal(weights, b.models[key])


def test_identical_updates_aggregate_to_themselves_under_the_default_policy(
    new_strategy: Factory,
) -> None:
    fleet = SyntheticFleet(GROUPS)
    strategy = new_strategy()
    strategy.averaging = Averaging(DEFAULT_POLICY)
    engine = engine_for(strategy, fleet)
    instructions = strategy.configure_round(1, fleet.available(), engine.rng)
    same = np.full(8, 0.25, dtype=np.float32)
    keys = [i.model_keys[0] for i in instructions]
    results = [
        FitResult(i.client_id, key, same.copy(), same - strategy.models[key], 10, 0.1)
        for i, key in zip(instructions, keys, strict=True)
    ]
    strategy.aggregate_round(1, results, ())
    for key in keys:
        np.testing.assert_allclose(strategy.models[key], same, rtol=0, atol=1e-7)


def test_identical_updates_aggregate_to_themselves(new_strategy: Factory) -> None:
    fleet = SyntheticFleet(GROUPS)
    strategy = new_strategy()
    engine = engine_for(strategy, fleet)
    instructions = strategy.configure_round(1, fleet.available(), engine.rng)
    same = np.full(8, 0.25, dtype=np.float32)
    results = []
    for i in instructions:
        key = i.model_keys[0]
        start = strategy.models[key]
        results.append(FitResult(i.client_id, key, same.copy(), same - start, 10, 0.1))
    trained = {r.model_key for r in results}
    strategy.aggregate_round(1, results, ())
    for key in trained:
        np.testing.assert_allclose(strategy.models[key], same, rtol=0, atol=1e-7)


def test_round_without_answers_changes_no_model(new_strategy: Factory) -> None:
    strategy = new_strategy()
    engine = run(strategy, 2)
    before = {k: v.copy() for k, v in strategy.models.items()}
    strategy.aggregate_round(engine.server_round + 1, (), ())
    assert set(strategy.models) == set(before)
    for key, weights in before.items():
        np.testing.assert_array_equal(strategy.models[key], weights)


def test_result_from_unknown_client_is_rejected(new_strategy: Factory) -> None:
    strategy = new_strategy()
    run(strategy, 1)
    key = next(iter(strategy.models))
    weights = strategy.models[key]
    stranger = FitResult("intruder", key, weights, weights * 0, 5, 0.0)
    with pytest.raises(ValueError, match="unknown client 'intruder'"):
        strategy.aggregate_round(2, [stranger], ())


@pytest.mark.parametrize("stop", [1, 3, 5])
def test_resumed_run_equals_uninterrupted(new_strategy: Factory, stop: int, tmp_path: Path) -> None:
    total = 7
    uninterrupted = run(new_strategy(), total, seed=3)
    first = run(new_strategy(), stop, seed=3)
    save_state(tmp_path, first.state())
    resumed = engine_for(new_strategy(), SyntheticFleet(GROUPS), seed=3)
    resumed.restore(load_state(tmp_path))
    assert resumed.server_round == stop
    for _ in range(total - stop):
        resumed.run_round()
    assert resumed.strategy.cluster_labels() == uninterrupted.strategy.cluster_labels()
    assert (
        assess(resumed.strategy.cluster_evidence(), total).to_json()
        == assess(uninterrupted.strategy.cluster_evidence(), total).to_json()
    )
    assert set(resumed.strategy.models) == set(uninterrupted.strategy.models)
    for key, weights in uninterrupted.strategy.models.items():
        np.testing.assert_array_equal(resumed.strategy.models[key], weights)


def test_every_client_has_a_cluster_and_a_model(new_strategy: Factory) -> None:
    strategy = new_strategy()
    engine = run(strategy, 5)
    labels = strategy.cluster_labels()
    assert set(labels) == set(engine.fleet.client_ids())
    assert strategy.num_clusters == len(set(labels.values()))
    for client in labels:
        assert set(strategy.predict_models(client)) <= set(strategy.models)


def test_cluster_evidence_describes_the_clustering(new_strategy: Factory) -> None:
    strategy = new_strategy()
    engine = run(strategy, 6)
    labels = strategy.cluster_labels()

    evidence = strategy.cluster_evidence()
    quality = assess(evidence, engine.server_round)

    assert evidence.client_ids == strategy.client_ids_
    assert evidence.labels == tuple(labels[c] for c in strategy.client_ids_)
    m = len(strategy.client_ids_)
    if strategy.clusters_learned:
        similarity = evidence.similarity_matrix()
        assert similarity is not None
        assert evidence.similarity is not None
        assert evidence.similarity.shape == similarity.shape == (m, m)
        assert quality.basis == "learned"
        known = similarity[~np.isnan(similarity)]
        assert known.size > 0
        assert np.all(np.abs(known) <= 1.0 + 1e-9)
    else:
        assert (quality.basis, quality.confidence) == ("given", 1.0)
    assert quality.confidence is None or 0.0 <= quality.confidence <= 1.0
    assert sorted(c.size for c in quality.clusters) == sorted(
        list(labels.values()).count(k) for k in set(labels.values())
    )


def _tasks(
    strategy: Strategy, instructions: list[FitInstruction], server_round: int
) -> list[FitTask]:
    return [
        FitTask(
            i.client_id,
            {k: strategy.models[k] for k in i.model_keys},
            TrainConfig(),
            client_seed(0, server_round, i.client_id),
        )
        for i in instructions
    ]
