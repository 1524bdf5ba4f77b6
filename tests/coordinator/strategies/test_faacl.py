"""Tests for coordinator.strategies.faacl: options, initialisation, training, real training.

Support and merge are in ``test_faacl_probing.py``, flat and hierarchical progress in
``test_faacl_hierarchy.py``, joining and leaving in ``test_faacl_membership.py`` and saved
state in ``test_faacl_state.py``; the shared helpers in ``faacl_helpers.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coordinator.engine.rounds import RoundEngine
from coordinator.strategies.faacl import FAACL
from coordinator.strategies.registry import make_strategy
from faultfleet.models.weights import flatten_weights
from faultfleet.tasks import FitResult, TrainConfig
from faultfleet_apps.simulation.fleet import InProcessFleet
from signal_pipeline.federation import ClientData, Federation
from tests.coordinator.fakes import seeded_factory
from tests.coordinator.strategies.faacl_helpers import make, members, probe, train_all, zeros
from tests.edge_agent.test_training import tiny_cnn, toy_dataset

# -- options ---------------------------------------------------------------------------------


def test_defaults() -> None:
    strategy = FAACL()
    assert FAACL.name == "faacl"
    assert FAACL.probes
    assert (strategy.version, strategy.epsilon, strategy.alpha) == (1, 1.0, 0.05)
    assert strategy.loss_range == 10.0
    assert (strategy.hierarchical, strategy.init_rounds, strategy.patience) == (True, 3, 3)
    assert strategy.fraction == 0.25


def test_registry_builds_it_with_options() -> None:
    strategy = make_strategy("faacl", fraction=0.5, options={"version": 2, "epsilon": 0.7})
    assert isinstance(strategy, FAACL)
    assert (strategy.fraction, strategy.version, strategy.epsilon) == (0.5, 2, 0.7)


# -- initialisation (Algorithm 2) ------------------------------------------------------------


def test_initialisation_gives_singletons_on_one_model() -> None:
    # Execute
    strategy = FAACL(init_rounds=2)
    strategy.initialize(["a", "b", "c"], seeded_factory(3))

    # Assert
    assert [strategy.model_key_for(c) for c in "abc"] == ["cluster-0", "cluster-1", "cluster-2"]
    assert strategy.cluster_labels() == {"a": 0, "b": 1, "c": 2}
    for key in strategy.models:
        np.testing.assert_array_equal(strategy.models[key], seeded_factory(3)(0))
    assert strategy.partitions_ == {}  # nobody trained yet
    assert not strategy.frozen


def test_initial_rounds_train_every_available_device_and_do_not_probe() -> None:
    # Prepare
    strategy = FAACL(fraction=0.25, init_rounds=2)
    strategy.initialize([f"c{i}" for i in range(8)], zeros)
    rng = np.random.default_rng(0)
    available = ["c0", "c2", "c3", "c7"]

    # Execute / Assert
    for server_round in (1, 2):
        assert strategy.configure_probe(server_round, 0, available, rng) is None
        instructions = strategy.configure_round(server_round, available, rng)
        assert [(i.client_id, i.model_keys) for i in instructions] == [
            (c, (strategy.model_key_for(c),)) for c in available
        ]
    assert len(strategy.configure_round(3, available, rng)) == 2  # fraction 0.25 of 8


def test_a_cluster_enters_the_clustering_once_trained() -> None:
    # Prepare: hierarchical, c3 offline in round 1
    strategy = make(hierarchical=True)
    rng = np.random.default_rng(0)
    instructions = strategy.configure_round(1, ["c0", "c1", "c2"], rng)
    results = [
        FitResult(
            i.client_id, i.model_keys[0], np.ones(3, np.float32), np.ones(3, np.float32), 5, 0.0
        )
        for i in instructions
    ]

    # Execute
    strategy.aggregate_round(1, results, ())

    # Assert: one singleton partition each for the trained clusters; c3 waits outside
    assert [c.partition for c in strategy.clusters_.values()] == [0, 1, 2, None]
    assert all(p.stable for p in strategy.partitions_.values())
    np.testing.assert_array_equal(strategy.models["cluster-3"], zeros(0))


# -- training (Algorithm 6) ------------------------------------------------------------------


def test_training_includes_the_clusters_a_device_supports() -> None:
    # Prepare: cluster-1 supports cluster-0 and cluster-2
    strategy = make(3, epsilon=0.5)
    train_all(strategy, 1)
    useful = {("c0", "cluster-1"): 0.0, ("c2", "cluster-1"): 0.0}
    probe(strategy, 2, lambda d, k: useful.get((d, k), 4.0))

    # Execute
    instructions = strategy.configure_round(2, ["c1", "c2"], np.random.default_rng(0))

    # Assert: one single-model instruction per model, own model first
    assert [(i.client_id, i.model_keys) for i in instructions] == [
        ("c1", ("cluster-1",)),
        ("c1", ("cluster-0",)),
        ("c1", ("cluster-2",)),
        ("c2", ("cluster-2",)),
    ]


def test_each_model_averages_its_members_and_supporters_updates() -> None:
    # Prepare: cluster-1 supports cluster-0
    strategy = make(3, epsilon=0.5)
    train_all(strategy, 1)
    probe(strategy, 2, lambda d, k: 0.0 if (d, k) == ("c0", "cluster-1") else 4.0)
    before = {k: v.copy() for k, v in strategy.models.items()}

    def update(client: str, key: str, value: float, n: int) -> FitResult:
        return FitResult(
            client, key, np.full(3, value, np.float32), np.zeros(3, np.float32), n, 0.0
        )

    results = [update("c0", "cluster-0", 1.0, 10), update("c1", "cluster-1", 2.0, 30)]
    results.append(update("c1", "cluster-0", 3.0, 30))

    # Execute
    strategy.aggregate_round(2, results, ())

    # Assert: (10·1 + 30·3) / 40 = 2.5; cluster-2 got nothing and keeps its model
    np.testing.assert_allclose(strategy.models["cluster-0"], 2.5)
    np.testing.assert_allclose(strategy.models["cluster-1"], 2.0)
    np.testing.assert_array_equal(strategy.models["cluster-2"], before["cluster-2"])


def test_training_a_model_the_device_does_not_serve_is_refused() -> None:
    strategy = make(3)
    train_all(strategy, 1)
    intruding = FitResult("c2", "cluster-0", np.ones(3, np.float32), np.ones(3, np.float32), 5, 0.0)
    with pytest.raises(ValueError, match="neither its cluster's model nor one its cluster"):
        strategy.aggregate_round(2, [intruding], ())


# -- end to end on real training -------------------------------------------------------------


def toy_federation() -> Federation:
    """Four machines of the two-bump task; "c" and "d" name the classes the other way round."""

    def machine(name: str, seed: int, flip: bool) -> ClientData:
        return ClientData(
            name,
            int(flip),
            toy_dataset(24, seed, flip=flip),
            toy_dataset(12, 100 + seed, flip=flip),
            toy_dataset(12, 200 + seed, flip=flip),
        )

    clients = tuple(machine(n, i, n in "cd") for i, n in enumerate("abcd"))
    return Federation("toy", clients, 2, ("first-half", "second-half"))


@pytest.mark.parametrize("version", [1, 2])
def test_contradictory_groups_end_in_separate_clusters_on_real_training(version: int) -> None:
    # Prepare: a tiny CNN on four in-process machines, two with swapped labels
    fleet = InProcessFleet(toy_federation(), tiny_cnn(), device=torch.device("cpu"))
    strategy = FAACL(fraction=1.0, version=version, init_rounds=2)
    engine = RoundEngine(
        strategy,
        fleet,
        model_factory=lambda i: flatten_weights(tiny_cnn(i)),
        train_config=TrainConfig("adam", 0.05, 3, 8),
        seed=0,
    )

    # Execute
    reports = [engine.run_round() for _ in range(6)]

    # Assert: same-label machines merged, contradictory ones apart, and the models work
    assert [r.probe_steps for r in reports[:2]] == [0, 0]
    assert members(strategy) == [["a", "b"], ["c", "d"]]
    assert strategy.frozen
    assert strategy.round_metrics()["support_edges"] == 0.0
    assert engine.evaluate().accuracy > 0.9
