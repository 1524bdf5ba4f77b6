"""Tests for coordinator.strategies.flacc with synthetic updates (small numpy vectors)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from coordinator.strategies.agglomeration import UNKNOWN
from coordinator.strategies.base import StrategyState
from coordinator.strategies.flacc import FLACC
from faultfleet.tasks import Failure, FitResult
from faultfleet.types import FloatArray

E = np.eye(4, dtype=np.float32)
# Three update directions 120° apart: cross-group cosine ≈ −0.5.
DIRECTIONS = np.array(
    [[1.0, 0.0, 0.0, 0.0], [-0.5, 0.866, 0.0, 0.0], [-0.5, -0.866, 0.0, 0.0]], dtype=np.float32
)


def make_flacc(m: int, **options: Any) -> FLACC:
    strategy = FLACC(**options)
    strategy.initialize([f"c{i}" for i in range(m)], lambda i: np.zeros(4, dtype=np.float32))
    return strategy


def answer(strategy: FLACC, client: str, delta: Sequence[float], n: int = 10) -> FitResult:
    """A client that trained its current model and moved it by ``delta``."""
    key = strategy.model_key_for(client)
    update = np.asarray(delta, dtype=np.float32)
    weights: FloatArray = (strategy.models[key] + update).astype(np.float32)
    return FitResult(client, key, weights, update, n, 0.0)


def play_round(strategy: FLACC, server_round: int, seed: int = 0) -> None:
    """Synthetic round: client ci belongs to group i % 3; every fifth answer fails."""
    rng = np.random.default_rng([seed, server_round])
    instructions = strategy.configure_round(server_round, strategy.client_ids_, rng)
    results, failures = [], []
    for k, instruction in enumerate(instructions):
        client = instruction.client_id
        if (k + server_round) % 5 == 0:
            failures.append(Failure(client, "timeout"))
            continue
        group = int(client.removeprefix("c")) % 3
        delta = DIRECTIONS[group] + rng.normal(0.0, 0.15, 4)
        n = int(rng.integers(200, 600))
        results.append(answer(strategy, client, delta.tolist(), n))
    strategy.aggregate_round(server_round, results, failures)


def test_defaults_are_the_papers_mixed_fault_settings() -> None:
    # Execute
    strategy = FLACC()

    # Assert
    assert (strategy.fraction, strategy.alpha0, strategy.memory) == (0.25, 0.0, 10)
    assert (strategy.n_merge, strategy.n_sep, FLACC.name) == (1, 10, "flacc")


def test_initial_state_is_singletons_on_the_global_model() -> None:
    # Execute
    strategy = make_flacc(3)

    # Assert
    assert strategy.entities == [("c0",), ("c1",), ("c2",)]
    assert not strategy.separated
    assert strategy.last_alpha_min_cross is None
    assert list(strategy.models) == ["global"]
    assert np.all(strategy.alpha_ == UNKNOWN)
    assert strategy.cluster_labels() == {"c0": 0, "c1": 1, "c2": 2}
    assert strategy.fit_models(1, "c2") == ("global",)


def test_a_round_records_answered_pairs_merges_and_averages() -> None:
    # Prepare: c3 fails
    strategy = make_flacc(4, fraction=1.0)
    results = [
        answer(strategy, "c0", [1, 0, 0, 0], n=10),
        answer(strategy, "c1", [1, 1, 0, 0], n=20),
        answer(strategy, "c2", [0, 0, 1, 0], n=30),
    ]

    # Execute
    strategy.aggregate_round(4, results[::-1], [Failure("c3", "timeout")])

    # Assert: eq. 19 for answered pairs only, τ = t, then one merge (α_01 = 1/√2)
    assert strategy.alpha_[0, 1] == pytest.approx(2**-0.5)
    assert strategy.alpha_[0, 2] == pytest.approx(0.0)
    assert np.all(strategy.alpha_[3] == UNKNOWN)
    assert strategy.tau_[0, 1] == 4
    assert strategy.tau_[0, 3] == 0
    assert strategy.entities == [("c0", "c1"), ("c2",), ("c3",)]
    assert strategy.cluster_labels() == {"c0": 0, "c1": 0, "c2": 1, "c3": 2}
    assert strategy.num_clusters == 3
    assert strategy.last_alpha_min_cross == pytest.approx(2**-0.5)
    expected = np.array([10 + 20, 20, 30, 0], dtype=np.float32) / 60
    np.testing.assert_allclose(strategy.models["global"], expected, rtol=1e-6)


@pytest.mark.parametrize("next_pair", [False, True])
def test_next_pair_lets_a_later_pair_merge_when_eq9s_pair_fails_eq14(next_pair: bool) -> None:
    # Algorithm 1 as written; under the default rule {c0,c1}–c4 would fail the cohesion test
    # Prepare: {c0,c1}–{c2,c3} wins eq. 9 (0.6) but Φ < 0; {c0,c1}–c4 (0.55) passes
    strategy = make_flacc(5, memory=None, next_pair=next_pair, rule="paper")
    alpha = np.full((5, 5), UNKNOWN)
    for (i, j), value in {(0, 1): 0.9, (2, 3): 0.9, (0, 4): 0.55, (1, 4): 0.55}.items():
        alpha[i, j] = alpha[j, i] = value
    for i in (0, 1):
        for j in (2, 3):
            alpha[i, j] = alpha[j, i] = 0.6
    strategy.alpha_ = alpha
    strategy._set_entities([(0, 1), (2, 3), (4,)])

    # Execute: a round in which nobody answered still merges on remembered similarities
    strategy.aggregate_round(1, [], [])

    # Assert
    metrics = strategy.round_metrics()
    assert metrics["alpha_min_cross"] == pytest.approx(0.6)  # eq. 9's pair either way
    if next_pair:
        assert strategy.entities == [("c0", "c1", "c4"), ("c2", "c3")]
        assert metrics["pairs_passed_over"] == 1.0
        restored = FLACC(next_pair=True, rule="paper")
        restored.load_state_dict(strategy.state_dict())
        assert restored.round_metrics() == metrics
    else:
        assert strategy.entities == [("c0", "c1"), ("c2", "c3"), ("c4",)]
        assert "pairs_passed_over" not in metrics


@pytest.mark.parametrize(
    ("memory", "later_round", "merges"),
    [
        (2, 3, True),
        (2, 4, False),
        (0, 2, False),
        (10, 11, True),
        (10, 12, False),
        (None, 999, True),
    ],
)
def test_memory_keeps_a_pair_through_round_tau_plus_t(
    memory: int | None, later_round: int, merges: bool
) -> None:
    # Prepare: round 1 sees {c0, c1} and {c2, c3}; n_merge = 1 merges only c0–c1
    strategy = make_flacc(4, fraction=1.0, memory=memory)
    deltas: list[list[float]] = [[1, 0.1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0.2], [0, 0, 1, 0]]
    strategy.aggregate_round(1, [answer(strategy, f"c{i}", d) for i, d in enumerate(deltas)], [])

    # Execute: nobody answers at a later round; only remembered similarities can merge c2–c3
    strategy.aggregate_round(later_round, [], [])

    # Assert
    assert (("c2", "c3") in strategy.entities) is merges
    assert bool(strategy.alpha_[2, 3] == UNKNOWN) is not merges


@pytest.mark.parametrize("n_sep", [1, 3])
def test_separation_after_n_sep_rounds_without_any_merge(n_sep: int) -> None:
    # Prepare: orthogonal updates (cosine 0) never merge under α0 = 0
    strategy = make_flacc(4, fraction=1.0, n_sep=n_sep)
    rng = np.random.default_rng(0)
    ids = strategy.client_ids_

    for t in range(1, n_sep + 1):
        instructions = strategy.configure_round(t, ids, rng)
        assert not strategy.separated
        assert {i.model_keys for i in instructions} == {("global",)}
        strategy.aggregate_round(t, [answer(strategy, c, E[k]) for k, c in enumerate(ids)], [])
    assert not strategy.separated  # aggregating alone never separates: line 5 is a round's start

    # Execute
    instructions = strategy.configure_round(n_sep + 1, ids, rng)

    # Assert
    assert strategy.separated
    assert [i.model_keys for i in instructions] == [(f"cluster-{k}",) for k in range(4)]
    assert sorted(strategy.models) == [f"cluster-{k}" for k in range(4)]


def separated_after_one_merge() -> FLACC:
    """c0 and c1 merge at round 1; rounds 2 and 3 merge nothing; n_sep = 2."""
    strategy = make_flacc(4, fraction=1.0, n_sep=2)
    rng = np.random.default_rng(0)
    rounds = [[E[0], E[0], E[1], E[2]], [E[0], E[1], E[2], E[3]], [E[0], E[1], E[2], E[3]]]
    for t, deltas in enumerate(rounds, 1):
        strategy.configure_round(t, strategy.client_ids_, rng)
        assert not strategy.separated
        results = [answer(strategy, f"c{k}", d.tolist()) for k, d in enumerate(deltas)]
        strategy.aggregate_round(t, results, [])
    return strategy


def test_a_merge_restarts_the_separation_count() -> None:
    # Prepare
    strategy = separated_after_one_merge()
    global_model = strategy.models["global"].copy()

    # Execute
    instructions = strategy.configure_round(4, strategy.client_ids_, np.random.default_rng(0))

    # Assert
    assert strategy.separated
    assert strategy.entities == [("c0", "c1"), ("c2",), ("c3",)]
    assert [i.model_keys[0] for i in instructions] == [
        "cluster-0",
        "cluster-0",
        "cluster-1",
        "cluster-2",
    ]
    assert sorted(strategy.models) == ["cluster-0", "cluster-1", "cluster-2"]
    for model in strategy.models.values():
        np.testing.assert_array_equal(model, global_model)


def test_separated_entities_average_their_own_clients_only() -> None:
    # Prepare: c3 is not sampled this round
    strategy = separated_after_one_merge()
    strategy.configure_round(4, strategy.client_ids_, np.random.default_rng(0))
    before = {k: v.copy() for k, v in strategy.models.items()}
    results = [
        answer(strategy, "c0", [1, 0, 0, 0], n=10),
        answer(strategy, "c1", [0, 1, 0, 0], n=30),
        answer(strategy, "c2", [0, 0, 1, 0], n=5),
    ]

    # Execute
    strategy.aggregate_round(4, results, [Failure("c3", "offline")])

    # Assert
    np.testing.assert_allclose(
        strategy.models["cluster-0"], before["cluster-0"] + [0.25, 0.75, 0, 0], rtol=1e-6
    )
    np.testing.assert_allclose(strategy.models["cluster-1"], before["cluster-1"] + E[2])
    np.testing.assert_array_equal(strategy.models["cluster-2"], before["cluster-2"])
    assert strategy.entities == [("c0", "c1"), ("c2",), ("c3",)]
    assert strategy.cluster_labels() == {"c0": 0, "c1": 0, "c2": 1, "c3": 2}


def test_a_result_for_the_wrong_model_raises() -> None:
    # Prepare
    strategy = separated_after_one_merge()
    strategy.configure_round(4, strategy.client_ids_, np.random.default_rng(0))
    wrong = FitResult("c2", "cluster-0", E[0], E[0], 10, 0.0)

    # Execute / Assert
    with pytest.raises(ValueError, match="expected 'cluster-1'"):
        strategy.aggregate_round(4, [wrong], [])


def test_a_client_answering_twice_raises() -> None:
    # Prepare
    strategy = make_flacc(2)
    result = answer(strategy, "c0", [1, 0, 0, 0])

    # Execute / Assert
    with pytest.raises(ValueError, match="more than once"):
        strategy.aggregate_round(1, [result, result], [])


@pytest.mark.parametrize("seed", [0, 4, 11])
def test_synthetic_federation_finds_the_true_groups(seed: int) -> None:
    # Prepare
    strategy = make_flacc(12, fraction=0.5, n_sep=5)

    # Execute
    for t in range(1, 41):
        play_round(strategy, t, seed)

    # Assert
    assert strategy.separated
    assert strategy.entities == [
        ("c0", "c3", "c6", "c9"),
        ("c1", "c4", "c7", "c10"),
        ("c2", "c5", "c8", "c11"),
    ]
    assert sorted(strategy.models) == ["cluster-0", "cluster-1", "cluster-2"]
    assert strategy.model_key_for("c10") == "cluster-1"


def test_aggregate_does_not_depend_on_answer_order() -> None:
    # Prepare
    rng = np.random.default_rng(1)
    deltas = rng.normal(size=(5, 4))
    first, second = make_flacc(5, n_merge=2), make_flacc(5, n_merge=2)
    results = [answer(first, f"c{i}", d.tolist(), n=10 + i) for i, d in enumerate(deltas)]

    # Execute
    first.aggregate_round(1, results, [])
    second.aggregate_round(1, results[::-1], [])

    # Assert
    np.testing.assert_array_equal(first.alpha_, second.alpha_)
    np.testing.assert_array_equal(first.models["global"], second.models["global"])
    assert first.entities == second.entities


@pytest.mark.parametrize("stop", [2, 7, 25])
def test_resumed_run_equals_uninterrupted_run(stop: int) -> None:
    # Prepare
    options: dict[str, Any] = {"fraction": 0.5, "n_sep": 4, "memory": 6}
    uninterrupted = make_flacc(12, **options)
    for t in range(1, 36):
        play_round(uninterrupted, t)
    interrupted = make_flacc(12, **options)
    for t in range(1, stop + 1):
        play_round(interrupted, t)

    # Execute: through JSON and fresh array copies, as a checkpoint on disk would
    state = interrupted.state_dict()
    meta = json.loads(json.dumps(state.meta))
    resumed = FLACC(**options)
    resumed.load_state_dict(StrategyState({k: v.copy() for k, v in state.arrays.items()}, meta))
    for t in range(stop + 1, 36):
        play_round(resumed, t)

    # Assert
    assert resumed.entities == uninterrupted.entities
    assert resumed.separated
    assert uninterrupted.separated
    assert resumed.last_alpha_min_cross == uninterrupted.last_alpha_min_cross
    assert resumed.rounds_without_merge_ == uninterrupted.rounds_without_merge_
    np.testing.assert_array_equal(resumed.alpha_, uninterrupted.alpha_)
    np.testing.assert_array_equal(resumed.tau_, uninterrupted.tau_)
    assert list(resumed.models) == list(uninterrupted.models)
    for key, model in uninterrupted.models.items():
        np.testing.assert_array_equal(resumed.models[key], model)


def test_separation_happens_before_the_last_resume_point() -> None:
    # Prepare: the resume test's settings; stop = 25 must resume a separated run
    strategy = make_flacc(12, fraction=0.5, n_sep=4, memory=6)

    # Execute
    for t in range(1, 26):
        play_round(strategy, t)

    # Assert
    assert strategy.separated


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"alpha0": -1.0}, r"alpha0 must be a finite number in \(-1, 1\], got -1.0; .*eq. 16"),
        ({"alpha0": 1.5}, r"alpha0 must be a finite number in \(-1, 1\], got 1.5"),
        ({"alpha0": float("nan")}, r"alpha0 must be a finite number in \(-1, 1\], got nan"),
        ({"alpha0": "0"}, r"alpha0 must be a finite number in \(-1, 1\], got '0'"),
        ({"memory": -1}, r"memory must be an integer >= 0 or none \(T = ∞, never forget\)"),
        ({"memory": 2.5}, r"memory must be an integer >= 0 .*got 2.5"),
        ({"n_merge": 0}, r"n_merge must be an integer >= 1, got 0"),
        ({"n_sep": 0}, r"n_sep must be an integer >= 1, got 0; .*the default 10"),
        ({"n_sep": True}, r"n_sep must be an integer >= 1, got True"),
        ({"fraction": 0.0}, r"fraction must be a finite number in \(0, 1\], got 0.0"),
        ({"next_pair": "yes"}, r"next_pair must be true or false, got 'yes'"),
        ({"next_pair": 1}, r"next_pair must be true or false, got 1"),
    ],
)
def test_invalid_hyper_parameters_raise_on_initialize(options: dict[str, Any], match: str) -> None:
    # Prepare: __init__ only stores
    strategy = FLACC(**options)

    # Execute / Assert
    with pytest.raises(ValueError, match=match):
        strategy.initialize(["a", "b"], lambda i: np.zeros(4, dtype=np.float32))


@pytest.mark.parametrize(("rule", "merged"), [("cohesion", False), ("paper", True)])
def test_the_default_rule_refuses_two_groups_that_algorithm_1_merges(
    rule: str, merged: bool
) -> None:
    # Prepare: two groups of two, within cosines 0.5, the two cross pairs remembered 0.1
    # and 0.55 (Φ = 0.55 − 0.5 > 0, α_min^cross = 0.1 > α0 = 0)
    strategy = make_flacc(4, memory=None, rule=rule)
    alpha = np.full((4, 4), UNKNOWN)
    for (i, j), value in {(0, 1): 0.5, (2, 3): 0.5, (0, 2): 0.1, (1, 3): 0.55}.items():
        alpha[i, j] = alpha[j, i] = value
    strategy.alpha_ = alpha
    strategy._set_entities([(0, 1), (2, 3)])

    # Execute: a round in which nobody answered merges on remembered similarities
    strategy.aggregate_round(1, [], [])

    # Assert: the cohesion test compares the cross mean 0.325 with 0.7 · 0.5
    assert (strategy.num_clusters == 1) is merged
    assert len(strategy.merges) == int(merged)
    assert strategy.rounds_without_merge_ == int(not merged)
