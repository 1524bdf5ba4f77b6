"""ModelPromotion: versions registered, gated by the agents' evaluations, pins and rollbacks.

The fleet is a fake that scores each model by a table (its agents' "validation accuracy"),
the publisher is the real one over a connection that records what it publishes, and the
registry is real files.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.model_registry import ModelRegistry, Request
from coordinator.adapters.mqtt_fleet import MqttFleet
from coordinator.adapters.onnx_export import ExportedModel, OnnxVerificationError, export_weights
from coordinator.adapters.publisher import ModelPublisher
from coordinator.runtime import promotion as promotion_module
from coordinator.runtime.promotion import ModelPromotion
from coordinator.runtime.run_summary import RunSummary
from coordinator.runtime.serving import ModelServing
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.tasks import EvaluateOutcome, EvaluateResult, EvaluateTask, Split
from faultfleet.types import FloatArray
from faultfleet.wire.messages import ModelSpec
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.signing import SigningKey
from faultfleet.wire.topics import Topics

SPEC = ModelSpec(name="compact", sample_shape=(1, 1024), n_classes=12)
TOPICS = Topics("ff")
AGENTS = {"m00": "A", "m01": "A"}


def _weights(seed: int) -> FloatArray:
    return flatten_weights(build_model("compact", (1, 1024), 12, seed=seed))


def _digest(weights: FloatArray) -> str:
    return hashlib.sha256(weights.tobytes()).hexdigest()


class Recorder:
    """The part of MqttConnection the publisher uses: what was published, in order, and
    the waits for the broker's acknowledgements before it (``("wait", max_bytes)``)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []
        self.events: list[tuple[str, object]] = []
        self.connected = True
        self.taken = True
        """What :meth:`wait_backlog` answers: whether the broker took the backlog in time."""

    def publish(self, topic: str, payload: bytes | str, retain: bool = False) -> int:
        data = payload.encode() if isinstance(payload, str) else payload
        self.sent.append((topic, data))
        self.events.append(("publish", topic))
        return len(data)

    def wait_backlog(self, max_bytes: int, timeout_s: float) -> bool:
        self.events.append(("wait", max_bytes))
        return self.taken

    def assignments(self) -> dict[str, int]:
        """Agent → model version of the last assignment published to it."""
        found: dict[str, int] = {}
        for topic, data in self.sent:
            if topic.endswith("/assignment") and data:
                inner = json.loads(json.loads(data)["message"])
                found[inner["agent_id"]] = inner["model_version"]
        return found


class ScoringFleet:
    """Online agents that score a model by its weights (validation accuracy from a table)."""

    def __init__(self, accuracy: dict[str, float]) -> None:
        self.accuracy = accuracy
        self.splits: list[Split] = []

    def online_clients(self) -> list[str]:
        return sorted(AGENTS)

    def evaluate(self, server_round: int, tasks: Sequence[EvaluateTask]) -> EvaluateOutcome:
        results = []
        for task in tasks:
            self.splits.append(task.split)
            ((key, weights),) = task.models.items()
            results.append(
                EvaluateResult(task.client_id, key, self.accuracy[_digest(weights)], 0.1, 50)
            )
        return EvaluateOutcome(tuple(results))


@pytest.fixture
def setup(tmp_path: Path) -> tuple[ModelPromotion, Recorder, ScoringFleet, CoordinatorMetrics]:
    recorder = Recorder()
    publisher = ModelPublisher(
        cast(MqttConnection, recorder), TOPICS, SPEC, tuple(f"c{i}" for i in range(12)),
        "run", SigningKey.generate(), clock=lambda: 1000.0,
    )  # fmt: skip
    fleet = ScoringFleet({})
    metrics = CoordinatorMetrics(CollectorRegistry())
    promotion = ModelPromotion(
        ModelRegistry(tmp_path / "models"), publisher, cast(MqttFleet, fleet), metrics,
        margin=0.05, keep_versions=2, clock=lambda: 1000.0,
    )  # fmt: skip
    return promotion, recorder, fleet, metrics


def _count(metrics: CoordinatorMetrics, decision: str) -> float:
    value = metrics.registry.get_sample_value("faultfleet_promotions_total", {"decision": decision})
    return float(value or 0.0)


def test_a_worse_candidate_is_kept_as_rejected_and_agents_keep_the_serving_version(
    setup: Any,
) -> None:
    # Prepare: v1 serves cluster A (accuracy 0.9); v2 is much worse (0.3), v3 slightly (0.87)
    promotion, recorder, fleet, metrics = setup
    good, bad, close = _weights(0), _weights(1), _weights(2)
    fleet.accuracy = {_digest(good): 0.9, _digest(bad): 0.3, _digest(close): 0.87}
    promotion.publish(1, 1, {"A": good}, AGENTS)

    # Execute
    promotion.publish(2, 2, {"A": bad}, AGENTS)
    after_bad = recorder.assignments()
    promotion.publish(3, 3, {"A": close}, AGENTS)

    # Assert
    registry = promotion.registry
    rejected = registry.record("A", 2)
    assert after_bad == {"m00": 1, "m01": 1}
    assert (rejected.gate.decision, rejected.parent_version) == ("rejected", 1)
    assert rejected.gate.candidate_accuracy == pytest.approx(0.3)
    assert rejected.gate.serving_accuracy == pytest.approx(0.9)
    assert registry.record("A", 3).gate.decision == "promoted"
    assert registry.serving().clusters["A"].version == 3
    assert recorder.assignments() == {"m00": 3, "m01": 3}
    assert set(fleet.splits) == {Split.VAL}
    assert (_count(metrics, "promoted"), _count(metrics, "rejected")) == (2, 1)


def test_a_rollback_publishes_the_earlier_bytes_as_a_new_version(setup: Any) -> None:
    # Prepare: v1 then v2 promoted
    promotion, recorder, fleet, _ = setup
    first, second = _weights(0), _weights(1)
    fleet.accuracy = {_digest(first): 0.8, _digest(second): 0.8}
    promotion.publish(1, 1, {"A": first}, AGENTS)
    promotion.publish(2, 2, {"A": second}, AGENTS)
    registry = promotion.registry
    registry.request("A", Request(action="rollback", version=1, requested_at=5.0))

    # Execute
    version = promotion.apply_requests(at_least=2)

    # Assert: v3 restores v1, serves, and both agents are assigned it; the request is gone
    restored = registry.record("A", 3)
    assert version == 3
    assert (restored.restores, restored.origin, restored.parent_version) == (1, "rollback", 2)
    assert restored.sha256 == registry.record("A", 1).sha256
    assert registry.onnx_bytes("A", 3) == registry.onnx_bytes("A", 1)
    assert registry.serving().clusters["A"].version == 3
    assert recorder.assignments() == {"m00": 3, "m01": 3}
    assert registry.pending() == {}


def test_a_pinned_cluster_keeps_its_version_until_unpinned(setup: Any) -> None:
    promotion, _, fleet, metrics = setup
    first, better = _weights(0), _weights(1)
    fleet.accuracy = {_digest(first): 0.5, _digest(better): 0.9}
    promotion.publish(1, 1, {"A": first}, AGENTS)
    promotion.registry.request("A", Request(action="pin", requested_at=5.0))
    promotion.apply_requests(at_least=1)

    promotion.publish(2, 2, {"A": better}, AGENTS)
    pinned = promotion.registry.serving().clusters["A"]
    promotion.registry.request("A", Request(action="unpin", requested_at=6.0))
    promotion.apply_requests(at_least=2)
    promotion.publish(3, 3, {"A": better}, AGENTS)

    assert (pinned.version, pinned.pinned) == (1, True)
    assert promotion.registry.record("A", 2).gate.decision == "pinned"
    assert promotion.registry.serving().clusters["A"].version == 3
    assert _count(metrics, "pinned") == 1


def test_retention_keeps_the_newest_versions_and_the_serving_one(setup: Any) -> None:
    # Prepare: v1 serves; v2..v4 are rejected (keep_versions=2)
    promotion, _, fleet, _ = setup
    weights = [_weights(seed) for seed in range(4)]
    fleet.accuracy = {_digest(weights[0]): 0.9} | {_digest(w): 0.1 for w in weights[1:]}

    for version, w in enumerate(weights, start=1):
        promotion.publish(version, version, {"A": w}, AGENTS)

    assert promotion.registry.versions("A") == [1, 3, 4]


def test_a_request_for_a_missing_version_is_dropped_with_the_serving_version_kept(
    setup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    promotion, _, fleet, _ = setup
    w = _weights(0)
    fleet.accuracy = {_digest(w): 0.9}
    promotion.publish(1, 1, {"A": w}, AGENTS)
    promotion.registry.request("A", Request(action="rollback", version=7, requested_at=5.0))

    assert promotion.apply_requests(at_least=1) is None
    assert promotion.registry.serving().clusters["A"].version == 1
    assert "v000007" in caplog.text
    assert "cannot rollback cluster A" in caplog.text


class _OneModel:
    """The part of a strategy ModelServing reads: every agent is served ``A``."""

    def __init__(self, weights: FloatArray) -> None:
        self.models = {"A": weights}

    def model_ready(self, agent: str) -> bool:
        return True

    def predict_models(self, agent: str) -> list[str]:
        return ["A"]

    def model_key_for(self, agent: str) -> str:
        return "A"


def test_a_corrupt_serving_table_is_logged_naming_it_and_the_service_keeps_serving(
    setup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: v1 serves; then serving.json is damaged
    promotion, recorder, fleet, metrics = setup
    w = _weights(0)
    fleet.accuracy = {_digest(w): 0.9}
    promotion.publish(1, 1, {"A": w}, AGENTS)
    table = promotion.registry.root / "serving.json"
    table.write_text("{")
    engine = SimpleNamespace(strategy=_OneModel(_weights(1)))
    summary = RunSummary(run_id="run", strategy="fedavg", agents=sorted(AGENTS), model_version=1)
    serving = ModelServing(cast(Any, engine), cast(MqttFleet, fleet), promotion, summary, metrics)
    sent_before = len(recorder.sent)

    # Execute
    serving.publish(2)

    # Assert: nothing published, the version counter unchanged, the file named
    assert len(recorder.sent) == sent_before
    assert summary.model_version == 1
    assert f"{table} is corrupt" in caplog.text


# -- memory: one cluster's model at a time -------------------------------------------------


def test_a_publication_exports_and_announces_one_cluster_model_at_a_time(
    setup: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: four clusters, each new; the real export, watched for the models it made
    promotion, recorder, fleet, _ = setup
    clusters = {key: _weights(seed) for seed, key in enumerate("ABCD")}
    serving = {f"m{i:02d}": key for i, key in enumerate(clusters)}
    fleet.accuracy = {_digest(w): 0.9 for w in clusters.values()}
    made: list[weakref.ref[ExportedModel]] = []
    alive_at_export: list[int] = []

    def watched_export(*args: Any, **kwargs: Any) -> ExportedModel:
        alive_at_export.append(sum(ref() is not None for ref in made))
        exported = export_weights(*args, **kwargs)
        made.append(weakref.ref(exported))
        return exported

    monkeypatch.setattr(promotion_module, "export_weights", watched_export)

    # Execute
    promotion.publish(1, 1, clusters, serving)

    # Assert: when each model is exported at most the one before it is still held (by the
    # loop's variable), and every cluster was announced, each after a wait for the broker
    assert alive_at_export == [0, 1, 1, 1]
    models = [t for kind, t in recorder.events if kind == "publish" and str(t).endswith("/model")]
    assert len(models) == 4
    for topic in models:
        at = recorder.events.index(("publish", topic))
        assert recorder.events[at - 1] == ("wait", promotion.publisher.max_backlog_bytes)


def test_a_model_is_announced_without_waiting_while_disconnected_or_after_a_slow_broker(
    setup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    promotion, recorder, fleet, _ = setup
    first, second = _weights(0), _weights(1)
    fleet.accuracy = {_digest(first): 0.5, _digest(second): 0.9}

    recorder.connected = False
    promotion.publish(1, 1, {"A": first}, AGENTS)
    waits_disconnected = [e for e in recorder.events if e[0] == "wait"]
    recorder.connected, recorder.taken = True, False
    promotion.publish(2, 2, {"A": second}, AGENTS)

    assert waits_disconnected == []
    assert [e for e in recorder.events if e[0] == "wait"] == [
        ("wait", promotion.publisher.max_backlog_bytes)
    ]
    assert recorder.events[-1][0] == "publish"  # the assignments after the model
    assert promotion.registry.serving().clusters["A"].version == 2
    assert "publishing the model anyway" in caplog.text


def test_a_cluster_whose_model_fails_the_onnx_check_keeps_its_version_and_others_go_on(
    setup: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: A and B serve v1; at v2, B's new model fails ONNX Runtime's check
    promotion, recorder, fleet, _ = setup
    serving = {"m00": "A", "m01": "B"}
    first = {"A": _weights(0), "B": _weights(1)}
    second = {"A": _weights(2), "B": _weights(3)}
    fleet.accuracy = {_digest(w): 0.9 for w in [*first.values(), *second.values()]}
    promotion.publish(1, 1, first, serving)
    failing = _digest(second["B"])

    def export_or_fail(weights: FloatArray, *args: Any, **kwargs: Any) -> ExportedModel:
        if _digest(weights) == failing:
            raise OnnxVerificationError("max |ORT - torch| 0.3 exceeds 1e-05")
        return export_weights(weights, *args, **kwargs)

    monkeypatch.setattr(promotion_module, "export_weights", export_or_fail)

    # Execute
    promotion.publish(2, 2, second, serving)

    # Assert: A moved to v2, B kept v1 (no v2 registered), the error names the cluster
    table = promotion.registry.serving()
    assert (table.clusters["A"].version, table.clusters["B"].version) == (2, 1)
    assert promotion.registry.versions("B") == [1]
    assert recorder.assignments() == {"m00": 2, "m01": 1}
    assert table.agents == {"m00": "A", "m01": "B"}
    assert "cluster B v2 not published: max |ORT - torch| 0.3" in caplog.text
    assert "the cluster keeps v1" in caplog.text
