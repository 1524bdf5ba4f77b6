"""Tests for coordinator.strategies.ifca, on synthetic fit results (no torch)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from coordinator.strategies.base import StrategyState
from coordinator.strategies.ifca import IFCA
from faultfleet.tasks import EvaluateResult, FitResult
from faultfleet.types import FloatArray

CLIENTS = ("a0", "a1", "b0", "b1")
KEYS = ("cluster-0", "cluster-1", "cluster-2")


def factory(j: int) -> FloatArray:
    """Initialisation j: every weight equals j (distinct for distinct j)."""
    return np.full(3, float(j), dtype=np.float32)


def make_ifca(n_clusters: int = 3, fraction: float = 1.0) -> IFCA:
    strategy = IFCA(fraction=fraction, n_clusters=n_clusters)
    strategy.initialize(CLIENTS, factory)
    return strategy


def fit(strategy: IFCA, client: str, key: str, weights: list[float], n: int = 1) -> FitResult:
    new = np.asarray(weights, dtype=np.float32)
    return FitResult(client, key, new, new - strategy.models[key], n, 0.0)


def two_group_results(strategy: IFCA) -> list[FitResult]:
    """Group a picks cluster-0, group b picks cluster-2; nobody picks cluster-1."""
    return [
        fit(strategy, "a0", "cluster-0", [1.0, 1.0, 1.0], n=1),
        fit(strategy, "a1", "cluster-0", [5.0, 5.0, 9.0], n=3),
        fit(strategy, "b0", "cluster-2", [2.0, 4.0, 6.0], n=2),
        fit(strategy, "b1", "cluster-2", [4.0, 0.0, 6.0], n=2),
    ]


def test_initial_models_are_independent_initialisations() -> None:
    # Prepare
    calls: list[int] = []

    def recording_factory(j: int) -> FloatArray:
        calls.append(j)
        return factory(j)

    strategy = IFCA(fraction=1.0, n_clusters=3)

    # Execute
    strategy.initialize(CLIENTS, recording_factory)

    # Assert
    assert calls == [0, 1, 2]
    assert tuple(strategy.models) == KEYS
    for j, key in enumerate(KEYS):
        np.testing.assert_array_equal(strategy.models[key], factory(j))


def test_fit_instructions_carry_all_keys() -> None:
    # Prepare
    strategy = make_ifca(fraction=0.5)

    # Execute
    instructions = strategy.configure_round(1, CLIENTS, np.random.default_rng(0))

    # Assert
    assert len(instructions) == 2
    assert all(ins.model_keys == KEYS for ins in instructions)


def test_each_cluster_is_the_weighted_average_of_its_choosers() -> None:
    # Prepare
    strategy = make_ifca()
    unpicked = strategy.models["cluster-1"].copy()

    # Execute
    strategy.aggregate_round(1, two_group_results(strategy), [])

    # Assert: (1·[1,1,1] + 3·[5,5,9]) / 4 and ([2,4,6] + [4,0,6]) / 2
    np.testing.assert_allclose(strategy.models["cluster-0"], [4.0, 4.0, 7.0])
    np.testing.assert_allclose(strategy.models["cluster-2"], [3.0, 2.0, 6.0])
    np.testing.assert_array_equal(strategy.models["cluster-1"], unpicked)


def test_aggregate_does_not_depend_on_answer_order() -> None:
    # Prepare
    forward, backward = make_ifca(), make_ifca()

    # Execute
    forward.aggregate_round(1, two_group_results(forward), [])
    backward.aggregate_round(1, two_group_results(backward)[::-1], [])

    # Assert
    for key in KEYS:
        np.testing.assert_array_equal(forward.models[key], backward.models[key])


def test_cluster_labels_follow_the_last_choice() -> None:
    # Prepare
    strategy = make_ifca()
    strategy.aggregate_round(1, two_group_results(strategy), [])

    # Execute: in round 2 only a0 trains, and switches to cluster-1
    strategy.aggregate_round(2, [fit(strategy, "a0", "cluster-1", [0.0, 0.0, 0.0])], [])

    # Assert
    assert strategy.model_key_for("a0") == "cluster-1"
    assert strategy.model_key_for("a1") == "cluster-0"
    assert strategy.cluster_labels() == {"a0": 1, "a1": 0, "b0": 2, "b1": 2}
    assert strategy.num_clusters == 3


def test_unsampled_client_reports_cluster_zero_but_predicts_with_every_model() -> None:
    # Prepare
    strategy = make_ifca()

    # Execute
    instructions = strategy.configure_evaluate(1, ["b1"])

    # Assert
    assert strategy.model_key_for("b1") == "cluster-0"
    assert strategy.predict_models("b1") == KEYS
    assert instructions[0].model_keys == KEYS


def test_evaluation_choices_are_reported_but_change_no_training_state() -> None:
    # Prepare
    strategy = make_ifca()
    strategy.aggregate_round(1, two_group_results(strategy), [])
    models_before = {k: v.copy() for k, v in strategy.models.items()}
    fit_keys_before = dict(strategy.fit_keys_)

    # Execute: a1 evaluates best with cluster-2, b1 (so far cluster-2) with cluster-1
    strategy.aggregate_evaluate(
        1,
        [
            EvaluateResult("a1", "cluster-2", accuracy=0.9, loss=0.1, num_samples=5),
            EvaluateResult("b1", "cluster-1", accuracy=0.8, loss=0.2, num_samples=5),
        ],
    )

    # Assert
    assert strategy.cluster_labels() == {"a0": 0, "a1": 2, "b0": 2, "b1": 1}
    assert strategy.fit_keys_ == fit_keys_before
    for key in KEYS:
        np.testing.assert_array_equal(strategy.models[key], models_before[key])
    next_round = strategy.configure_round(2, CLIENTS, np.random.default_rng(2))
    assert all(ins.model_keys == KEYS for ins in next_round)


def test_a_newer_training_choice_overrides_an_evaluation_choice() -> None:
    # Prepare
    strategy = make_ifca()
    strategy.aggregate_evaluate(1, [EvaluateResult("a0", "cluster-2", 1.0, 0.0, 1)])

    # Execute
    strategy.aggregate_round(2, [fit(strategy, "a0", "cluster-1", [0.0, 0.0, 0.0])], [])

    # Assert
    assert strategy.model_key_for("a0") == "cluster-1"


def test_evaluation_of_an_unknown_model_raises() -> None:
    # Prepare
    strategy = make_ifca()

    # Execute / Assert
    with pytest.raises(ValueError, match="unknown model 'cluster-7'"):
        strategy.aggregate_evaluate(1, [EvaluateResult("a0", "cluster-7", 1.0, 0.0, 1)])


def test_state_round_trip_continues_identically() -> None:
    # Prepare: a run interrupted after round 1 (and an evaluation)
    uninterrupted = make_ifca()
    uninterrupted.aggregate_round(1, two_group_results(uninterrupted), [])
    uninterrupted.aggregate_evaluate(1, [EvaluateResult("b1", "cluster-1", 1.0, 0.0, 1)])
    state = uninterrupted.state_dict()
    saved = StrategyState(
        arrays={k: v.copy() for k, v in state.arrays.items()},
        meta=json.loads(json.dumps(state.meta)),
    )

    # Execute
    resumed = IFCA(fraction=1.0, n_clusters=3)
    resumed.load_state_dict(saved)
    for strategy in (uninterrupted, resumed):
        strategy.aggregate_round(2, two_group_results(strategy)[:2], [])

    # Assert
    assert resumed.cluster_labels() == uninterrupted.cluster_labels()
    assert resumed.fit_keys_ == uninterrupted.fit_keys_
    assert resumed.eval_keys_ == uninterrupted.eval_keys_
    for key in KEYS:
        np.testing.assert_array_equal(resumed.models[key], uninterrupted.models[key])
    assert resumed.configure_round(3, CLIENTS, np.random.default_rng(3)) == (
        uninterrupted.configure_round(3, CLIENTS, np.random.default_rng(3))
    )


def test_loading_into_a_different_n_clusters_raises() -> None:
    # Prepare
    state = make_ifca(n_clusters=3).state_dict()

    # Execute / Assert
    with pytest.raises(ValueError, match="n_clusters=3"):
        IFCA(n_clusters=2).load_state_dict(state)


@pytest.mark.parametrize("n_clusters", [0, -2, 1.5, True])
def test_bad_n_clusters_raises(n_clusters: int) -> None:
    # Prepare
    strategy = IFCA(n_clusters=n_clusters)

    # Execute / Assert
    with pytest.raises(ValueError, match="n_clusters must be an integer >= 1"):
        strategy.initialize(CLIENTS, factory)


def test_init_only_stores_hyper_parameters() -> None:
    # Execute
    strategy = IFCA(fraction=0.5, n_clusters=-1)

    # Assert: validation waits for initialize
    assert (strategy.fraction, strategy.n_clusters) == (0.5, -1)
