"""The vectorised answers checked against the client executor, task by task.

The in-process fleet answers a round's fit, evaluate and losses tasks together
(:mod:`faultfleet_apps.simulation.batched_answers`); every answer must be the one the
client's own :class:`~edge_agent.executor.ClientExecutor` gives — the same model chosen,
the same numbers to float rounding, the same failures with the same reasons.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from edge_agent.executor import ClientExecutor
from faultfleet.tasks import (
    EvaluateResult,
    EvaluateTask,
    Failure,
    FitResult,
    FitTask,
    LossesResult,
    LossesTask,
    Proximal,
    Split,
    TrainConfig,
)
from faultfleet_apps.simulation.fleet import InProcessFleet
from signal_pipeline.federation import ClientData, Dataset, Federation
from tests.edge_agent.test_training import tiny_cnn
from tests.faultfleet_apps.simulation.test_fleet import CONFIG, CPU, client, fitted_to, start

SGD = TrainConfig("sgd", 0.05, 1, 4, momentum=0.9)


def with_nan_window(data: ClientData) -> ClientData:
    """``data`` with one training and one test window holding NaN (a sensor gap)."""

    def spoil(name: str, split: Dataset) -> Dataset:
        if name == "val":
            return split
        x = split.x.copy()
        x[1, 0, 3] = np.nan
        return Dataset(x, split.y)

    return data.map_splits(spoil)


def troubled_federation() -> Federation:
    """Four healthy clients (c's labels flipped), one with NaN windows ("gap"), one with a
    label the model cannot predict ("wide") and one without training windows ("bare")."""
    wide = client("wide", 4)
    labels = wide.train.y.copy()
    labels[0] = 2
    bare = client("bare", 5)
    clients = (
        client("a", 0),
        client("b", 1),
        client("c", 2, flip=True),
        client("d", 3),
        with_nan_window(client("gap", 6)),
        ClientData("wide", 0, Dataset(wide.train.x, labels), wide.val, wide.test),
        ClientData("bare", 0, bare.train.subset(np.arange(0)), bare.val, bare.test),
    )
    return Federation("troubled", clients, 2, ("first-half", "second-half"))


def executor_for(federation: Federation, client_id: str) -> ClientExecutor:
    data = next(c for c in federation.clients if c.client_id == client_id)
    return ClientExecutor(data, tiny_cnn(), sample_shape=(1, 16), n_classes=2, device=CPU)


def assert_same_answers(actual: Sequence[object], expected: Sequence[object]) -> None:
    assert [type(a) for a in actual] == [type(e) for e in expected]
    for a, e in zip(actual, expected, strict=True):
        if isinstance(e, Failure):
            assert a == e
        elif isinstance(e, FitResult):
            assert isinstance(a, FitResult)
            assert (a.client_id, a.model_key, a.num_samples) == (
                e.client_id,
                e.model_key,
                e.num_samples,
            )
            np.testing.assert_allclose(a.weights, e.weights, atol=1e-5, rtol=1e-4)
            np.testing.assert_allclose(a.delta, e.delta, atol=1e-5, rtol=1e-4)
            assert a.train_loss == pytest.approx(e.train_loss, rel=1e-4, abs=1e-6)
        elif isinstance(e, EvaluateResult):
            assert isinstance(a, EvaluateResult)
            assert (a.client_id, a.model_key, a.accuracy, a.num_samples) == (
                e.client_id,
                e.model_key,
                e.accuracy,
                e.num_samples,
            )
            assert a.loss == pytest.approx(e.loss, rel=1e-5)
        else:
            assert isinstance(a, LossesResult)
            assert isinstance(e, LossesResult)
            assert (a.client_id, a.num_samples, list(a.losses)) == (
                e.client_id,
                e.num_samples,
                list(e.losses),
            )
            for key, losses in e.losses.items():
                np.testing.assert_allclose(a.losses[key], losses, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("max_group", [None, 2])
def test_batched_fit_equals_the_executor_task_by_task(max_group: int | None) -> None:
    federation = troubled_federation()
    fleet = InProcessFleet(federation, tiny_cnn(), device=CPU, max_group=max_group)
    candidates = {"plain": fitted_to("a"), "flipped": fitted_to("c")}
    pulled = {"m": start()}
    tasks = [
        FitTask("a", {"m": start()}, CONFIG, seed=1),
        FitTask("c", candidates, CONFIG, seed=2),
        FitTask("gap", {"m": start()}, CONFIG, seed=3),
        FitTask("d", candidates, SGD, seed=4),
        FitTask("wide", {"m": start()}, CONFIG, seed=5),
        FitTask("b", pulled, SGD, seed=6, proximal=(Proximal(pulled["m"], 0.5),)),
        FitTask("bare", {"m": start()}, CONFIG, seed=7),
        FitTask("a", pulled, CONFIG, seed=8, proximal=(Proximal(start(), 0.1, "embedding"),)),
    ]

    outcome = fleet.fit(1, tasks)

    expected = [executor_for(federation, t.client_id).fit(t) for t in tasks]
    results = [e for e in expected if isinstance(e, FitResult)]
    failures = [e for e in expected if isinstance(e, Failure)]
    assert_same_answers(outcome.results, results)
    assert_same_answers(outcome.failures, failures)
    assert [r.model_key for r in outcome.results] == ["m", "flipped", "plain", "m", "m"]
    assert [f.client_id for f in outcome.failures] == ["gap", "wide", "bare"]


@pytest.mark.parametrize("split", [Split.TEST, Split.VAL])
def test_batched_evaluate_equals_the_executor_task_by_task(split: Split) -> None:
    federation = troubled_federation()
    fleet = InProcessFleet(federation, tiny_cnn(), device=CPU)
    candidates = {"plain": fitted_to("a"), "flipped": fitted_to("c")}
    shared = {"m": fitted_to("a")}
    tasks = [
        EvaluateTask(c, models, split)
        for c, models in [
            ("a", shared),
            ("b", candidates),
            ("c", candidates),
            ("gap", shared),
            ("d", shared),
            ("wide", shared),
            ("bare", candidates),
            ("bare", shared),
        ]
    ]

    outcome = fleet.evaluate(1, tasks)

    expected = [executor_for(federation, t.client_id).evaluate(t) for t in tasks]
    results = [e for e in expected if isinstance(e, EvaluateResult)]
    failures = [e for e in expected if isinstance(e, Failure)]
    assert_same_answers(outcome.results, results)
    assert_same_answers(outcome.failures, failures)
    failed = [f.client_id for f in outcome.failures]
    # the NaN window is in the test split only: the validation split evaluates
    assert failed == (["gap", "wide", "bare"] if split is Split.TEST else ["wide", "bare"])


def test_batched_losses_equal_the_executor_task_by_task() -> None:
    federation = troubled_federation()
    fleet = InProcessFleet(federation, tiny_cnn(), device=CPU)
    models = {"one": start(), "two": fitted_to("c")}
    tasks = [
        LossesTask("a", models, Split.VAL),
        LossesTask("gap", models, Split.TEST, per_sample=False),
        LossesTask("c", models, Split.TEST, per_sample=False),
        LossesTask("wide", models),
        LossesTask("bare", models, Split.TRAIN),
    ]

    outcome = fleet.losses(1, tasks)

    expected = [executor_for(federation, t.client_id).losses(t) for t in tasks]
    results = [e for e in expected if isinstance(e, LossesResult)]
    failures = [e for e in expected if isinstance(e, Failure)]
    assert_same_answers(outcome.results, results)
    assert_same_answers(outcome.failures, failures)
    assert [r.client_id for r in outcome.results] == ["a", "c"]
