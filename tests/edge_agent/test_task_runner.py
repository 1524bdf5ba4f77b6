"""Tests of the agent's task runner with real torch on a tiny dataset.

The agent's answer must equal the in-process computation of :mod:`edge_agent.training` and
:mod:`edge_agent.evaluation` with the same weights and seed: the wire adds no numerical
difference of its own.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
from safetensors.numpy import load as load_safetensors

from edge_agent.evaluation import choose_model, evaluate
from edge_agent.task_runner import TaskRunner
from edge_agent.training import local_update
from faultfleet.models.zoo import build_model
from faultfleet.tasks import Split
from faultfleet.wire.codec import (
    decode_tensors,
)
from faultfleet.wire.messages import (
    EvaluationMessage,
    FitUpdateMessage,
)
from signal_pipeline.federation import ClientData
from tests.clocks import FakeClock
from tests.edge_agent.task_frames import (
    CPU,
    HALF_ZLIB,
    LIMIT,
    MODEL,
    N_CLASSES,
    TRAIN,
    answer,
    client,
    evaluate_task,
    fit_task,
    frame,
    initial_weights,
    runner_for,
)


@pytest.fixture(scope="module")
def data() -> ClientData:
    return client()


@pytest.fixture(scope="module")
def architecture() -> torch.nn.Module:
    return build_model(MODEL.name, MODEL.sample_shape, N_CLASSES)


# -- fit -------------------------------------------------------------------------------------


def test_a_fit_answer_equals_the_in_process_local_update(
    data: ClientData, architecture: torch.nn.Module
) -> None:
    start = initial_weights(0)
    task = fit_task()

    message, body = answer(runner_for(data), frame(task, {"cluster-0": start}))

    expected = local_update(architecture, start, data.train, TRAIN.config(), 11, CPU)
    assert isinstance(message, FitUpdateMessage)
    assert (message.task_id, message.run_id, message.agent_id) == ("task-1", "run-1", "m07")
    assert message.model_key == "cluster-0"
    assert message.num_samples == 24
    assert message.train_loss == expected.train_loss
    assert message.train_seconds > 0
    weights = decode_tensors(body, message.encoding, {"weights": len(start)}, max_bytes=LIMIT)
    np.testing.assert_array_equal(weights["weights"], expected.weights)
    assert not np.array_equal(weights["weights"], start)


def test_a_task_computes_on_the_threads_chosen_for_its_model(data: ClientData) -> None:
    # Prepare: a runner whose policy records the parameter count it is asked about
    asked: list[int] = []

    def two_threads(parameters: int) -> int:
        asked.append(parameters)
        return 2

    runner = TaskRunner(
        "m07", data, CPU, max_payload_bytes=LIMIT, clock=FakeClock(), training_threads=two_threads
    )
    start = initial_weights(0)
    assert torch.get_num_threads() == 1  # the suite's setting (tests/conftest.py)

    # Execute: the task computes in this thread
    try:
        message, _ = answer(runner, frame(fit_task(), {"cluster-0": start}))
        threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(1)

    # Assert: asked with the model's size, and torch set to its answer for the task
    assert isinstance(message, FitUpdateMessage)
    assert asked == [len(start)]
    assert threads == 2


def test_the_seed_decides_the_batch_order(data: ClientData) -> None:
    start = initial_weights(0)
    runner = runner_for(data)

    first, body_a = answer(runner, frame(fit_task(seed=1), {"cluster-0": start}))
    _, body_b = answer(runner, frame(fit_task(seed=1), {"cluster-0": start}))
    other, body_c = answer(runner, frame(fit_task(seed=2), {"cluster-0": start}))

    assert isinstance(first, FitUpdateMessage)
    assert isinstance(other, FitUpdateMessage)
    assert body_a == body_b
    assert body_a != body_c


def test_fit_trains_the_lowest_loss_candidate(
    data: ClientData, architecture: torch.nn.Module
) -> None:
    a, b = initial_weights(1), initial_weights(2)
    best, losses = choose_model(architecture, {"a": a, "b": b}, data.train, device=CPU)
    # The lower-loss candidate goes second, so taking the first would be caught.
    worse, better = ("b", "a") if best == "a" else ("a", "b")
    candidates = {"a": a, "b": b}
    assert min(losses) < max(losses)
    task = fit_task(keys=("cluster-x", "cluster-y"))

    message, body = answer(
        runner_for(data),
        frame(task, {"cluster-x": candidates[worse], "cluster-y": candidates[better]}),
    )

    assert isinstance(message, FitUpdateMessage)
    assert message.model_key == "cluster-y"
    expected = local_update(architecture, candidates[better], data.train, TRAIN.config(), 11, CPU)
    weights = decode_tensors(body, message.encoding, {"weights": len(a)}, max_bytes=LIMIT)
    np.testing.assert_array_equal(weights["weights"], expected.weights)


def test_a_float16_zlib_task_is_answered_in_float16_zlib(
    data: ClientData, architecture: torch.nn.Module
) -> None:
    start = initial_weights(0)
    task = fit_task(encoding=HALF_ZLIB)

    message, body = answer(runner_for(data), frame(task, {"cluster-0": start}))

    assert isinstance(message, FitUpdateMessage)
    assert message.encoding == HALF_ZLIB
    raw = load_safetensors(zlib.decompress(body))
    assert raw["weights"].dtype == np.float16
    # The agent trains from the float16 weights it received and rounds its answer to float16.
    received = start.astype(np.float16).astype(np.float32)
    expected = local_update(architecture, received, data.train, TRAIN.config(), 11, CPU)
    weights = decode_tensors(body, HALF_ZLIB, {"weights": len(start)}, max_bytes=LIMIT)
    np.testing.assert_array_equal(
        weights["weights"], expected.weights.astype(np.float16).astype(np.float32)
    )


# -- evaluate --------------------------------------------------------------------------------


@pytest.mark.parametrize("split", [Split.TEST, Split.VAL, Split.TRAIN])
def test_an_evaluation_equals_the_in_process_evaluation(
    data: ClientData, architecture: torch.nn.Module, split: Split
) -> None:
    weights = initial_weights(3)

    message, body = answer(
        runner_for(data), frame(evaluate_task(split=split), {"cluster-0": weights})
    )

    expected = evaluate(architecture, weights, data.splits()[split.value], device=CPU)
    assert isinstance(message, EvaluationMessage)
    assert body == b""
    assert (message.task_id, message.model_key) == ("task-2", "cluster-0")
    assert message.accuracy == expected.accuracy
    assert message.loss == expected.loss
    assert message.num_samples == len(data.splits()[split.value])


def test_evaluate_picks_the_lowest_training_loss_candidate(
    data: ClientData, architecture: torch.nn.Module
) -> None:
    a, b = initial_weights(1), initial_weights(2)
    best, _ = choose_model(architecture, {"a": a, "b": b}, data.train, device=CPU)
    candidates = {"a": a, "b": b}
    worse = "b" if best == "a" else "a"

    message, _ = answer(
        runner_for(data),
        frame(evaluate_task(keys=("k0", "k1")), {"k0": candidates[worse], "k1": candidates[best]}),
    )

    assert isinstance(message, EvaluationMessage)
    assert message.model_key == "k1"
    assert message.loss == evaluate(architecture, candidates[best], data.test, device=CPU).loss
