"""The client executor: every task kind against the reference primitives, the IFCA choice,
the preconditions on the client's data and the divergence rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_agent.batching import minibatch
from edge_agent.evaluation import evaluate, loss_and_gradient
from edge_agent.executor import AnyTask, ClientExecutor, DataNeeds, data_problem, fit_answer
from edge_agent.training import LocalUpdate, local_update
from faultfleet.models.weights import flatten_weights
from faultfleet.tasks import (
    EvaluateResult,
    EvaluateTask,
    Failure,
    FitResult,
    FitTask,
    GradientResult,
    GradientTask,
    LossesResult,
    LossesTask,
    Proximal,
    Split,
    TrainConfig,
)
from faultfleet.types import FloatArray
from signal_pipeline.federation import ClientData, Dataset
from tests.edge_agent.test_training import LENGTH, tiny_cnn, toy_dataset

CPU = torch.device("cpu")
CONFIG = TrainConfig("adam", 0.01, 2, 8)


def client(*, train: int = 20, flip: bool = False) -> ClientData:
    return ClientData(
        "m01",
        0,
        toy_dataset(train, 1, flip=flip),
        toy_dataset(6, 2, flip=flip),
        toy_dataset(9, 3, flip=flip),
    )


def executor(data: ClientData | None = None) -> ClientExecutor:
    return ClientExecutor(
        data or client(), tiny_cnn(), sample_shape=(1, LENGTH), n_classes=2, device=CPU
    )


def start(seed: int = 7) -> FloatArray:
    return flatten_weights(tiny_cnn(seed))


def fitted(flip: bool) -> FloatArray:
    """Weights trained well on a client's concept (labels flipped or not)."""
    data = client(flip=flip).train
    return local_update(tiny_cnn(), start(), data, TrainConfig("adam", 0.05, 5, 8), 0, CPU).weights


def test_fit_is_local_update_with_the_tasks_seed_and_proximal_terms() -> None:
    pull = (Proximal(start(9), 0.5), Proximal(start(8), 0.1, "embedding"))
    task = FitTask("m01", {"m": start()}, CONFIG, seed=4, proximal=pull)

    result = executor().fit(task)

    expected = local_update(tiny_cnn(), start(), client().train, CONFIG, 4, CPU, proximal=pull)
    assert isinstance(result, FitResult)
    np.testing.assert_array_equal(result.weights, expected.weights)
    np.testing.assert_array_equal(result.delta, expected.delta)
    assert (result.model_key, result.num_samples) == ("m", 20)
    assert result.train_loss == expected.train_loss


def test_the_seed_decides_the_batch_order() -> None:
    first, again, other = (
        executor().fit(FitTask("m01", {"m": start()}, CONFIG, seed=s)) for s in (1, 1, 2)
    )

    assert isinstance(first, FitResult)
    assert isinstance(again, FitResult)
    assert isinstance(other, FitResult)
    np.testing.assert_array_equal(first.weights, again.weights)
    assert not np.array_equal(first.weights, other.weights)


@pytest.mark.parametrize(("flip", "chosen"), [(False, "plain"), (True, "flipped")])
def test_fit_and_evaluate_choose_the_candidate_of_lowest_training_loss(
    flip: bool, chosen: str
) -> None:
    candidates = {"plain": fitted(False), "flipped": fitted(True)}
    run = executor(client(flip=flip))

    trained = run.fit(FitTask("m01", candidates, CONFIG, seed=0))
    evaluated = run.evaluate(EvaluateTask("m01", candidates, Split.VAL))

    assert isinstance(trained, FitResult)
    assert isinstance(evaluated, EvaluateResult)
    assert trained.model_key == evaluated.model_key == chosen
    assert evaluated.accuracy > 0.8


def test_equal_candidates_go_to_the_first_key() -> None:
    same = start()

    result = executor().evaluate(EvaluateTask("m01", {"b": same, "a": same.copy()}))

    assert isinstance(result, EvaluateResult)
    assert result.model_key == "b"


def test_evaluate_is_the_reference_evaluation_of_the_split() -> None:
    weights = fitted(False)

    result = executor().evaluate(EvaluateTask("m01", {"m": weights}, Split.TEST))

    expected = evaluate(tiny_cnn(), weights, client().test, device=CPU)
    assert result == EvaluateResult("m01", "m", expected.accuracy, expected.loss, 9)


@pytest.mark.parametrize("per_sample", [True, False])
def test_losses_are_the_reference_losses_of_every_model(per_sample: bool) -> None:
    models = {"one": start(1), "two": start(2)}

    result = executor().losses(LossesTask("m01", models, Split.VAL, per_sample))

    assert isinstance(result, LossesResult)
    assert list(result.losses) == ["one", "two"]
    assert result.num_samples == 6
    for key, weights in models.items():
        reference = evaluate(tiny_cnn(), weights, client().val, device=CPU)
        expected = reference.losses if per_sample else np.array([reference.loss], np.float32)
        np.testing.assert_array_equal(result.losses[key], expected)


def test_gradients_are_the_reference_on_the_seeded_minibatch() -> None:
    models = {"one": start(1), "two": start(2)}

    result = executor().gradients(GradientTask("m01", models, batch_size=5, seed=3))

    assert isinstance(result, GradientResult)
    batch = minibatch(client().train, 5, 3)
    assert result.num_samples == 5
    for key, weights in models.items():
        loss, gradient = loss_and_gradient(tiny_cnn(), weights, batch.x, batch.y, device=CPU)
        assert result.losses[key] == loss
        np.testing.assert_array_equal(result.gradients[key], gradient)


def test_execute_dispatches_every_kind() -> None:
    run, models = executor(), {"m": start()}
    tasks: list[AnyTask] = [
        FitTask("m01", models, CONFIG, 0),
        EvaluateTask("m01", models),
        LossesTask("m01", models),
        GradientTask("m01", models, 4, 0),
    ]

    answers = [type(run.execute(task)) for task in tasks]

    assert answers == [FitResult, EvaluateResult, LossesResult, GradientResult]


def with_labels(labels: list[int]) -> ClientData:
    data = client(train=len(labels))
    return ClientData(
        "m01", 0, Dataset(data.train.x, np.array(labels, np.int64)), data.val, data.test
    )


def empty_split(name: str) -> ClientData:
    data = client()
    splits = data.splits() | {name: data.train.subset(np.arange(0))}
    return ClientData("m01", 0, splits["train"], splits["val"], splits["test"])


@pytest.mark.parametrize(
    ("data", "task", "reason"),
    [
        (client(), FitTask("m01", {}, CONFIG, 0), "task carries no model"),
        (empty_split("train"), FitTask("m01", {"m": start()}, CONFIG, 0), "no training windows"),
        (empty_split("train"), GradientTask("m01", {"m": start()}, 4, 0), "no training windows"),
        (empty_split("val"), LossesTask("m01", {"m": start()}), "holds no val windows"),
        (empty_split("test"), EvaluateTask("m01", {"m": start()}), "holds no test windows"),
        (
            empty_split("train"),
            EvaluateTask("m01", {"a": start(), "b": start(1)}),
            "no training windows to choose a model with",
        ),
        (
            with_labels([0, 1, 2, 1]),
            FitTask("m01", {"m": start()}, CONFIG, 0),
            "labels run from 0 to 2, the model predicts classes 0 to 1",
        ),
    ],
)
def test_a_task_the_clients_data_cannot_serve_fails_with_the_reason(
    data: ClientData, task: FitTask | EvaluateTask | LossesTask | GradientTask, reason: str
) -> None:
    answer = executor(data).execute(task)

    assert isinstance(answer, Failure)
    assert answer.client_id == "m01"
    assert reason in answer.reason


def test_windows_of_another_shape_fail() -> None:
    needs = DataNeeds.of("evaluate", split=Split.TEST, n_models=1)

    problem = data_problem(client(), needs, (1, 32), 2)

    assert problem == (
        f"the model takes windows of shape (1, 32), this agent's windows have shape (1, {LENGTH})"
    )


def test_huge_learning_rate_diverges_into_a_failure() -> None:
    wild = TrainConfig("sgd", 1e30, 1, 8)

    answer = executor().fit(FitTask("m01", {"m": start()}, wild, 0))

    assert isinstance(answer, Failure)
    assert answer.client_id == "m01"
    assert answer.reason.startswith("local training diverged (train loss nan)")


def test_non_finite_trained_weights_fail_even_with_a_finite_loss() -> None:
    weights = start()
    weights[3] = np.inf
    update = LocalUpdate(weights, weights - start(), 20, 0.5)

    answer = fit_answer(FitTask("m01", {"m": start()}, CONFIG, 0), "m", update)

    assert answer == Failure(
        "m01",
        "local training diverged (1 trained weights are NaN or infinite); "
        "lower train.learning_rate",
    )


def test_diverged_models_fail_evaluations_and_probes() -> None:
    huge = {"ok": start(), "huge": start() * np.float32(1e30)}
    run = executor()

    evaluation = run.evaluate(EvaluateTask("m01", {"huge": huge["huge"]}, Split.VAL))
    losses = run.losses(LossesTask("m01", huge, Split.VAL))
    gradients = run.gradients(GradientTask("m01", huge, 4, 0))

    assert evaluation == Failure("m01", "the model's val loss is nan: it has diverged")
    assert losses == Failure("m01", "model 'huge''s val loss is nan: it has diverged")
    assert gradients == Failure(
        "m01", "model 'huge''s loss or gradient is not finite: it has diverged"
    )


@settings(max_examples=12, deadline=None)
@given(
    scale=st.sampled_from([1e-3, 1.0, 1e3, 1e10, 1e20, 1e30]),
    learning_rate=st.sampled_from([1e-3, 1.0, 1e4, 1e10, 1e30]),
)
def test_an_answer_is_a_failure_or_entirely_finite(scale: float, learning_rate: float) -> None:
    weights = start() * np.float32(scale)
    task = FitTask("m01", {"m": weights}, TrainConfig("sgd", learning_rate, 1, 8), 0)

    answer = executor().fit(task)

    if isinstance(answer, FitResult):
        assert math.isfinite(answer.train_loss)
        assert np.isfinite(answer.weights).all()
    else:
        assert "diverged" in answer.reason
