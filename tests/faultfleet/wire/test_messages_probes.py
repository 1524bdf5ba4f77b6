"""Tests of the envelopes of probes and proximal fit tasks (schema version 2)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

from faultfleet.tasks import Split
from faultfleet.wire.codec import RejectReason, WireError, parse_envelope
from faultfleet.wire.messages import (
    ANSWER_ADAPTER,
    TASK_ADAPTER,
    FitTaskMessage,
    GradientMessage,
    GradientTaskMessage,
    LossesMessage,
    LossesTaskMessage,
    ProximalSpec,
    TensorEncoding,
)
from tests.faultfleet.wire.test_messages import ANSWER_FIELDS, TASK_FIELDS, TRAIN, data_of

HALF = TensorEncoding(dtype="float16", compression="zlib")


def probe_envelopes() -> list[BaseModel]:
    """One message of every kind schema version 2 added, every optional field set."""
    return [
        FitTaskMessage(
            **TASK_FIELDS,
            train=TRAIN,
            seed=7,
            proximal=(
                ProximalSpec(tensor="cluster-0", strength=0.01),
                ProximalSpec(tensor="proximal-1", strength=0.5, part="embedding"),
            ),
        ),
        LossesTaskMessage(**TASK_FIELDS, encoding=HALF, split=Split.TEST, per_sample=False),
        GradientTaskMessage(**TASK_FIELDS, batch_size=32, seed=99),
        LossesMessage(**ANSWER_FIELDS, encoding=HALF, num_samples=120),
        GradientMessage(
            **ANSWER_FIELDS,
            encoding=HALF,
            num_samples=32,
            losses={"cluster-0": 0.5, "cluster-1": 2.25},
            exponents={"cluster-0": -20, "cluster-1": -18},
        ),
    ]


def adapter_of(message: BaseModel) -> TypeAdapter[Any]:
    """The adapter a receiver reads ``message`` with: tasks carry a model spec, answers not."""
    return TASK_ADAPTER if "model" in data_of(message) else ANSWER_ADAPTER


@pytest.mark.parametrize("message", probe_envelopes(), ids=lambda m: type(m).__name__)
def test_probe_envelopes_round_trip_through_their_adapter(message: BaseModel) -> None:
    again = parse_envelope(adapter_of(message), data_of(message))

    assert again == message
    assert type(again) is type(message)


@pytest.mark.parametrize("message", probe_envelopes(), ids=lambda m: type(m).__name__)
def test_probe_envelopes_refuse_extra_fields_and_other_versions(message: BaseModel) -> None:
    adapter = adapter_of(message)

    with pytest.raises(WireError, match="Extra inputs are not permitted") as extra:
        parse_envelope(adapter, {**data_of(message), "priority": "high"})
    with pytest.raises(WireError, match="schema_version 1; this side speaks 5") as old:
        parse_envelope(adapter, {**data_of(message), "schema_version": 1})

    assert extra.value.reason is old.value.reason is RejectReason.SCHEMA


def test_defaults_of_the_probe_tasks() -> None:
    task = LossesTaskMessage(**TASK_FIELDS)

    assert (task.split, task.per_sample) == (Split.VAL, True)
    assert FitTaskMessage(**TASK_FIELDS, train=TRAIN, seed=1).proximal == ()
    answer = GradientMessage(**ANSWER_FIELDS, num_samples=1, losses={"k": 1.0})
    assert answer.exponents == {}
    assert answer.encoding == TensorEncoding()


def test_the_body_of_a_fit_task_holds_its_models_and_other_proximal_targets() -> None:
    fit = probe_envelopes()[0]

    assert isinstance(fit, FitTaskMessage)
    assert fit.tensor_names() == ("cluster-0", "cluster-1", "proximal-1")
    assert LossesTaskMessage(**TASK_FIELDS).tensor_names() == ("cluster-0", "cluster-1")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"strength": -0.1}, "strength"),
        ({"strength": float("nan")}, "strength"),
        ({"strength": float("inf")}, "strength"),
        ({"part": "decision"}, "part"),
        ({"tensor": ""}, "tensor"),
        ({"weight": 1.0}, "weight"),
    ],
)
def test_proximal_specs_are_checked(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        ProximalSpec.model_validate({"tensor": "cluster-0", "strength": 1.0, **change})


@pytest.mark.parametrize(
    ("model", "change", "field"),
    [
        (GradientTaskMessage, {"batch_size": 0}, "batch_size"),
        (GradientTaskMessage, {"model_keys": ["a", "a"]}, "model_keys"),
        (LossesTaskMessage, {"model_keys": ["a", ""]}, "model_keys"),
        (LossesTaskMessage, {"split": "holdout"}, "split"),
        (LossesMessage, {"num_samples": 0}, "num_samples"),
        (GradientMessage, {"num_samples": 0}, "num_samples"),
        (GradientMessage, {"losses": {"cluster-0": "NaN"}}, "losses"),
        (GradientMessage, {"losses": {"cluster-0": None}}, "losses"),
        (GradientMessage, {"exponents": {"cluster-0": 1.5}}, "exponents"),
        (GradientMessage, {"exponents": {"cluster-0": 400}}, "exponents"),
    ],
)
def test_probe_fields_are_checked(
    model: type[BaseModel], change: dict[str, Any], field: str
) -> None:
    message = next(m for m in probe_envelopes() if type(m) is model)
    adapter = adapter_of(message)

    with pytest.raises(WireError, match=field) as error:
        parse_envelope(adapter, {**data_of(message), **change})

    assert error.value.reason is RejectReason.SCHEMA


def test_a_nan_loss_written_by_a_lenient_sender_is_a_schema_error() -> None:
    text = GradientMessage(
        **ANSWER_FIELDS, num_samples=4, losses={"cluster-0": 1.0}
    ).model_dump_json()
    data = json.loads(text.replace('"cluster-0":1.0', '"cluster-0":NaN'))

    with pytest.raises(WireError, match="finite number") as error:
        parse_envelope(ANSWER_ADAPTER, data)

    assert error.value.reason is RejectReason.SCHEMA


def test_a_probe_answer_is_not_a_task() -> None:
    with pytest.raises(WireError, match="does not match any of the expected tags"):
        parse_envelope(TASK_ADAPTER, data_of(probe_envelopes()[3]))


@pytest.mark.parametrize("message", probe_envelopes(), ids=lambda m: type(m).__name__)
def test_probe_envelopes_are_frozen(message: BaseModel) -> None:
    with pytest.raises(ValidationError, match="Instance is frozen"):
        message.agent_id = "m08"  # type: ignore[attr-defined]
