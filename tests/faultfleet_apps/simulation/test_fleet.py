"""The in-process fleet: task routing, IFCA choice, failures, byte counts, evaluation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coordinator.engine.fleet import Fleet
from edge_agent.training import local_update
from faultfleet.models.weights import flatten_weights, load_weights
from faultfleet.tasks import EvaluateTask, FitTask, Proximal, Split, TrainConfig
from faultfleet.types import FloatArray
from faultfleet_apps.simulation.fleet import InProcessFleet
from signal_pipeline.federation import ClientData, Dataset, Federation
from tests.edge_agent.test_training import tiny_cnn, toy_dataset

CPU = torch.device("cpu")
CONFIG = TrainConfig("adam", 0.01, 2, 8)
N_PARAMS = 82
"""Parameters of ``tiny_cnn``: 4·3 + 4 + 32·2 + 2."""


def client(name: str, seed: int, *, flip: bool = False, n_test: int = 6) -> ClientData:
    train = toy_dataset(12 + seed, seed, flip=flip)
    return ClientData(
        name,
        int(flip),
        train,
        toy_dataset(4, 100 + seed, flip=flip),
        toy_dataset(n_test, 200 + seed, flip=flip) if n_test else train.subset(np.arange(0)),
    )


def federation() -> Federation:
    clients = (client("a", 0), client("b", 1), client("c", 2, flip=True), client("d", 3))
    return Federation("toy", clients, 2, ("first-half", "second-half"))


def make_fleet(
    *, batched: bool = True, max_group: int | None = None, offline: tuple[str, ...] = ()
) -> InProcessFleet:
    return InProcessFleet(
        federation(), tiny_cnn(), device=CPU, batched=batched, max_group=max_group, offline=offline
    )


def start() -> FloatArray:
    return flatten_weights(tiny_cnn(7))


def fitted_to(client_id: str) -> FloatArray:
    """Weights trained well on one client's training data."""
    data = {c.client_id: c for c in federation().clients}[client_id].train
    return local_update(tiny_cnn(), start(), data, TrainConfig("adam", 0.05, 5, 8), 0, CPU).weights


def test_is_a_fleet_listing_clients_and_availability() -> None:
    fleet: Fleet = make_fleet(offline=("b",))

    assert fleet.client_ids() == ["a", "b", "c", "d"]
    assert fleet.available() == ["a", "c", "d"]


def test_set_offline_replaces_the_offline_set_and_rejects_unknown_clients() -> None:
    fleet = make_fleet(offline=("b",))

    fleet.set_offline(["a", "d"])

    assert fleet.available() == ["b", "c"]
    with pytest.raises(ValueError, match=r"unknown clients \['zz'\]"):
        fleet.set_offline(["zz"])


def test_set_clients_keeps_the_federations_order_and_fails_tasks_of_non_members() -> None:
    # Prepare: b is offline; a leaves, and the members are given out of order
    fleet = make_fleet(offline=("b",))

    # Execute
    fleet.set_clients(["d", "b", "c"])
    outcome = fleet.fit(1, [FitTask(c, {"m": start()}, CONFIG, seed=0) for c in ("a", "c")])

    # Assert
    assert fleet.client_ids() == ["b", "c", "d"]
    assert fleet.available() == ["c", "d"]
    assert [r.client_id for r in outcome.results] == ["c"]
    assert [(f.client_id, f.reason) for f in outcome.failures] == [
        ("a", "client is not a member: it left or has not joined")
    ]


def test_set_clients_rejects_unknown_and_repeated_ids() -> None:
    fleet = make_fleet()

    with pytest.raises(ValueError, match=r"unknown clients \['zz'\] members.*\['a', 'b'"):
        fleet.set_clients(["a", "zz"])
    with pytest.raises(ValueError, match="members must be unique"):
        fleet.set_clients(["a", "a"])
    assert fleet.client_ids() == ["a", "b", "c", "d"]


@pytest.mark.parametrize(("batched", "max_group"), [(True, None), (True, 1), (False, None)])
def test_fit_trains_each_task_like_local_update(batched: bool, max_group: int | None) -> None:
    fleet, data = make_fleet(batched=batched, max_group=max_group), federation()
    tasks = [FitTask(c, {"m": start()}, CONFIG, seed=i) for i, c in enumerate(["d", "a", "c"])]

    outcome = fleet.fit(1, tasks)

    assert [r.client_id for r in outcome.results] == ["d", "a", "c"]
    for task, result in zip(tasks, outcome.results, strict=True):
        train = data.clients[fleet.client_ids().index(task.client_id)].train
        expected = local_update(tiny_cnn(), task.models["m"], train, CONFIG, task.seed, CPU)
        np.testing.assert_allclose(result.weights, expected.weights, atol=1e-5, rtol=1e-4)
        np.testing.assert_allclose(result.delta, result.weights - task.models["m"], atol=1e-7)
        assert result.model_key == "m"
        assert result.num_samples == len(train)
        assert result.train_loss == pytest.approx(expected.train_loss, rel=1e-4)


def test_fit_groups_tasks_by_config() -> None:
    fleet = make_fleet()
    sgd = TrainConfig("sgd", 0.1, 1, 4)
    tasks = [FitTask("a", {"m": start()}, CONFIG, 0), FitTask("b", {"m": start()}, sgd, 1)]

    outcome = fleet.fit(1, tasks)

    train_b = federation().clients[1].train
    expected = local_update(tiny_cnn(), start(), train_b, sgd, 1, CPU)
    np.testing.assert_allclose(outcome.results[1].weights, expected.weights, atol=1e-6)


def test_fit_failures_and_byte_counts() -> None:
    fleet = make_fleet(offline=("b",))
    two = {"x": start(), "y": start()}
    pulled = {"m": start()}
    tasks = [
        FitTask("a", two, CONFIG, 0),
        FitTask("b", {"m": start()}, CONFIG, 1),
        FitTask(
            "a",
            pulled,
            CONFIG,
            5,
            proximal=(Proximal(pulled["m"], 1.0), Proximal(start(), 0.1, "embedding")),
        ),
        FitTask("nobody", {"m": start()}, CONFIG, 2),
        FitTask("d", {}, CONFIG, 3),
        FitTask("c", {"m": start()}, CONFIG, 4),
    ]

    outcome = fleet.fit(3, tasks)

    assert [r.client_id for r in outcome.results] == ["a", "a", "c"]
    assert [(f.client_id, f.reason) for f in outcome.failures] == [
        ("b", "client is offline"),
        ("nobody", "unknown client: not in federation 'toy'"),
        ("d", "task carries no model"),
    ]
    # models, plus the one proximal target that is not a model of its task
    assert outcome.bytes_down == 7 * N_PARAMS * 4
    assert outcome.bytes_up == 3 * N_PARAMS * 4


def test_fit_chooses_the_candidate_that_fits_the_client_ifca() -> None:
    fleet = make_fleet()
    fitted = fitted_to("c")
    candidates = {"random": start(), "fitted": fitted}

    outcome = fleet.fit(1, [FitTask("c", candidates, CONFIG, 0)])

    (result,) = outcome.results
    assert result.model_key == "fitted"
    np.testing.assert_allclose(result.delta, result.weights - fitted, atol=1e-7)


def hand_evaluation(weights: FloatArray, data: Dataset) -> tuple[float, float]:
    """Accuracy and mean cross-entropy from the module's own forward pass and numpy."""
    model = tiny_cnn()
    load_weights(model, weights)
    with torch.no_grad():
        logits = model(torch.from_numpy(data.x)).numpy().astype(np.float64)
    log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    accuracy = float(np.mean(logits.argmax(axis=1) == data.y))
    return accuracy, float(-log_softmax[np.arange(len(data)), data.y].mean())


@pytest.mark.parametrize("split", [Split.TEST, Split.VAL, Split.TRAIN])
def test_evaluate_matches_a_hand_computation(split: Split) -> None:
    fleet, data = make_fleet(), federation()
    weights = fitted_to("a")
    tasks = [EvaluateTask("d", {"m": weights}, split), EvaluateTask("c", {"m": weights}, split)]

    outcome = fleet.evaluate(1, tasks)

    assert [r.client_id for r in outcome.results] == ["d", "c"]
    for result, index in zip(outcome.results, [3, 2], strict=True):
        held = data.clients[index].splits()[split.value]
        accuracy, loss = hand_evaluation(weights, held)
        assert result.accuracy == accuracy
        assert result.loss == pytest.approx(loss, rel=1e-5)
        assert result.num_samples == len(held)
        assert result.model_key == "m"
    assert outcome.results[0].accuracy > 0.9 > outcome.results[1].accuracy


def test_evaluate_chooses_by_training_loss() -> None:
    fleet = make_fleet()
    candidates = {"plain": fitted_to("a"), "flipped": fitted_to("c")}
    tasks = [EvaluateTask(c, candidates) for c in ("a", "b", "c", "d")]

    outcome = fleet.evaluate(1, tasks)

    assert [r.model_key for r in outcome.results] == ["plain", "plain", "flipped", "plain"]


def test_evaluate_failures() -> None:
    clients = (client("a", 0), client("e", 1, n_test=0))
    fleet = InProcessFleet(Federation("toy", clients, 2, ("0", "1")), tiny_cnn(), device=CPU)
    fleet.set_offline(["a"])
    tasks = [EvaluateTask(c, {"m": start()}) for c in ("a", "e", "nobody")]

    outcome = fleet.evaluate(1, tasks)

    assert outcome.results == ()
    assert [f.reason for f in outcome.failures] == [
        "client is offline",
        "this agent holds no test windows",
        "unknown client: not in federation 'toy'",
    ]
