"""Model delivery inside an agent: the named model is loaded, saved, and restored after a
restart together with its signed assignment, which still refuses older ones."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from coordinator.adapters.onnx_export import ExportedModel, export_model
from edge_agent.inference import LoadedModel, OnnxDiagnoser
from edge_agent.metrics import AgentMetrics
from edge_agent.model_intake import ModelIntake
from edge_agent.model_store import ModelStore
from edge_agent.model_updates import ModelUpdates
from faultfleet.models.zoo import build_model
from faultfleet.wire.codec import encode_frame
from faultfleet.wire.messages import ClusterAssignment, ModelAnnouncement, ModelSpec
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from faultfleet.wire.signing import SigningKey, TrustedKeys
from faultfleet.wire.topics import Topics
from tests.faultfleet.scrape import value

SHAPE = (1, 1024)
CLASSES = ("healthy", "inner", "outer")
KEY = SigningKey.generate()
TOPICS = Topics()


@pytest.fixture(scope="module")
def exported() -> ExportedModel:
    return export_model(build_model("compact", SHAPE, len(CLASSES), seed=0), SHAPE)


def _announcement(model: ExportedModel, version: int, cluster: str = "c0") -> bytes:
    header = ModelAnnouncement(
        cluster_id=cluster,
        version=version,
        sha256=model.sha256,
        size_bytes=len(model.onnx_bytes),
        run_id="run-1",
        server_round=version,
        model=ModelSpec(name="compact", sample_shape=SHAPE, n_classes=len(CLASSES)),
        class_names=CLASSES,
        members=1,
        max_abs_diff=model.max_abs_diff,
        created_at=float(version),
    )
    return encode_frame(KEY.sign(header), model.onnx_bytes)


def _assignment(model: ExportedModel, version: int, cluster: str = "c0") -> bytes:
    message = ClusterAssignment(
        agent_id="m07",
        cluster_id=cluster,
        model_version=version,
        sha256=model.sha256,
        run_id="run-1",
        server_round=version,
        timestamp=float(version),
    )
    return KEY.sign(message).model_dump_json().encode()


def _updates(state_dir: Path, loaded: list[str]) -> ModelUpdates:
    """An agent's model delivery on an unstarted connection (routes are only recorded)."""
    metrics = AgentMetrics(CollectorRegistry(), CLASSES)
    return ModelUpdates(
        ModelIntake("m07", TrustedKeys([KEY.public_text]), max_payload_bytes=1 << 24),
        OnnxDiagnoser(SHAPE),
        ModelStore(state_dir / "model"),
        metrics,
        MqttConnection(client_id="test-m07", settings=BrokerSettings()),
        TOPICS,
        on_loaded=lambda header, model: loaded.append(header.cluster_id),
    )


def test_the_assigned_model_is_loaded_saved_and_restored_with_its_assignment(
    tmp_path: Path, exported: ExportedModel
) -> None:
    # Prepare: v2 is followed and loaded
    loaded: list[str] = []
    first = _updates(tmp_path, loaded)
    first.on_assignment(TOPICS.assignment("m07"), _assignment(exported, 2))
    first.on_model(TOPICS.cluster_model("c0"), _announcement(exported, 2))
    model: LoadedModel | None = first.apply()

    # Execute: the agent restarts; the broker then replays an older assignment
    restarted = _updates(tmp_path, loaded)
    restored = restarted.restore()
    restarted.on_assignment(TOPICS.assignment("m07"), _assignment(exported, 1))

    # Assert
    assert model is not None
    assert (model.version, loaded) == (2, ["c0"])
    assert restored is not None
    assert restored.version == 2
    assert restored.class_names == CLASSES  # the model's names, not the local manifest's
    assert restarted.diagnoser.active is not None
    assert restarted.intake.assignment is not None
    assert restarted.intake.assignment.model_version == 2
    assert restarted.is_model_topic(TOPICS.cluster_model("c0"))
    registry = restarted.metrics.registry
    assert value(registry, "faultfleet_models_rejected_total", reason="stale") == 1.0


def test_a_model_onnx_runtime_refuses_is_counted_and_changes_nothing(
    tmp_path: Path, exported: ExportedModel
) -> None:
    # Prepare: a signed, intact frame whose bytes are no ONNX model
    broken = ExportedModel(
        onnx_bytes=b"not onnx",
        sha256=hashlib.sha256(b"not onnx").hexdigest(),
        max_abs_diff=0.0,
        input_shape=SHAPE,
        n_classes=len(CLASSES),
    )
    loaded: list[str] = []
    updates = _updates(tmp_path, loaded)
    updates.on_assignment(TOPICS.assignment("m07"), _assignment(broken, 1))
    updates.on_model(TOPICS.cluster_model("c0"), _announcement(broken, 1))

    # Execute
    model = updates.apply()

    # Assert
    assert model is None
    assert loaded == []
    assert updates.diagnoser.active is None
    registry = updates.metrics.registry
    assert value(registry, "faultfleet_models_rejected_total", reason="unloadable") == 1.0
    assert not updates.assignment_path.exists()


def test_moving_to_another_cluster_drops_the_old_clusters_topic_and_frame(
    tmp_path: Path, exported: ExportedModel
) -> None:
    # Prepare: the agent follows c0 and keeps its frame
    loaded: list[str] = []
    updates = _updates(tmp_path, loaded)
    updates.on_assignment(TOPICS.assignment("m07"), _assignment(exported, 1))
    updates.on_model(TOPICS.cluster_model("c0"), _announcement(exported, 1))
    assert updates.apply() is not None

    # Execute: reassigned to c1, whose frame arrives; then a late c0 frame, then c1 cleared
    updates.on_assignment(TOPICS.assignment("m07"), _assignment(exported, 2, "c1"))
    updates.on_model(TOPICS.cluster_model("c1"), _announcement(exported, 2, "c1"))
    kept_after_move = updates.intake.kept_clusters
    updates.on_model(TOPICS.cluster_model("c0"), _announcement(exported, 3))
    routes = updates.connection.dispatcher.filters()
    updates.on_model(TOPICS.cluster_model("c1"), b"")

    # Assert
    assert kept_after_move == ["c1"]
    assert routes == [TOPICS.cluster_model("c1")]
    assert not updates.is_model_topic(TOPICS.cluster_model("c0"))
    assert updates.is_model_topic(TOPICS.cluster_model("c1"))
    assert updates.intake.kept_clusters == []
    assert updates.intake.candidate() is None
    assert loaded == ["c0"]
