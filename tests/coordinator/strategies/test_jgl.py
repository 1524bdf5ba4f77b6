"""Tests for coordinator.strategies.jgl: identity rule, sign of S, empty clusters, state."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from coordinator.engine import RoundEngine
from coordinator.state import load_state, save_state
from coordinator.strategies.base import StrategyState
from coordinator.strategies.jgl import (
    JointGradientLoss,
    descent_similarity,
    fill_empty_clusters,
    identity_scores,
)
from faultfleet.models.weights import flatten_weights
from faultfleet.scoring import clustering_scores
from faultfleet.simulation.fleet import InProcessFleet
from faultfleet.tasks import (
    Failure,
    FitResult,
    GradientInstruction,
    GradientResult,
    TrainConfig,
)
from faultfleet.types import FloatArray
from signal_pipeline.federation import ClientData, Federation
from tests.coordinator.fakes import SyntheticFleet, seeded_factory
from tests.edge_agent.test_training import tiny_cnn, toy_dataset

CLIENTS = ("a0", "a1", "b0", "b1")
KEYS = ("cluster-0", "cluster-1", "cluster-2")
DIM = 3


def factory(k: int) -> FloatArray:
    """Initialisation k: every weight equals k."""
    return np.full(DIM, float(k), dtype=np.float32)


def make_jgl(**options: object) -> JointGradientLoss:
    settings: dict[str, object] = {"fraction": 1.0, "n_clusters": 3, "batch_size": 4}
    settings.update(options)
    strategy = JointGradientLoss(**settings)  # type: ignore[arg-type]
    strategy.initialize(CLIENTS, factory)
    return strategy


def answer(
    client: str, losses: Sequence[float], gradients: Sequence[Sequence[float]]
) -> GradientResult:
    return GradientResult(
        client,
        {k: float(v) for k, v in zip(KEYS, losses, strict=True)},
        {k: np.asarray(g, dtype=np.float32) for k, g in zip(KEYS, gradients, strict=True)},
        4,
    )


def probe(
    strategy: JointGradientLoss,
    server_round: int,
    answers: Sequence[GradientResult],
    failures: Sequence[Failure] = (),
) -> list[GradientInstruction]:
    request = strategy.configure_probe(server_round, 0, CLIENTS, np.random.default_rng(0))
    assert request is not None
    strategy.aggregate_probe(server_round, 0, answers, failures)
    return [i for i in request if isinstance(i, GradientInstruction)]


def with_updates(strategy: JointGradientLoss, updates: Sequence[Sequence[float]]) -> None:
    """Pretend every cluster has a last update Δw_k."""
    strategy.last_update_ = np.asarray(updates, dtype=np.float32)
    strategy.has_update_ = np.ones(len(updates), dtype=bool)


def rng0() -> np.random.Generator:
    return np.random.default_rng(0)


ZERO = [0.0, 0.0, 0.0]
UPDATES = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]


# -- the similarity and the identity rule ---------------------------------------------------


def test_descent_direction_along_the_last_update_scores_plus_one() -> None:
    # Prepare: the gradient points against cluster 0's update, so descent follows it
    updates = np.array(UPDATES)
    gradients = -2.0 * updates

    # Execute
    similarity = descent_similarity(gradients, updates)

    # Assert
    np.testing.assert_allclose(similarity, [1.0, 1.0, 1.0])
    np.testing.assert_allclose(descent_similarity(-gradients, updates), [-1.0, -1.0, -1.0])


def test_device_prefers_the_cluster_whose_last_descent_it_continues() -> None:
    # Prepare: equal losses; a0's gradient is −Δw_1 at cluster 1 (keep descending that way)
    # and +Δw_k elsewhere (it would undo those clusters' last steps)
    strategy = make_jgl(lam=0.2)
    with_updates(strategy, UPDATES)
    gradients = [UPDATES[0], [-u for u in UPDATES[1]], UPDATES[2]]

    # Execute
    probe(strategy, 2, [answer("a0", [1.0, 1.0, 1.0], gradients)])

    # Assert
    assert strategy.choices_ == {"a0": 1}
    assert strategy.round_metrics()["mean_chosen_similarity"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("lam", "expected"),
    [
        (0.0, 2),  # loss alone: cluster 2 has the lowest loss
        (1.0, 0),  # similarity alone: the gradient continues cluster 0's descent
        (0.2, 2),  # the paper's λ: 0.2·(1 − (−1)) < 0.8·(3 − 0.5)
    ],
)
def test_identity_rule_weights_similarity_and_loss(lam: float, expected: int) -> None:
    # Prepare
    strategy = make_jgl(lam=lam)
    with_updates(strategy, UPDATES)
    gradients = [[-1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]

    # Execute
    probe(strategy, 2, [answer("a0", [3.0, 2.0, 0.5], gradients)])

    # Assert
    assert strategy.choices_ == {"a0": expected}


def test_identity_scores_are_eq_4() -> None:
    scores = identity_scores(np.array([1.0, 2.0]), np.array([0.5, -1.0]), 0.25)
    np.testing.assert_allclose(scores, [0.25 * 0.5 - 0.75 * 1.0, -0.25 - 0.75 * 2.0])


def test_euclidean_similarity_is_minus_the_distance_to_the_update() -> None:
    updates = np.array([[1.0, 0.0], [0.0, 2.0]])
    gradients = np.array([[-1.0, 0.0], [0.0, 2.0]])

    similarity = descent_similarity(gradients, updates, "euclidean")

    np.testing.assert_allclose(similarity, [0.0, -4.0])


def test_zero_vectors_have_zero_cosine() -> None:
    similarity = descent_similarity(np.zeros((2, 3)), np.array([[1.0, 0, 0], [0, 0, 0]]))
    np.testing.assert_array_equal(similarity, [0.0, 0.0])


def test_loss_alone_decides_until_every_cluster_has_an_update() -> None:
    # Prepare: only clusters 0 and 1 have an update; the gradient would favour cluster 0
    strategy = make_jgl(lam=0.9)
    strategy.last_update_ = np.asarray(UPDATES, dtype=np.float32)
    strategy.has_update_ = np.array([True, True, False])
    gradients = [[-1.0, 0.0, 0.0], ZERO, ZERO]

    # Execute
    probe(strategy, 2, [answer("a0", [2.0, 1.0, 3.0], gradients)])

    # Assert
    assert strategy.choices_ == {"a0": 1}
    assert strategy.round_metrics()["similarity_used"] == 0.0


def test_ties_go_to_the_lowest_cluster() -> None:
    strategy = make_jgl()
    probe(strategy, 1, [answer("a0", [1.0, 0.5, 0.5], [ZERO, ZERO, ZERO])])
    assert strategy.choices_ == {"a0": 1}


# -- probing and training instructions ------------------------------------------------------


def test_probe_asks_every_sampled_device_for_all_models() -> None:
    strategy = make_jgl(fraction=0.5, batch_size=7)

    request = strategy.configure_probe(1, 0, CLIENTS, np.random.default_rng(0))

    assert request is not None
    assert len(request) == 2
    for instruction in request:
        assert isinstance(instruction, GradientInstruction)
        assert instruction.model_keys == KEYS
        assert instruction.batch_size == 7
    assert strategy.configure_probe(1, 1, CLIENTS, np.random.default_rng(0)) is None


def test_each_device_trains_only_its_chosen_cluster() -> None:
    # Prepare: every cluster is chosen by someone, so nothing is moved
    strategy = make_jgl()
    answers = [
        answer("a0", [0.0, 1.0, 1.0], [ZERO] * 3),
        answer("a1", [0.0, 1.0, 1.0], [ZERO] * 3),
        answer("b0", [1.0, 0.0, 1.0], [ZERO] * 3),
        answer("b1", [1.0, 1.0, 0.0], [ZERO] * 3),
    ]
    probe(strategy, 1, answers)

    # Execute
    instructions = strategy.configure_round(1, CLIENTS, np.random.default_rng(0))

    # Assert
    assert [(i.client_id, i.model_keys) for i in instructions] == [
        ("a0", ("cluster-0",)),
        ("a1", ("cluster-0",)),
        ("b0", ("cluster-1",)),
        ("b1", ("cluster-2",)),
    ]
    assert strategy.round_metrics()["empty_cluster_fixes"] == 0.0
    assert strategy.cluster_labels() == {"a0": 0, "a1": 0, "b0": 1, "b1": 2}


def test_without_a_probe_the_client_picks_among_all_models() -> None:
    strategy = make_jgl(fraction=0.5)

    instructions = strategy.configure_round(1, CLIENTS, np.random.default_rng(0))

    assert len(instructions) == 2
    assert all(i.model_keys == KEYS for i in instructions)


def test_device_whose_probe_failed_does_not_train_and_stays_unplaced() -> None:
    # Prepare
    strategy = make_jgl()
    answers = [answer(c, [0.0, 1.0, 2.0], [ZERO] * 3) for c in ("a0", "a1", "b0")]

    # Execute
    probe(strategy, 1, answers, [Failure("b1", "timeout")])
    instructions = strategy.configure_round(1, CLIENTS, np.random.default_rng(0))

    # Assert
    assert "b1" not in {i.client_id for i in instructions}
    assert strategy.cluster_labels()["b1"] == 3  # the "not placed yet" label, K
    assert strategy.predict_models("b1") == KEYS
    assert strategy.round_metrics()["probe_failures"] == 1.0


def test_probe_answers_are_validated() -> None:
    strategy = make_jgl(fraction=0.5)
    request = strategy.configure_probe(1, 0, CLIENTS, np.random.default_rng(0))
    assert request is not None
    asked = {i.client_id for i in request}
    stranger = next(c for c in CLIENTS if c not in asked)
    with pytest.raises(ValueError, match="was not probed"):
        strategy.aggregate_probe(1, 0, [answer(stranger, [0, 0, 0], [ZERO] * 3)], [])
    with pytest.raises(ValueError, match="probe sent was round 1"):
        strategy.aggregate_probe(2, 0, [], [])
    client = sorted(asked)[0]
    short = GradientResult(
        client, {"cluster-0": 0.0}, {"cluster-0": np.zeros(DIM, dtype=np.float32)}, 4
    )
    with pytest.raises(ValueError, match="answered for models"):
        strategy.aggregate_probe(1, 0, [short], [])
    wrong = answer(client, [0, 0, 0], [[0.0, 0.0]] * 3)
    with pytest.raises(ValueError, match="gradient of shape"):
        strategy.aggregate_probe(1, 0, [wrong], [])


# -- empty clusters (§II-C) -----------------------------------------------------------------


def test_empty_clusters_get_one_device_from_a_crowded_cluster() -> None:
    # Prepare: four devices in cluster 0, one alone in cluster 1, cluster 2 and 3 empty
    assignment = np.array([0, 0, 1, 0, 0])

    # Execute
    fixed, moves = fill_empty_clusters(assignment, 4, np.random.default_rng(3))

    # Assert
    assert moves == 2
    assert sorted(set(fixed.tolist())) == [0, 1, 2, 3]
    assert fixed[2] == 1  # a device alone in its cluster is never moved
    assert np.sum(fixed == 0) == 2
    np.testing.assert_array_equal(assignment, [0, 0, 1, 0, 0])


def test_fewer_devices_than_clusters_fill_what_they_can() -> None:
    fixed, moves = fill_empty_clusters(np.array([2, 2]), 4, np.random.default_rng(0))
    assert moves == 1
    assert sorted(fixed.tolist()) == [0, 2]


def test_no_empty_cluster_draws_nothing() -> None:
    rng = np.random.default_rng(5)
    before = rng.bit_generator.state
    fixed, moves = fill_empty_clusters(np.array([1, 0, 2]), 3, rng)
    assert moves == 0
    np.testing.assert_array_equal(fixed, [1, 0, 2])
    assert rng.bit_generator.state == before


@pytest.mark.parametrize("seed", range(5))
def test_strategy_gives_every_cluster_a_device_each_round(seed: int) -> None:
    # Prepare: every device chooses cluster 0
    strategy = make_jgl()
    probe(strategy, 1, [answer(c, [0.0, 1.0, 1.0], [ZERO] * 3) for c in CLIENTS])

    # Execute
    instructions = strategy.configure_round(1, CLIENTS, np.random.default_rng(seed))

    # Assert
    trained = [i.model_keys[0] for i in instructions]
    assert len(instructions) == 4
    assert set(trained) == set(KEYS)
    assert strategy.round_metrics()["empty_cluster_fixes"] == 2.0
    assert strategy.choices_ == dict.fromkeys(CLIENTS, 0)
    moved = {i.client_id: int(i.model_keys[0][-1]) for i in instructions}
    assert strategy.cluster_labels() == moved


# -- aggregation and Δw bookkeeping ---------------------------------------------------------


def fit(
    strategy: JointGradientLoss, client: str, key: str, weights: list[float], n: int
) -> FitResult:
    new = np.asarray(weights, dtype=np.float32)
    return FitResult(client, key, new, new - strategy.models[key], n, 0.0)


def test_each_cluster_averages_its_devices_by_sample_count_and_remembers_its_update() -> None:
    # Prepare: round 1 with a0, a1 → cluster 0, b0 → cluster 2; nobody trains cluster 1
    strategy = make_jgl()
    results = [
        fit(strategy, "a0", "cluster-0", [1.0, 1.0, 1.0], 1),
        fit(strategy, "a1", "cluster-0", [5.0, 5.0, 9.0], 3),
        fit(strategy, "b0", "cluster-2", [2.0, 4.0, 6.0], 2),
    ]

    # Execute
    strategy.aggregate_round(1, results, [])

    # Assert: cluster 0 = (1·[1,1,1] + 3·[5,5,9]) / 4, Δw = that − 0
    np.testing.assert_allclose(strategy.models["cluster-0"], [4.0, 4.0, 7.0])
    np.testing.assert_allclose(strategy.models["cluster-1"], [1.0, 1.0, 1.0])
    np.testing.assert_allclose(strategy.models["cluster-2"], [2.0, 4.0, 6.0])
    np.testing.assert_allclose(strategy.last_update_[0], [4.0, 4.0, 7.0])
    np.testing.assert_allclose(strategy.last_update_[2], [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(strategy.has_update_, [True, False, True])
    assert strategy.cluster_labels() == {"a0": 0, "a1": 0, "b0": 2, "b1": 3}
    assert strategy.round_metrics()["clusters_trained"] == 2.0


def test_gradient_reference_is_minus_the_mean_probe_gradient_of_the_cluster_devices() -> None:
    # Prepare: a0 and a1 choose cluster 0 by loss, b0 and b1 cluster 2 (none is empty
    # after the fix: cluster 1 gets one of them)
    strategy = make_jgl(reference="gradient")
    grads = {
        "a0": [[2.0, 0.0, 0.0], ZERO, ZERO],
        "a1": [[0.0, 4.0, 0.0], ZERO, ZERO],
        "b0": [ZERO, ZERO, [0.0, 0.0, 6.0]],
        "b1": [ZERO, ZERO, [0.0, 0.0, 2.0]],
    }
    losses = {"a0": [0, 9, 9], "a1": [0, 9, 9], "b0": [9, 9, 0], "b1": [9, 9, 0]}
    probe(strategy, 1, [answer(c, losses[c], grads[c]) for c in CLIENTS])
    plan = {i.client_id: i.model_keys[0] for i in strategy.configure_round(1, CLIENTS, rng0())}

    # Execute
    strategy.aggregate_round(
        1, [fit(strategy, c, k, [1.0, 1.0, 1.0], 1) for c, k in plan.items()], []
    )

    # Assert: for each trained cluster, −(mean gradient of its devices for its model)
    for k in range(3):
        members = [c for c, key in plan.items() if key == f"cluster-{k}"]
        expected = -np.mean([grads[c][k] for c in members], axis=0)
        np.testing.assert_allclose(strategy.last_update_[k], expected)


def test_a_cluster_not_updated_keeps_its_last_update() -> None:
    # Prepare: round 1 updates clusters 0 and 2
    strategy = make_jgl()
    strategy.aggregate_round(
        1,
        [
            fit(strategy, "a0", "cluster-0", [1.0, 1.0, 1.0], 1),
            fit(strategy, "b0", "cluster-2", [3.0, 2.0, 2.0], 1),
        ],
        [],
    )

    # Execute: round 2 updates cluster 0 only
    strategy.aggregate_round(2, [fit(strategy, "a0", "cluster-0", [2.0, 0.0, 1.0], 1)], [])

    # Assert
    np.testing.assert_allclose(strategy.last_update_[0], [1.0, -1.0, 0.0])
    np.testing.assert_allclose(strategy.last_update_[2], [1.0, 0.0, 0.0])


def test_result_for_another_cluster_than_assigned_is_rejected() -> None:
    strategy = make_jgl()
    probe(strategy, 1, [answer(c, [0.0, 1.0, 2.0], [ZERO] * 3) for c in ("a0", "a1", "b0")])
    plan = {
        i.client_id: i.model_keys[0]
        for i in strategy.configure_round(1, CLIENTS, np.random.default_rng(0))
    }
    other = next(k for k in KEYS if k != plan["a0"])
    with pytest.raises(ValueError, match="assigned it"):
        strategy.aggregate_round(1, [fit(strategy, "a0", other, ZERO, 1)], [])


# -- options and state ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"n_clusters": 0}, "n_clusters must be an integer >= 1"),
        ({"n_clusters": 2.5}, "n_clusters must be an integer >= 1"),
        ({"lam": -0.1}, r"lam must be a number in \[0, 1\]"),
        ({"lam": 1.5}, r"lam must be a number in \[0, 1\]"),
        ({"lam": float("nan")}, r"lam must be a number in \[0, 1\]"),
        ({"lam": True}, r"lam must be a number in \[0, 1\]"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1"),
        ({"similarity": "dot"}, "similarity must be one of cosine, euclidean"),
        ({"reference": "delta"}, "reference must be one of update, gradient"),
        ({"fraction": 0.0}, r"fraction must be in \(0, 1\]"),
    ],
)
def test_invalid_options_are_rejected(options: dict[str, object], message: str) -> None:
    strategy = JointGradientLoss(**options)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        strategy.initialize(CLIENTS, factory)


def test_initial_models_are_independent_initialisations() -> None:
    calls: list[int] = []

    def recording(k: int) -> FloatArray:
        calls.append(k)
        return factory(k)

    strategy = JointGradientLoss(n_clusters=3)
    strategy.initialize(CLIENTS, recording)

    assert calls == [0, 1, 2]
    assert tuple(strategy.models) == KEYS


def test_state_round_trips_mid_round() -> None:
    # Prepare: probed and configured, not yet aggregated
    strategy = make_jgl(lam=0.5)
    with_updates(strategy, UPDATES)
    strategy.identities_ = {"b1": 2}
    probe(strategy, 4, [answer(c, [0.0, 1.0, 2.0], [ZERO] * 3) for c in ("a0", "a1", "b0")])
    strategy.configure_round(4, CLIENTS, np.random.default_rng(0))

    # Execute
    state = strategy.state_dict()
    restored = make_jgl(lam=0.5)
    restored.load_state_dict(StrategyState(dict(state.arrays), dict(state.meta)))

    # Assert
    for name in ("identities_", "choices_", "probe_round_", "probed_", "plan_round_", "plan_"):
        assert getattr(restored, name) == getattr(strategy, name), name
    assert restored.round_metrics() == strategy.round_metrics()
    np.testing.assert_array_equal(restored.last_update_, strategy.last_update_)
    np.testing.assert_array_equal(restored.has_update_, strategy.has_update_)
    assert restored.cluster_labels() == strategy.cluster_labels()


def test_state_of_another_cluster_count_is_refused() -> None:
    state = make_jgl().state_dict()
    other = JointGradientLoss(n_clusters=2)
    other.initialize(CLIENTS, factory)
    with pytest.raises(ValueError, match="n_clusters=3"):
        other.load_state_dict(state)


GROUPS = [0, 0, 0, 1, 1, 1, 2, 2, 2]


def synthetic_run(rounds: int, seed: int = 4) -> RoundEngine:
    engine = RoundEngine(
        JointGradientLoss(fraction=1.0, n_clusters=3, batch_size=8),
        SyntheticFleet(GROUPS),
        model_factory=seeded_factory(),
        train_config=TrainConfig(),
        seed=seed,
    )
    for _ in range(rounds):
        engine.run_round()
    return engine


def test_recovers_synthetic_groups_and_resumes_identically(tmp_path: Path) -> None:
    # Prepare
    uninterrupted = synthetic_run(6)
    first = synthetic_run(2)
    save_state(tmp_path, first.state())

    # Execute
    resumed = RoundEngine(
        JointGradientLoss(fraction=1.0, n_clusters=3, batch_size=8),
        SyntheticFleet(GROUPS),
        model_factory=seeded_factory(),
        train_config=TrainConfig(),
        seed=4,
    )
    resumed.restore(load_state(tmp_path))
    for _ in range(4):
        resumed.run_round()

    # Assert
    truth = {f"c{i:02d}": g for i, g in enumerate(GROUPS)}
    assert clustering_scores(truth, uninterrupted.strategy.cluster_labels()).purity == 1.0
    assert resumed.strategy.cluster_labels() == uninterrupted.strategy.cluster_labels()
    assert resumed.strategy.round_metrics() == uninterrupted.strategy.round_metrics()
    for key, weights in uninterrupted.strategy.models.items():
        np.testing.assert_array_equal(resumed.strategy.models[key], weights)


# -- end to end on real training ------------------------------------------------------------


def toy_client(name: str, seed: int, flip: bool) -> ClientData:
    return ClientData(
        name,
        int(flip),
        toy_dataset(24, seed, flip=flip),
        toy_dataset(4, 100 + seed, flip=flip),
        toy_dataset(8, 200 + seed, flip=flip),
    )


def test_purity_rises_to_one_on_a_concept_shift_federation() -> None:
    # Prepare: the same two classes, named the other way round by group b (as the slots of
    # the overlapping-labels federation mean different conditions in different groups)
    clients = tuple(
        toy_client(f"{g}{i}", 10 * i + (g == "b"), g == "b") for g in "ab" for i in range(3)
    )
    federation = Federation("concept-shift", clients, 2, ("first-half", "second-half"))
    truth = {c.client_id: c.group for c in clients}
    engine = RoundEngine(
        JointGradientLoss(fraction=1.0, n_clusters=2, lam=0.2, batch_size=16),
        InProcessFleet(federation, tiny_cnn(), device=torch.device("cpu")),
        model_factory=lambda k: flatten_weights(tiny_cnn(k)),
        train_config=TrainConfig("adam", 0.05, 2, 8),
        seed=0,
    )

    # Execute
    purity = []
    for _ in range(4):
        engine.run_round()
        purity.append(clustering_scores(truth, engine.strategy.cluster_labels()).purity)

    # Assert
    assert purity[0] < 1.0
    assert purity[-2:] == [1.0, 1.0]
    assert engine.evaluate().accuracy == 1.0
