"""JGL streaming its fit rounds under sketches (coordinator.strategies.jgl): the models and
last updates Δw_k of the list, in any arrival order, Δw_k from the probe gradients under
``reference="gradient"``, the medians kept in the state, and a trimmed mean taking the list.
The hand-made clients of :mod:`jgl_helpers`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from coordinator.strategies.base import StrategyState
from coordinator.strategies.jgl import JointGradientLoss
from coordinator.strategies.robust import DEFAULT_POLICY, AggregationPolicy, Averaging
from faultfleet.tasks import FitResult
from tests.coordinator.strategies.jgl_helpers import CLIENTS, ZERO, answer, make_jgl, probe

GRADIENTS = {
    "a0": [[2.0, 0.0, 0.0], ZERO, ZERO],
    "a1": [[0.0, 4.0, 0.0], ZERO, ZERO],
    "b0": [ZERO, ZERO, [0.0, 0.0, 6.0]],
    "b1": [ZERO, ZERO, [0.0, 0.0, 2.0]],
}
LOSSES = {"a0": [0, 9, 9], "a1": [0, 9, 9], "b0": [9, 9, 0], "b1": [9, 9, 0]}


def planned_round(strategy: JointGradientLoss, server_round: int) -> list[FitResult]:
    """Probe (a's choose cluster 0 by loss, b's cluster 2, the fix fills cluster 1), plan,
    and every planned device's update: its model moved by a step of its own."""
    answers = [answer(c, LOSSES[c], GRADIENTS[c]) for c in CLIENTS]
    probe(strategy, server_round, answers)
    rng = np.random.default_rng(0)
    plan = strategy.configure_round(server_round, CLIENTS, rng)
    results = []
    for i, instruction in enumerate(plan):
        (key,) = instruction.model_keys
        base = strategy.models[key]
        step = np.array([0.5 * (i + 1), -0.25 * i, 0.1 * server_round], dtype=np.float32)
        results.append(
            FitResult(instruction.client_id, key, base + step, None, 2 + i, 0.3, base=base)
        )
    return results


@pytest.mark.parametrize("reference", ["update", "gradient"])
def test_a_streamed_fit_round_gives_the_lists_models_and_last_updates(reference: str) -> None:
    # Prepare: the same two rounds, exact (the list) and on sketches (streamed)
    listed, streamed = (
        make_jgl(reference=reference),
        make_jgl(reference=reference, pairwise="sketch"),
    )

    # Execute
    for server_round in (1, 2):
        listed.aggregate_round(server_round, planned_round(listed, server_round), [])
        results = planned_round(streamed, server_round)
        stream = streamed.open_stream(server_round)
        assert stream is not None
        for result in reversed(results):  # arriving in another order than the list's
            stream.add(result)
        streamed.aggregate_stream(server_round, stream, [])

    # Assert
    assert listed.open_stream(1) is None
    assert streamed.cluster_labels() == listed.cluster_labels()
    np.testing.assert_array_equal(streamed.has_update_, listed.has_update_)
    np.testing.assert_allclose(streamed.last_update_, listed.last_update_, atol=1e-6)
    for key, model in listed.models.items():
        np.testing.assert_allclose(streamed.models[key], model, atol=1e-6)
    assert (
        streamed.round_metrics()["clusters_trained"] == listed.round_metrics()["clusters_trained"]
    )
    assert streamed.probe_gradients_ == {}


def test_a_streamed_update_against_its_plan_is_refused() -> None:
    strategy = make_jgl(pairwise="sketch")
    results = planned_round(strategy, 1)
    moved = results[0]
    other = next(k for k in strategy.models if k != moved.model_key)
    base = strategy.models[other]
    stream = strategy.open_stream(1)
    assert stream is not None
    stream.add(FitResult(moved.client_id, other, base + 1.0, None, 3, 0.3, base=base))

    with pytest.raises(ValueError, match="but round 1 assigned it"):
        strategy.aggregate_stream(1, stream, [])


def test_streamed_medians_survive_a_restart() -> None:
    # Prepare: two rounds under the robust policy
    strategy = make_jgl(pairwise="sketch")
    strategy.averaging = Averaging(DEFAULT_POLICY)
    for server_round in (1, 2):
        strategy.aggregate_round(server_round, planned_round(strategy, server_round), [])
    state, saved = strategy.state_dict(), dict(strategy.stream_bounds_)

    # Execute
    resumed = JointGradientLoss(fraction=1.0, n_clusters=3, batch_size=4, pairwise="sketch")
    resumed.load_state_dict(
        StrategyState(
            {k: v.copy() for k, v in state.arrays.items()}, json.loads(json.dumps(state.meta))
        )
    )

    # Assert: every trained cluster's medians, back as they were
    assert saved
    assert all(b.norm is not None for b in saved.values())
    assert resumed.stream_bounds_ == saved


def test_a_trimmed_mean_takes_the_list_even_under_sketches() -> None:
    strategy = make_jgl(pairwise="sketch")
    strategy.averaging = Averaging(AggregationPolicy(trim_fraction=0.2))

    strategy.aggregate_round(1, planned_round(strategy, 1), [])

    assert strategy.open_stream(2) is None
    assert strategy.stream_bounds_ == {}
    assert strategy.has_update_.any()
