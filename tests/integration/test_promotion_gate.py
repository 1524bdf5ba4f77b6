"""The promotion gate and a rollback over a real Mosquitto broker.

Two simulated machines (FedAvg, one ``global`` cluster) train two rounds, publishing after
each. Then a deliberately worse candidate — random weights whose output bias always names
class 11, a class neither machine has — goes through the coordinator's own promotion path:
the agents evaluate it and the serving version on their validation windows, the gate
rejects it and the agents keep diagnosing with the serving version. Finally
``faultfleet models rollback`` asks for version 1, and the running coordinator publishes it
again as a new version, which both agents load and report in their status.
"""

from __future__ import annotations

import threading
from pathlib import Path

import torch
from prometheus_client import CollectorRegistry
from pydantic import TypeAdapter

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.model_registry import ModelRegistry
from coordinator.runtime.promotion import ModelPromotion
from coordinator.runtime.service import CoordinatorService
from coordinator.runtime.settings import ModelsSettings
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.types import FloatArray
from faultfleet.wire.codec import parse_envelope, split_frame
from faultfleet.wire.messages import AgentStatus, ModelAnnouncement
from faultfleet.wire.settings import BrokerSettings
from faultfleet_apps.cli.main import main

from .services import coordinator_settings, open_signed, running_agents, sample_value, wait_until
from .wire_clients import ALL_MODELS, TOPICS, Recorder

AGENTS = ("m00", "m01")
_STATUS = TypeAdapter(AgentStatus)
_ANNOUNCEMENT = TypeAdapter(ModelAnnouncement)


def _always_class_11() -> FloatArray:
    model = build_model("compact", (1, 1024), 12, seed=99)
    head = model.get_submodule("classifier.2")
    assert isinstance(head, torch.nn.Linear)
    with torch.no_grad():
        head.bias.fill_(-100.0)
        head.bias[11] = 100.0
    return flatten_weights(model)


def _published_version(payload: bytes) -> int:
    header, _ = split_frame(payload, max_bytes=len(payload))
    return open_signed(_ANNOUNCEMENT, header).version


def _reported_versions(recorder: Recorder) -> dict[str, int | None]:
    """Each agent's last reported serving version (its retained status)."""
    reported: dict[str, int | None] = {}
    for message in recorder.on(TOPICS.all_agent_status()):
        if message.payload:
            status = parse_envelope(_STATUS, message.payload)
            reported[status.agent_id] = status.model_version
    return reported


def test_a_worse_candidate_is_rejected_and_a_rollback_reaches_the_agents(
    broker_settings: BrokerSettings, tmp_path: Path, recorder: Recorder
) -> None:
    # Prepare
    state_dir = tmp_path / "coordinator"
    settings = coordinator_settings(
        broker_settings, state_dir, rounds=2, eval_every=1, publish_every=1
    ).model_copy(update={"models": ModelsSettings(promotion_margin=0.02, request_poll_s=0.1)})
    metrics = CoordinatorMetrics(CollectorRegistry())
    service = CoordinatorService(settings, metrics)
    registry = ModelRegistry(state_dir / "models")
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), name="coordinator")

    with running_agents(broker_settings, tmp_path / "agents", range(2)) as agents:
        thread.start()
        try:
            wait_until(lambda: bool(service.summary and service.summary.finished), 120, "the run")
            serving = registry.serving().clusters["global"].version

            def all_serve(version: int) -> bool:
                actives = [a.diagnoser.active for a in agents]
                return all(m is not None and m.version == version for m in actives) and (
                    _reported_versions(recorder) == dict.fromkeys(AGENTS, version)
                )

            wait_until(lambda: all_serve(serving), 30, f"both agents serving v{serving}")
            assert service.publisher is not None
            assert service.fleet is not None
            assert service.summary is not None
            promotion = ModelPromotion(
                registry, service.publisher, service.fleet, metrics,
                margin=0.02, keep_versions=20,
            )  # fmt: skip

            # Execute: the worse candidate through the gate
            worse = promotion.next_version(service.summary.model_version)
            promotion.publish(
                worse, 2, {"global": _always_class_11()}, dict.fromkeys(AGENTS, "global")
            )
            kept = {a.agent_id: a.assignment.model_version for a in agents if a.assignment}

            # Execute: a rollback to version 1, applied by the running coordinator
            status = main(["models", "rollback", "--state-dir", str(state_dir), "global", "1"])
            wait_until(lambda: worse + 1 in registry.versions("global"), 30, "the rollback")
            wait_until(lambda: all_serve(worse + 1), 30, f"both agents serving v{worse + 1}")
            actives = {a.agent_id: a.diagnoser.active for a in agents}
        finally:
            stop.set()
            thread.join(30)

    # Assert: the worse candidate is kept as rejected, with the agents' figures
    rejected = registry.record("global", worse)
    assert rejected.gate.decision == "rejected"
    assert rejected.parent_version == serving
    assert rejected.gate.candidate_accuracy == 0.0
    assert rejected.gate.serving_accuracy is not None
    assert rejected.gate.serving_accuracy > 0.02
    assert rejected.gate.agents == AGENTS
    assert kept == dict.fromkeys(AGENTS, serving)
    # Assert: it never reached the broker; the rollback did, with version 1's bytes
    versions_published = [
        _published_version(m.payload) for m in recorder.on(ALL_MODELS) if m.payload
    ]
    assert worse not in versions_published
    assert versions_published[-1] == worse + 1
    restored = registry.record("global", worse + 1)
    assert status == 0
    assert (restored.restores, restored.origin) == (1, "rollback")
    assert restored.sha256 == registry.record("global", 1).sha256
    for agent_id in AGENTS:
        active = actives[agent_id]
        assert active is not None
        assert (active.version, active.sha256) == (worse + 1, restored.sha256)
    rejected_count = sum(
        registry.record("global", v).gate.decision == "rejected"
        for v in registry.versions("global")
    )
    assert sample_value(
        metrics.registry, "faultfleet_promotions_total", {"decision": "rejected"}
    ) == (rejected_count)
    assert (
        sample_value(metrics.registry, "faultfleet_promotions_total", {"decision": "rollback"}) == 1
    )
    assert registry.serving().clusters["global"].version == worse + 1
