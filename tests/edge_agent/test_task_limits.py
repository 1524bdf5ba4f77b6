"""What an agent refuses of a task before running it: a deadline counted from receipt (a
skewed clock costs nothing), limits on epochs and classes, another model than the run's;
and the bounded cache of built architectures."""

from __future__ import annotations

import logging

import pytest

from edge_agent.compute_turns import ComputeTurns
from edge_agent.task_runner import TaskLimits, TaskRunner
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.wire.codec import parse_envelope, split_frame
from faultfleet.wire.messages import (
    ANSWER_ADAPTER,
    AnyAnswerMessage,
    EvaluationMessage,
    FitUpdateMessage,
    TaskFailedMessage,
)
from signal_pipeline.federation import ClientData
from tests.clocks import FakeClock
from tests.edge_agent.task_frames import (
    CPU,
    LIMIT,
    MODEL,
    NOW,
    TRAIN,
    answer,
    client,
    evaluate_task,
    failure_reason,
    fit_task,
    frame,
    initial_weights,
    runner_for,
)


@pytest.fixture(scope="module")
def data() -> ClientData:
    return client()


def _run_after(
    runner: TaskRunner, clock: FakeClock, payload: bytes, waited_s: float
) -> AnyAnswerMessage:
    """Answer ``payload`` as if it had waited ``waited_s`` seconds in the agent's queue."""
    task, body = runner.parse(payload)
    received_s = clock.monotonic()
    clock.advance(waited_s)
    result = runner.run(task, body, received_s)
    header, _ = split_frame(result.payload, max_bytes=LIMIT)
    return parse_envelope(ANSWER_ADAPTER, header)


@pytest.mark.parametrize(("waited_s", "answered"), [(59.0, True), (61.0, False)])
def test_the_deadline_counts_from_receipt_on_the_agents_own_clock(
    data: ClientData, waited_s: float, answered: bool
) -> None:
    # Prepare: a 60 s deadline
    clock = FakeClock()
    runner = TaskRunner("m07", data, CPU, max_payload_bytes=LIMIT, clock=clock)
    payload = frame(fit_task(deadline_s=60.0), {"cluster-0": initial_weights(0)})

    # Execute
    message = _run_after(runner, clock, payload, waited_s)

    # Assert
    if answered:
        assert isinstance(message, FitUpdateMessage)
    else:
        assert isinstance(message, TaskFailedMessage)
        assert "deadline passed" in message.reason
        assert "waited 61.0 s" in message.reason


@pytest.mark.parametrize("skew_s", [-7200.0, 7200.0, 0.0])
def test_a_skewed_clock_is_measured_and_costs_no_task(data: ClientData, skew_s: float) -> None:
    # Prepare: the coordinator's clock is skew_s behind the agent's (2 h either way)
    clock = FakeClock()
    runner = TaskRunner("m07", data, CPU, max_payload_bytes=LIMIT, clock=clock)
    task = fit_task(issued_at=NOW - skew_s, deadline_s=60.0)
    payload = frame(task, {"cluster-0": initial_weights(0)})

    # Execute
    message = _run_after(runner, clock, payload, waited_s=1.0)

    # Assert
    assert isinstance(message, FitUpdateMessage)
    assert runner.clock_skew_s(task, clock.time()) == pytest.approx(skew_s + 1.0)


def test_more_epochs_than_the_limit_are_refused_naming_the_setting(data: ClientData) -> None:
    runner = runner_for(data, limits=TaskLimits(max_epochs=10))
    task = fit_task(train=TRAIN.model_copy(update={"epochs": 100_000}))

    reason = failure_reason(runner, frame(task, {"cluster-0": initial_weights(0)}))

    assert reason == (
        "train.epochs=100000 is above this agent's limit of 10 ([tasks] max_epochs); "
        "lower the coordinator's [train] epochs"
    )


def test_more_classes_than_the_limit_are_refused(data: ClientData) -> None:
    runner = runner_for(data, limits=TaskLimits(max_classes=8))
    spec = MODEL.model_copy(update={"n_classes": 100_000})

    reason = failure_reason(runner, frame(evaluate_task(model=spec), {}))

    assert "100000 classes, above this agent's limit of 8 ([tasks] max_classes)" in reason


def test_a_task_of_the_followed_run_must_name_its_model(data: ClientData) -> None:
    # Prepare: the agent follows run-1 with MODEL; a task names a model one class wider
    wider = MODEL.model_copy(update={"n_classes": MODEL.n_classes + 1})
    weights = {"cluster-0": flatten_weights(build_model(wider.name, wider.sample_shape, 5))}
    payload = frame(evaluate_task(model=wider), weights)

    def runner(run_id: str) -> TaskRunner:
        followed = (run_id, MODEL)
        return TaskRunner("m07", data, CPU, max_payload_bytes=LIMIT, run_model=lambda: followed)

    # Execute: the task is of run-1; an agent following another run takes it
    refused, _ = answer(runner("run-1"), payload)
    taken, _ = answer(runner("run-0"), payload)

    # Assert
    assert isinstance(refused, TaskFailedMessage)
    assert refused.reason.startswith("run 'run-1' uses model {'name': 'compact'")
    assert isinstance(taken, EvaluationMessage)


def test_the_cache_of_built_models_is_bounded(data: ClientData) -> None:
    # Prepare: tasks for five architectures (5 to 9 classes), two kept
    runner = runner_for(data, limits=TaskLimits(max_cached_models=2))
    specs = [MODEL.model_copy(update={"n_classes": n}) for n in range(5, 10)]

    # Execute
    for spec in specs:
        runner.compute().parameter_count(spec)

    # Assert
    assert runner.cached_models == 2
    assert set(runner.compute()._models) == set(specs[-2:])


def test_failures_of_one_kind_are_logged_once_as_a_warning(
    data: ClientData, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: three tasks for other agents, one asking too many epochs
    runner = runner_for(data, limits=TaskLimits(max_epochs=10))
    weights = {"cluster-0": initial_weights(0)}
    payloads = [frame(fit_task(agent_id=f"m{n}"), weights) for n in (10, 11, 12)]
    payloads.append(frame(fit_task(train=TRAIN.model_copy(update={"epochs": 99})), weights))

    # Execute
    with caplog.at_level(logging.DEBUG, logger="edge_agent.task_runner"):
        reasons = [failure_reason(runner, payload) for payload in payloads]

    # Assert: every task answered with its own reason; two warnings, two debug lines
    assert reasons[1] == "task addressed to 'm11', this agent is 'm07'"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "task addressed to 'm10'" in warnings[0]
    assert "train.epochs=99" in warnings[1]
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) == 2


def test_runners_taking_turns_together_share_the_built_architectures(data: ClientData) -> None:
    # Prepare: two agents of one process (one ComputeTurns) and one on its own
    turns = ComputeTurns()
    first, second = (
        TaskRunner(agent, data, CPU, max_payload_bytes=LIMIT, compute_lock=turns)
        for agent in ("m07", "m08")
    )
    alone = TaskRunner("m09", data, CPU, max_payload_bytes=LIMIT)

    # Execute
    for runner in (first, second, alone):
        runner.compute().parameter_count(MODEL)

    # Assert
    assert first.compute() is second.compute()
    assert alone.compute() is not first.compute()
    assert first.compute()._models[MODEL] is second.compute()._models[MODEL]
