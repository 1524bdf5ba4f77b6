"""Tests for coordinator.strategies.fedac on hand-made models, plus one real federation.

The hand-made federation is described in :mod:`tests.coordinator.strategies.fedac_helpers`;
the PCA map, the re-clustering and the cluster-number tuning are tested in
``test_fedac_centres.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from coordinator.engine.rounds import RoundEngine
from coordinator.engine.state import load_state, save_state
from coordinator.strategies.fedac import EMBEDDING, FedAC
from coordinator.strategies.fedac_centres import client_key
from coordinator.strategies.keys import cluster_key
from coordinator.strategies.registry import make_strategy
from faultfleet.errors import UsageError
from faultfleet.models.weights import flatten_weights
from faultfleet.tasks import FitResult, ProximalTerm, TrainConfig
from faultfleet_apps.simulation.fleet import InProcessFleet
from signal_pipeline.federation import ClientData, Federation
from tests.coordinator.fakes import SyntheticFleet, seeded_factory
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
)
from tests.edge_agent.test_training import tiny_cnn, toy_dataset

# -- instructions -------------------------------------------------------------------------


def test_every_client_trains_its_own_model_with_the_lambda_term_during_warmup() -> None:
    strategy = make(warmup=2, lam=0.3)

    instructions = strategy.configure_round(1, CLIENTS, np.random.default_rng(0))

    assert [i.client_id for i in instructions] == list(CLIENTS)
    for ins in instructions:
        assert ins.model_keys == (client_key(ins.client_id),)
        assert ins.proximal == (ProximalTerm(EMBEDDING, 0.3, "embedding"),)


def test_instructions_carry_the_centre_term_over_all_and_the_embedding_term() -> None:
    strategy = make(n_clusters=2, mu=0.5, lam=0.3)
    answer(strategy, 1, GROUPED)

    instructions = strategy.configure_round(2, CLIENTS, np.random.default_rng(0))

    labels = strategy.labels_
    for ins in instructions:
        assert ins.proximal == (
            ProximalTerm(labels[ins.client_id], 0.5, "all"),
            ProximalTerm(EMBEDDING, 0.3, "embedding"),
        )
    assert set(labels.values()) == {cluster_key(0), cluster_key(1)}


def test_zero_strengths_send_no_terms() -> None:
    strategy = make(mu=0.0, lam=0.0)
    answer(strategy, 1, GROUPED)

    assert all(
        i.proximal == () for i in strategy.configure_round(2, CLIENTS, np.random.default_rng(0))
    )


def test_predictions_use_personal_models_but_labels_are_the_clusters() -> None:
    strategy = make(n_clusters=2)
    answer(strategy, 1, GROUPED)

    assert strategy.predict_models("a1") == (client_key("a1"),)
    assert groups_of(strategy) == {frozenset(A), frozenset(B)}
    assert strategy.num_clusters == 2


# -- aggregation ------------------------------------------------------------------------


def test_the_global_embedding_is_the_unweighted_mean_of_the_new_models() -> None:
    strategy = make()
    models = {"a0": np.full(DIM, 1.0, np.float32), "b1": np.full(DIM, 4.0, np.float32)}

    answer(strategy, 1, models, samples={"a0": 1, "b1": 99})

    np.testing.assert_allclose(strategy.models[EMBEDDING], np.full(DIM, 2.5))
    np.testing.assert_array_equal(strategy.models[client_key("b1")], models["b1"])
    np.testing.assert_array_equal(strategy.models[client_key("a1")], factory(0))


def test_a_round_without_answers_changes_nothing() -> None:
    strategy = make(n_clusters=2)
    answer(strategy, 1, GROUPED)
    labels, keys = dict(strategy.labels_), list(strategy.models)

    strategy.aggregate_round(2, (), ())

    assert strategy.labels_ == labels
    assert list(strategy.models) == keys


def test_a_client_must_train_its_own_model() -> None:
    strategy = make()
    w = GROUPED["a0"]
    wrong = FitResult("a0", client_key("a1"), w, w, 1, 0.0)

    with pytest.raises(ValueError, match="expected its own model 'client/a0'"):
        strategy.aggregate_round(1, [wrong], ())


# -- state ------------------------------------------------------------------------------


def engine(strategy: FedAC, seed: int = 5) -> RoundEngine:
    fleet = SyntheticFleet([0, 0, 0, 1, 1, 1, 2, 2, 2], dim=12, noise=0.3)
    return RoundEngine(
        strategy, fleet, model_factory=seeded_factory(12), train_config=TrainConfig(), seed=seed
    )


SMALL: dict[str, object] = {
    "fraction": 0.7,
    "n_clusters": 1,
    "components": 5,
    "buffer_size": 9,
    "map_every": 2,
    "warmup": 1,
    "tune_every": 1,
}


def test_state_round_trips_through_disk_with_map_and_buffer(tmp_path: Path) -> None:
    first = engine(FedAC(**SMALL))  # type: ignore[arg-type]
    for _ in range(4):
        first.run_round()
    save_state(tmp_path, first.state())

    second = engine(FedAC(**SMALL))  # type: ignore[arg-type]
    second.restore(load_state(tmp_path))

    a, b = first.strategy, second.strategy
    assert isinstance(a, FedAC)
    assert isinstance(b, FedAC)
    assert b.labels_ == a.labels_
    assert b.trained_ == a.trained_
    assert (b.next_cluster_, b.seeded_round_, b.tuned_round_, b.map_round_) == (
        a.next_cluster_,
        a.seeded_round_,
        a.tuned_round_,
        a.map_round_,
    )
    np.testing.assert_array_equal(b.buffer_, a.buffer_)
    np.testing.assert_array_equal(b.directions_, a.directions_)
    assert b.round_metrics() == a.round_metrics()
    for _ in range(4):
        first.run_round()
        second.run_round()
    assert b.cluster_labels() == a.cluster_labels()
    assert list(b.models) == list(a.models)
    for key, weights in a.models.items():
        np.testing.assert_array_equal(b.models[key], weights)


def test_the_synthetic_fleet_grows_from_one_cluster_to_its_three_groups() -> None:
    # Its groups are far apart (G_c of a true group ≈ 0.01, of two groups together ≈ 0.3).
    options = {**SMALL, "fraction": 1.0, "gc_low": 0.001, "gc_high": 0.1}
    run = engine(FedAC(**options))  # type: ignore[arg-type]
    for _ in range(6):
        run.run_round()

    labels = run.strategy.cluster_labels()
    found = {frozenset(c for c in labels if labels[c] == n) for n in labels.values()}
    assert found == {frozenset(f"c{3 * g + i:02d}" for i in range(3)) for g in range(3)}


def test_a_checkpoint_with_the_old_centre_keys_loads_and_runs_on(tmp_path: Path) -> None:
    # Prepare: a run that has seeded and tuned, saved as it was written when centres were
    # keyed cluster/<n>
    first = engine(FedAC(**SMALL))  # type: ignore[arg-type]
    for _ in range(4):
        first.run_round()
    written = save_state(tmp_path, first.state()) / "state.json"
    text = written.read_text(encoding="utf-8")
    assert '"cluster-' in text
    written.write_text(text.replace('"cluster-', '"cluster/'), encoding="utf-8")

    # Execute
    second = engine(FedAC(**SMALL))  # type: ignore[arg-type]
    second.restore(load_state(tmp_path))

    # Assert: the same keys as the run that wrote it, in the same order, and the same run on
    a, b = first.strategy, second.strategy
    assert list(b.models) == list(a.models)
    assert b.cluster_labels() == a.cluster_labels()
    for _ in range(3):
        first.run_round()
        second.run_round()
    assert list(b.models) == list(a.models)
    assert b.cluster_labels() == a.cluster_labels()
    for key, weights in a.models.items():
        np.testing.assert_array_equal(b.models[key], weights)


# -- options ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"buffer_size": 50}, "fedac: buffer_size must be > components"),
        ({"components": 10, "buffer_size": 10}, "use at least 20"),
        ({"gc_low": 0.8, "gc_high": 0.2}, "fedac: gc_low must be < gc_high"),
        ({"gc_low": 0.5, "gc_high": 0.5}, "gc_low must be < gc_high, got gc_low=0.5"),
    ],
)
def test_rules_between_two_options_are_refused_naming_both(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        make_strategy("fedac", options=options)


def test_unknown_options_are_refused() -> None:
    with pytest.raises(ValueError, match="has no option k"):
        make_strategy("fedac", options={"k": 3})


# -- a real federation ------------------------------------------------------------------


def test_tuning_grows_one_cluster_into_the_two_concepts_of_a_real_federation() -> None:
    """Six clients on the toy windows, three with flipped labels; started from K = 1."""
    clients = tuple(
        ClientData(
            f"m{i}",
            i % 2,
            toy_dataset(24, i, flip=bool(i % 2)),
            toy_dataset(8, 50 + i, flip=bool(i % 2)),
            toy_dataset(16, 100 + i, flip=bool(i % 2)),
        )
        for i in range(6)
    )
    federation = Federation("toy", clients, 2, ("first-half", "second-half"))
    fleet = InProcessFleet(federation, tiny_cnn(), device=torch.device("cpu"))
    strategy = FedAC(
        fraction=1.0,
        n_clusters=1,
        warmup=1,
        tune_every=1,
        components=4,
        buffer_size=20,
        mu=0.01,
        lam=0.01,
    )
    run = RoundEngine(
        strategy,
        fleet,
        model_factory=lambda j: flatten_weights(tiny_cnn(j)),
        train_config=TrainConfig("adam", 0.01, 2, 8),
        seed=0,
    )
    for _ in range(4):
        run.run_round()

    assert groups_of(strategy) == {frozenset({"m0", "m2", "m4"}), frozenset({"m1", "m3", "m5"})}
    assert run.evaluate().accuracy > 0.9
