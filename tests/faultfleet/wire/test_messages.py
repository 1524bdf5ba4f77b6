"""Tests of the wire envelopes: JSON round trips, strictness, immutability and versioning."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

from faultfleet.tasks import Split, TrainConfig
from faultfleet.wire.campaign_messages import CampaignNote, PromotionNote
from faultfleet.wire.messages import (
    ANSWER_ADAPTER,
    SCHEMA_VERSION,
    TASK_ADAPTER,
    AgentStatus,
    ClusterAssignment,
    CoordinatorStatus,
    Diagnosis,
    EvaluateTaskMessage,
    EvaluationMessage,
    FitTaskMessage,
    FitUpdateMessage,
    ModelAnnouncement,
    ModelSpec,
    SignedMessage,
    TaskFailedMessage,
    TensorEncoding,
    TrainSpec,
)

DIGEST = "ab" * 32
MODEL = ModelSpec(name="compact", sample_shape=(1, 1024), n_classes=12)
TRAIN = TrainSpec(optimizer="adam", learning_rate=5e-4, epochs=5, batch_size=32)
TASK_FIELDS: dict[str, Any] = {
    "task_id": "0123abcd",
    "run_id": "run-1",
    "server_round": 3,
    "agent_id": "m07",
    "model": MODEL,
    "model_keys": ("cluster-0", "cluster-1"),
    "issued_at": 1_700_000_000.5,
    "deadline_s": 120.0,
}
ANSWER_FIELDS: dict[str, Any] = {
    "task_id": "0123abcd",
    "run_id": "run-1",
    "server_round": 3,
    "agent_id": "m07",
}


def every_envelope() -> list[BaseModel]:
    """One message of every kind, with every optional field set to a non-default value."""
    return [
        AgentStatus(
            agent_id="m07",
            state="online",
            timestamp=1.7e9,
            can_train=True,
            num_train_samples=420,
            labelled_windows=600,
            device="cpu",
            model_version=4,
            software_version="0.1.0",
        ),
        AgentStatus(agent_id="m07", state="offline"),
        CoordinatorStatus(
            state="online",
            run_id="run-1",
            server_round=7,
            strategy="flacc",
            timestamp=1.7e9,
            campaign=CampaignNote(
                campaign_id="c2",
                trigger="labels",
                status="running",
                start_round=5,
                end_round=15,
                rounds_done=2,
                started_at=1.7e9,
                next_scheduled_at=1.7e9 + 604_800,
                new_labelled_windows=12,
                min_new_labelled_windows=500,
            ),
            recent_promotions=(
                PromotionNote(
                    cluster_id="cluster-0",
                    version=3,
                    decision="rejected",
                    candidate_accuracy=0.5,
                    serving_accuracy=0.9,
                    campaign_id="c2",
                    server_round=7,
                    created_at=1.7e9,
                ),
            ),
        ),
        FitTaskMessage(
            **TASK_FIELDS,
            encoding=TensorEncoding(dtype="float16", compression="zlib"),
            train=TRAIN,
            seed=12345,
        ),
        EvaluateTaskMessage(**TASK_FIELDS, split=Split.VAL),
        FitUpdateMessage(
            **ANSWER_FIELDS,
            model_key="cluster-1",
            encoding=TensorEncoding(dtype="float16"),
            num_samples=300,
            train_loss=0.25,
            train_seconds=1.5,
        ),
        EvaluationMessage(
            **ANSWER_FIELDS, model_key="cluster-0", accuracy=0.875, loss=0.4, num_samples=80
        ),
        TaskFailedMessage(**ANSWER_FIELDS, reason="this agent holds no training windows"),
        ModelAnnouncement(
            cluster_id="cluster-0",
            version=2,
            sha256=DIGEST,
            size_bytes=240_000,
            run_id="run-1",
            server_round=10,
            model=MODEL,
            class_names=("normal", "outer-race"),
            members=5,
            max_abs_diff=3e-7,
            created_at=1.7e9,
        ),
        ClusterAssignment(
            agent_id="m07",
            cluster_id="cluster-0",
            model_version=2,
            sha256=DIGEST,
            run_id="run-1",
            server_round=10,
            timestamp=1.7e9,
        ),
        Diagnosis(
            agent_id="m07",
            window_index=99,
            class_id=3,
            class_name="A3A/slight-ball-wear",
            probability=0.93,
            model_version=2,
            cluster_id="cluster-0",
            timestamp=1.7e9,
            latency_s=0.002,
            true_label=3,
            origin="incoming/r1.wav",
        ),
        SignedMessage(
            key_id="0123456789abcdef", signature="A" * 86 + "==", message='{"kind": "assignment"}'
        ),
    ]


def data_of(message: BaseModel) -> dict[str, Any]:
    """The message as the JSON object a receiver would parse."""
    data: dict[str, Any] = json.loads(message.model_dump_json())
    return data


@pytest.mark.parametrize("message", every_envelope(), ids=lambda m: type(m).__name__)
def test_every_envelope_round_trips_through_json(message: BaseModel) -> None:
    text = message.model_dump_json()

    again = type(message).model_validate_json(text)

    assert again == message
    assert json.loads(text)["schema_version"] == SCHEMA_VERSION == 5


def test_task_and_answer_adapters_pick_the_variant_from_kind() -> None:
    fit, evaluate, update, evaluation, failed = every_envelope()[3:8]

    assert TASK_ADAPTER.validate_json(fit.model_dump_json()) == fit
    assert type(TASK_ADAPTER.validate_json(evaluate.model_dump_json())) is EvaluateTaskMessage
    assert ANSWER_ADAPTER.validate_json(update.model_dump_json()) == update
    assert type(ANSWER_ADAPTER.validate_json(evaluation.model_dump_json())) is EvaluationMessage
    assert type(ANSWER_ADAPTER.validate_json(failed.model_dump_json())) is TaskFailedMessage


def test_an_answer_is_not_a_task() -> None:
    update = every_envelope()[5]

    with pytest.raises(ValidationError, match="does not match any of the expected tags"):
        TASK_ADAPTER.validate_python(data_of(update))


@pytest.mark.parametrize("message", every_envelope(), ids=lambda m: type(m).__name__)
def test_extra_fields_are_rejected(message: BaseModel) -> None:
    data = {**data_of(message), "priority": "high"}

    with pytest.raises(ValidationError, match=r"priority\n  Extra inputs are not permitted"):
        type(message).model_validate(data)


def test_extra_fields_in_nested_specs_are_rejected() -> None:
    data = data_of(every_envelope()[3])
    data["train"]["weight_decay"] = 0.1

    with pytest.raises(ValidationError, match=r"train\.weight_decay\n  Extra inputs"):
        FitTaskMessage.model_validate(data)


@pytest.mark.parametrize("message", every_envelope(), ids=lambda m: type(m).__name__)
def test_envelopes_are_frozen(message: BaseModel) -> None:
    with pytest.raises(ValidationError, match="Instance is frozen"):
        message.schema_version = 6  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 6, "5", None])
@pytest.mark.parametrize("message", every_envelope()[:4], ids=lambda m: type(m).__name__)
def test_other_schema_versions_are_rejected(message: BaseModel, version: object) -> None:
    data = {**data_of(message), "schema_version": version}

    with pytest.raises(ValidationError, match="schema_version"):
        type(message).model_validate(data)


@pytest.mark.parametrize("loss", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_train_loss_is_rejected(loss: float) -> None:
    with pytest.raises(ValidationError, match="train_loss"):
        FitUpdateMessage(**ANSWER_FIELDS, model_key="k", num_samples=1, train_loss=loss)


@pytest.mark.parametrize(
    ("model", "field", "value"),
    [
        (EvaluationMessage, "loss", float("nan")),
        (EvaluationMessage, "loss", float("inf")),
        (AgentStatus, "timestamp", float("nan")),
        (ModelAnnouncement, "max_abs_diff", float("nan")),
        (Diagnosis, "timestamp", float("inf")),
    ],
)
def test_non_finite_numbers_are_refused_when_built_since_json_cannot_carry_them(
    model: type[BaseModel], field: str, value: float
) -> None:
    message = next(m for m in every_envelope() if type(m) is model)
    data = {**message.model_dump(), field: value}

    with pytest.raises(ValidationError, match=f"{field}\n  Input should be a finite number"):
        model.model_validate(data)


@pytest.mark.parametrize("accuracy", [-0.01, 1.01, float("nan")])
def test_accuracy_outside_the_unit_interval_is_rejected(accuracy: float) -> None:
    with pytest.raises(ValidationError, match="accuracy"):
        EvaluationMessage(
            **ANSWER_FIELDS, model_key="k", accuracy=accuracy, loss=0.1, num_samples=1
        )


@pytest.mark.parametrize("accuracy", [0.0, 1.0])
def test_accuracy_bounds_are_inclusive(accuracy: float) -> None:
    message = EvaluationMessage(
        **ANSWER_FIELDS, model_key="k", accuracy=accuracy, loss=0.1, num_samples=0
    )

    assert message.accuracy == accuracy


@pytest.mark.parametrize(
    "config",
    [
        TrainConfig(),
        TrainConfig(optimizer="sgd", learning_rate=0.01, epochs=1, batch_size=8, momentum=0.9),
    ],
)
def test_train_spec_round_trips_a_train_config(config: TrainConfig) -> None:
    spec = TrainSpec.of(config)

    again = TrainSpec.model_validate_json(spec.model_dump_json()).config()

    assert again == config


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("optimizer", "rmsprop"),
        ("learning_rate", 0.0),
        ("learning_rate", float("inf")),
        ("epochs", 0),
        ("batch_size", 0),
        ("momentum", 1.0),
    ],
)
def test_train_spec_rejects_bad_hyper_parameters(field: str, value: object) -> None:
    data = {**TRAIN.model_dump(), field: value}

    with pytest.raises(ValidationError, match=field):
        TrainSpec.model_validate(data)


@pytest.mark.parametrize("agent_id", ["m/07", "+", "#", "", "m07\n", "a" * 65, "m 07"])
def test_agent_id_must_be_usable_as_a_topic_level(agent_id: str) -> None:
    with pytest.raises(ValidationError, match="String should match pattern"):
        AgentStatus(agent_id=agent_id, state="online")
    with pytest.raises(ValidationError, match="agent_id"):
        TaskFailedMessage(**{**ANSWER_FIELDS, "agent_id": agent_id}, reason="x")


def test_cluster_ids_follow_the_same_pattern() -> None:
    data = {**data_of(every_envelope()[9]), "cluster_id": "cluster/0"}

    with pytest.raises(ValidationError, match="cluster_id"):
        ClusterAssignment.model_validate(data)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("model_keys", []),
        ("server_round", -1),
        ("issued_at", "tomorrow"),
        ("deadline_s", 0),
        ("deadline_s", -5.0),
        ("seed", -1),
    ],
)
def test_task_fields_are_checked(field: str, value: object) -> None:
    data = {**data_of(every_envelope()[3]), field: value}

    with pytest.raises(ValidationError, match=field):
        TASK_ADAPTER.validate_python(data)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"name": "compact", "sample_shape": [1, 0], "n_classes": 12}, "sample_shape"),
        ({"name": "compact", "sample_shape": [1, 1024], "n_classes": 1}, "n_classes"),
    ],
)
def test_model_spec_is_checked(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        ModelSpec.model_validate(spec)


def test_model_spec_is_hashable_and_equal_by_value() -> None:
    again = ModelSpec.model_validate_json(MODEL.model_dump_json())

    assert again == MODEL
    assert hash(again) == hash(MODEL)


def test_digest_must_be_lowercase_sha256_hex() -> None:
    data = {**data_of(every_envelope()[8]), "sha256": DIGEST.upper()}

    with pytest.raises(ValidationError, match="sha256"):
        ModelAnnouncement.model_validate(data)


def test_failure_reason_is_bounded() -> None:
    with pytest.raises(ValidationError, match="at most 2000 characters"):
        TaskFailedMessage(**ANSWER_FIELDS, reason="x" * 2001)


def test_defaults_of_encoding_and_split() -> None:
    data = data_of(every_envelope()[4])
    del data["encoding"], data["split"]

    task = TypeAdapter(EvaluateTaskMessage).validate_python(data)

    assert task.encoding == TensorEncoding(dtype="float32", compression="none")
    assert task.split is Split.TEST


def test_an_agent_status_is_online_offline_or_retired() -> None:
    retired = AgentStatus(agent_id="m07", state="retired", timestamp=1.7e9)

    assert AgentStatus.model_validate_json(retired.model_dump_json()) == retired
    with pytest.raises(ValidationError, match="state"):
        AgentStatus(agent_id="m07", state="gone")  # type: ignore[arg-type]
