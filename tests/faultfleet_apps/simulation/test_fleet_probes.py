"""The in-process fleet's probes: losses and gradient tasks, their failures and byte counts."""

from __future__ import annotations

import numpy as np
import pytest

from coordinator.engine.fleet import ProbingFleet
from edge_agent.batching import minibatch
from edge_agent.evaluation import loss_and_gradient, per_sample_losses
from faultfleet.models.weights import flatten_weights
from faultfleet.tasks import GradientTask, LossesTask, Split
from faultfleet_apps.simulation.fleet import InProcessFleet
from signal_pipeline.federation import ClientData, Federation
from tests.edge_agent.test_training import tiny_cnn
from tests.faultfleet_apps.simulation.test_fleet import (
    CPU,
    N_PARAMS,
    client,
    federation,
    make_fleet,
)

MODELS = {"one": flatten_weights(tiny_cnn(7)), "two": flatten_weights(tiny_cnn(8))}


def fleet_with_empty_splits() -> InProcessFleet:
    """Clients "a" (offline), "e" (no test samples) and "t" (no training samples)."""
    full = client("t", 2)
    no_train = ClientData("t", 0, full.train.subset(np.arange(0)), full.val, full.test)
    clients = (client("a", 0), client("e", 1, n_test=0), no_train)
    fleet = InProcessFleet(Federation("toy", clients, 2, ("0", "1")), tiny_cnn(), device=CPU)
    fleet.set_offline(["a"])
    return fleet


@pytest.mark.parametrize("split", [Split.VAL, Split.TEST])
def test_losses_are_the_per_sample_losses_of_every_model(split: Split) -> None:
    fleet: ProbingFleet = make_fleet()
    data = {c.client_id: c.splits()[split.value] for c in federation().clients}

    outcome = fleet.losses(2, [LossesTask(c, MODELS, split) for c in ("d", "a")])

    assert [r.client_id for r in outcome.results] == ["d", "a"]
    for result in outcome.results:
        held = data[result.client_id]
        assert list(result.losses) == ["one", "two"]
        assert result.num_samples == len(held)
        for key, losses in result.losses.items():
            assert losses.shape == (len(held),)
            assert losses.dtype == np.float32
            expected = per_sample_losses(tiny_cnn(), MODELS[key], held, device=CPU)
            np.testing.assert_allclose(losses, expected, rtol=1e-6, atol=1e-7)
    assert outcome.bytes_down == 2 * 2 * N_PARAMS * 4
    assert outcome.bytes_up == sum(2 * len(data[c]) * 4 for c in ("d", "a"))


def test_losses_not_per_sample_return_the_mean() -> None:
    fleet = make_fleet()
    tasks = [LossesTask("b", MODELS, per_sample=per_sample) for per_sample in (True, False)]

    each, mean = fleet.losses(1, tasks).results

    for key in MODELS:
        assert mean.losses[key].shape == (1,)
        assert mean.losses[key].dtype == np.float32
        assert mean.losses[key][0] == pytest.approx(np.mean(each.losses[key]), rel=1e-6)
    assert mean.num_samples == each.num_samples == 4


def test_losses_failures() -> None:
    fleet = fleet_with_empty_splits()
    tasks = [
        LossesTask("a", MODELS),
        LossesTask("e", MODELS, Split.TEST),
        LossesTask("nobody", MODELS),
        LossesTask("t", {}),
        LossesTask("t", MODELS, Split.TRAIN),
        LossesTask("e", MODELS, Split.VAL),
    ]

    outcome = fleet.losses(1, tasks)

    assert [r.client_id for r in outcome.results] == ["e"]
    assert [(f.client_id, f.reason) for f in outcome.failures] == [
        ("a", "client is offline"),
        ("e", "this agent holds no test windows"),
        ("nobody", "unknown client: not in federation 'toy'"),
        ("t", "task carries no model"),
        ("t", "this agent holds no train windows"),
    ]


def test_gradients_are_the_reference_on_the_seeded_minibatch() -> None:
    fleet: ProbingFleet = make_fleet()
    train = {c.client_id: c.train for c in federation().clients}

    outcome = fleet.gradients(
        1, [GradientTask("c", MODELS, 5, 11), GradientTask("a", MODELS, 5, 3)]
    )

    assert [r.client_id for r in outcome.results] == ["c", "a"]
    for result, seed in zip(outcome.results, (11, 3), strict=True):
        batch = minibatch(train[result.client_id], 5, seed)
        assert result.num_samples == 5
        assert list(result.losses) == list(result.gradients) == ["one", "two"]
        for key, weights in MODELS.items():
            loss, gradient = loss_and_gradient(tiny_cnn(), weights, batch.x, batch.y, device=CPU)
            assert result.losses[key] == pytest.approx(loss, rel=1e-6)
            np.testing.assert_allclose(result.gradients[key], gradient, rtol=1e-5, atol=1e-7)
    assert outcome.bytes_down == outcome.bytes_up == 2 * 2 * N_PARAMS * 4


def test_gradients_of_every_model_use_the_same_batch() -> None:
    fleet = make_fleet()
    twins = {"first": MODELS["one"], "second": MODELS["one"].copy(), "other": MODELS["two"]}

    (result,) = fleet.gradients(1, [GradientTask("b", twins, 4, seed=9)]).results

    assert result.losses["first"] == result.losses["second"]
    np.testing.assert_array_equal(result.gradients["first"], result.gradients["second"])
    assert result.losses["first"] != result.losses["other"]


def test_gradients_clip_the_batch_to_the_training_data() -> None:
    fleet = make_fleet()

    (result,) = fleet.gradients(1, [GradientTask("b", MODELS, 1000, seed=0)]).results

    assert result.num_samples == len(federation().clients[1].train) == 13


def test_gradients_failures() -> None:
    fleet = fleet_with_empty_splits()
    tasks = [
        GradientTask(c, models, 4, 0)
        for c, models in [
            ("a", MODELS),
            ("t", MODELS),
            ("nobody", MODELS),
            ("e", {}),
            ("e", MODELS),
        ]
    ]

    outcome = fleet.gradients(1, tasks)

    assert [r.client_id for r in outcome.results] == ["e"]
    assert [(f.client_id, f.reason) for f in outcome.failures] == [
        ("a", "client is offline"),
        ("t", "this agent holds no training windows"),
        ("nobody", "unknown client: not in federation 'toy'"),
        ("e", "task carries no model"),
    ]
