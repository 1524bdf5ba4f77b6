"""An agent at the edges of its host: a full disk stops the local log, not the published
diagnoses; a restarted agent names diagnoses after its saved model's classes."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coordinator.adapters.onnx_export import ExportedModel, export_model
from edge_agent.model_store import ModelStore
from edge_agent.service import AgentService
from edge_agent.settings import AgentSettings, DiagnosisSettings, SigningSettings
from edge_agent.sources import Window
from faultfleet.models.zoo import build_model
from faultfleet.wire.messages import Diagnosis
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.signing import SigningKey
from tests.faultfleet.scrape import value

SHAPE = (1, 256)
MODEL_CLASSES = tuple(f"fault {i}" for i in range(12))


class TwoLabelFolder:
    """A source whose manifest knows two labels only, and no training data."""

    sample_shape = SHAPE
    class_names = ("label 0", "label 1")

    def training_data(self) -> None:
        return None

    def stream(self, stop: threading.Event) -> Iterator[Window]:
        return iter(())


@pytest.fixture(scope="module")
def exported() -> ExportedModel:
    return export_model(build_model("compact", SHAPE, len(MODEL_CLASSES), seed=0), SHAPE)


def _agent(
    state_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    connected: bool = True,
    flush_delay_s: float = 1.0,
) -> tuple[AgentService, list[Any]]:
    settings = AgentSettings(
        agent_id="m07",
        device="cpu",
        state_dir=state_dir,
        signing=SigningSettings(trusted_keys=(SigningKey.generate().public_text,)),
        diagnosis=DiagnosisSettings(flush_delay_s=flush_delay_s),
    )
    agent = AgentService(settings, TwoLabelFolder())
    published: list[Any] = []
    monkeypatch.setattr(
        agent.connection, "publish", lambda topic, payload, **_: published.append(payload)
    )
    # Connected as far as the agent can tell: diagnoses are published, not kept in the outbox.
    monkeypatch.setattr(MqttConnection, "connected", property(lambda self: connected))
    return agent, published


def _window(index: int) -> Window:
    samples = np.random.default_rng(index).standard_normal(SHAPE).astype(np.float32)
    return Window(samples, float(index), None, origin=f"w{index}")


@pytest.mark.parametrize("flush_delay_s", [0.0, 1.0])
def test_a_full_disk_stops_the_log_not_the_published_diagnoses(
    tmp_path: Path,
    exported: ExportedModel,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    flush_delay_s: float,
) -> None:
    # Prepare: the log is /dev/full (every write fails with ENOSPC); its lines are written
    # at once, or in a batch once their delay is up (what the outbox thread's tick does)
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "diagnoses.jsonl").symlink_to("/dev/full")
    agent, published = _agent(tmp_path, monkeypatch, flush_delay_s=flush_delay_s)
    agent.diagnoser.load(exported.onnx_bytes, sha256=exported.sha256, version=1, cluster_id="c0")

    # Execute
    with caplog.at_level(logging.ERROR, logger="edge_agent.diagnosis_delivery"):
        for index in range(3):
            agent._diagnose_safely(_window(index))
        agent.delivery.send_handed_over()  # what the outbox thread does when woken
        agent.delivery.flush_log()

    # Assert
    assert [Diagnosis.model_validate_json(p).origin for p in published] == ["w0", "w1", "w2"]
    registry = agent.metrics.registry
    assert value(registry, "faultfleet_diagnosis_log_failures_total") == 3.0
    assert value(registry, "faultfleet_thread_errors_total", thread="diagnosis") == 0.0
    (error,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "cannot write the diagnosis log" in error.getMessage()
    assert "No space left on device" in error.getMessage()


def test_diagnoses_made_while_disconnected_wait_in_the_outbox_across_a_restart(
    tmp_path: Path, exported: ExportedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: an agent the broker cannot reach
    agent, published = _agent(tmp_path, monkeypatch, connected=False)
    agent.diagnoser.load(exported.onnx_bytes, sha256=exported.sha256, version=1, cluster_id="c0")

    # Execute: three windows, then the agent stops and starts again
    for index in range(3):
        agent._diagnose_safely(_window(index))
    agent.delivery.close()
    again, _ = _agent(tmp_path, monkeypatch, connected=False)

    # Assert: nothing published, all three logged and waiting, in order, after the restart
    assert published == []
    assert len(agent.log.recent(10)) == 3
    waiting = again.delivery.outbox.take(10).records
    assert [Diagnosis.model_validate_json(r).origin for r in waiting] == ["w0", "w1", "w2"]
    assert value(again.metrics.registry, "faultfleet_outbox_diagnoses") == 3.0


def test_a_diagnosis_made_while_the_outbox_sends_a_batch_waits_behind_it(
    tmp_path: Path, exported: ExportedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: two diagnoses kept during an outage; back online, the outbox thread has taken
    # them for sending but not handed them to the client yet
    agent, published = _agent(tmp_path, monkeypatch, connected=False)
    agent.diagnoser.load(exported.onnx_bytes, sha256=exported.sha256, version=1, cluster_id="c0")
    for index in range(2):
        agent._diagnose_safely(_window(index))
    in_flight = agent.delivery.outbox.take(10)
    monkeypatch.setattr(MqttConnection, "connected", property(lambda self: True))

    # Execute: a new window is diagnosed meanwhile
    agent._diagnose_safely(_window(2))

    # Assert: it is not published ahead of the batch but kept behind it, in order
    assert published == []
    agent.delivery.outbox.acknowledged(in_flight.end)
    waiting = agent.delivery.outbox.take(10).records
    assert [Diagnosis.model_validate_json(r).origin for r in waiting] == ["w2"]


def test_a_restarted_agent_names_diagnoses_after_its_saved_models_classes(
    tmp_path: Path, exported: ExportedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: a 12-class model saved by an earlier run, a manifest of 2 labels
    first, _ = _agent(tmp_path, monkeypatch)
    loaded = first.diagnoser.load(
        exported.onnx_bytes,
        sha256=exported.sha256,
        version=4,
        cluster_id="c0",
        class_names=MODEL_CLASSES,
    )
    ModelStore(tmp_path / "model").save(exported.onnx_bytes, loaded)
    first.log.close()
    agent, published = _agent(tmp_path, monkeypatch)

    # Execute: the restart, then a stream of windows
    agent._restore_model()
    for index in range(20):
        agent._diagnose_safely(_window(index))
    agent.delivery.send_handed_over()

    # Assert: every window diagnosed and named after the model
    assert agent.class_names == MODEL_CLASSES
    diagnoses = [Diagnosis.model_validate_json(p) for p in published]
    assert len(diagnoses) == 20
    assert all(d.class_name == MODEL_CLASSES[d.class_id] for d in diagnoses)
    assert value(agent.metrics.registry, "faultfleet_thread_errors_total", thread="diagnosis") == 0


def test_a_diagnosis_is_published_logged_and_remembered_as_the_messages_own_json(
    tmp_path: Path, exported: ExportedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: a labelled window, a model naming its classes
    agent, published = _agent(tmp_path, monkeypatch, flush_delay_s=0.0)
    agent.diagnoser.load(
        exported.onnx_bytes,
        sha256=exported.sha256,
        version=4,
        cluster_id="c0",
        class_names=MODEL_CLASSES,
    )
    window = Window(_window(5).samples, 1700000000.25, 3, origin='pump "3" @ 5')
    expected = agent.diagnoser.predict(window.samples)

    # Execute
    agent._diagnose_safely(window)
    agent.delivery.send_handed_over()

    # Assert: the model reads what was published back as the diagnosis it would have made,
    # and writes it again byte for byte; the log and the heartbeat hold the same
    (payload,) = published
    message = Diagnosis.model_validate_json(payload)
    class_id = int(expected.class_ids[0])
    assert message == Diagnosis(
        agent_id="m07",
        window_index=0,
        class_id=class_id,
        class_name=MODEL_CLASSES[class_id],
        probability=expected.probabilities.item(0, class_id),
        model_version=4,
        cluster_id="c0",
        timestamp=1700000000.25,
        latency_s=message.latency_s,
        true_label=3,
        origin='pump "3" @ 5',
    )
    assert message.latency_s > 0
    assert payload == message.model_dump_json().encode()
    assert agent.log.path.read_bytes() == payload + b"\n"
    assert agent.activity.heartbeat().last_diagnosis == message
