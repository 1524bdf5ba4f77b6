"""Hostile frames on an open broker: forged models are loaded by no agent, a nesting bomb
wedges nothing.

The broker is the anonymous test Mosquitto, so the attacker may publish anywhere, retained
messages included, as on a broker without the ACL. Agents run in threads of the test
(:func:`~tests.integration.services.running_agents`), the coordinator's publisher with the
test signing key.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.onnx_export import export_weights
from coordinator.adapters.publisher import ModelPublisher
from coordinator.runtime.service import CoordinatorService
from edge_agent.inference import ModelIntegrityError
from edge_agent.model_intake import ModelRejectReason
from edge_agent.service import AgentService
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.types import FloatArray
from faultfleet.wire.codec import MAGIC, RejectReason, encode_frame
from faultfleet.wire.messages import ClusterAssignment, ModelAnnouncement, ModelSpec
from faultfleet.wire.settings import BrokerSettings
from faultfleet.wire.signing import SigningKey

from .services import (
    SIGNING_KEY,
    CoordinatorThread,
    coordinator_settings,
    running_agents,
    sample_value,
    wait_until,
)
from .wire_clients import TOPICS, connect

SPEC = ModelSpec(name="compact", sample_shape=(1, 1024), n_classes=12)
CLASSES = tuple(f"class {i}" for i in range(12))
AGENTS = ["m00", "m01", "m02", "m03"]
HUGE_VERSION = 10**9
BOMB = MAGIC + (400_000).to_bytes(4, "big") + b"[" * 400_000
"""The wedge frame: 400 kB of '[' as a frame header."""


def _weights(seed: int) -> FloatArray:
    return flatten_weights(build_model("compact", (1, 1024), 12, seed=seed))


def _forgeries(run_id: str, cluster: str) -> tuple[str, list[bytes], dict[str, list[bytes]]]:
    """A self-consistent forged model (ONNX with its true digest) in every disguise."""
    fake = export_weights(_weights(99), "compact", (1, 1024), 12)
    announcement = ModelAnnouncement(
        cluster_id=cluster,
        version=HUGE_VERSION,
        sha256=fake.sha256,
        size_bytes=len(fake.onnx_bytes),
        run_id=run_id,
        server_round=HUGE_VERSION,
        model=SPEC,
        class_names=CLASSES,
        members=4,
        max_abs_diff=0.0,
        created_at=1e12,
    )
    attacker = SigningKey.generate()
    stolen_id = attacker.sign(announcement).model_copy(update={"key_id": SIGNING_KEY.key_id})
    models = [
        encode_frame(announcement, fake.onnx_bytes),  # unsigned, as before signing
        encode_frame(attacker.sign(announcement), fake.onnx_bytes),  # another key
        encode_frame(stolen_id, fake.onnx_bytes),  # another key's signature, our key id
    ]
    assignments = {}
    for agent in AGENTS:
        forged = ClusterAssignment(
            agent_id=agent,
            cluster_id=cluster,
            model_version=HUGE_VERSION,
            sha256=fake.sha256,
            run_id=run_id,
            server_round=HUGE_VERSION,
            timestamp=1e12,
        )
        assignments[agent] = [
            forged.model_dump_json().encode(),
            attacker.sign(forged).model_dump_json().encode(),
        ]
    return fake.sha256, models, assignments


def test_a_forged_model_is_loaded_by_no_agent_and_the_next_genuine_one_by_all(
    broker_settings: BrokerSettings, tmp_path: Path
) -> None:
    # Prepare: four agents serve the genuine v1 of cluster A
    coordinator = connect("test-coordinator", broker_settings, {})
    attacker = connect("attacker", broker_settings, {})
    publisher = ModelPublisher(coordinator, TOPICS, SPEC, CLASSES, "run-1", SIGNING_KEY)
    serving = dict.fromkeys(AGENTS, "A")
    try:
        with running_agents(broker_settings, tmp_path, range(len(AGENTS))) as agents:

            def on_version(version: int) -> list[str]:
                return [
                    a.agent_id
                    for a in agents
                    if a.diagnoser.active is not None and a.diagnoser.active.version == version
                ]

            def refused(reason: ModelRejectReason) -> float:
                registry = agents[0].metrics.registry
                return sample_value(
                    registry, "faultfleet_models_rejected_total", {"reason": reason.value}
                )

            publisher.publish(1, 1, {"A": _weights(1)}, serving)
            wait_until(lambda: len(on_version(1)) == len(AGENTS), 60, "every agent on v1")
            fake_digest, models, assignments = _forgeries("run-1", "A")

            # Execute: every forgery, retained, on the model topic and the assignments
            for frame in models:
                attacker.publish_wait(TOPICS.cluster_model("A"), frame, retain=True)
            for agent, forged in assignments.items():
                for payload in forged:
                    attacker.publish_wait(TOPICS.assignment(agent), payload, retain=True)
            n = len(AGENTS)
            wait_until(
                lambda: (
                    refused(ModelRejectReason.UNSIGNED) == 2 * n
                    and refused(ModelRejectReason.UNKNOWN_KEY) == 2 * n
                    and refused(ModelRejectReason.BAD_SIGNATURE) == n
                ),
                30,
                "every agent's refusals",
            )
            loaded_forged = [a.agent_id for a in agents if _digest(a) == fake_digest]
            still_v1 = on_version(1)
            second = publisher.publish(2, 2, {"A": _weights(2)}, serving)
            wait_until(lambda: len(on_version(2)) == len(AGENTS), 60, "every agent on v2")
            wait_until(
                lambda: all(_stored_version(a) == 2 for a in agents), 30, "v2 in every store"
            )
    finally:
        attacker.stop()
        coordinator.stop()

    # Assert
    assert loaded_forged == []
    assert still_v1 == AGENTS
    assert second.clusters == {"A": AGENTS}


def _digest(agent: AgentService) -> str | None:
    active = agent.diagnoser.active
    return None if active is None else active.sha256


def _stored_version(agent: AgentService) -> int | None:
    try:
        saved = agent.store.load()
    except ModelIntegrityError:  # caught between writing model.onnx and model.json
        return None
    return None if saved is None else saved[1].version


def test_a_nesting_bomb_is_counted_by_agent_and_coordinator_and_wedges_neither(
    broker_settings: BrokerSettings, tmp_path: Path
) -> None:
    # Prepare
    registry = CollectorRegistry()
    settings = coordinator_settings(broker_settings, tmp_path / "coordinator", rounds=2)
    attacker = connect("attacker", broker_settings, {})
    try:
        with running_agents(broker_settings, tmp_path / "agents", [0, 1]) as agents:
            agent_metrics = agents[0].metrics.registry
            # Subscribed, not only connected: a frame published before the broker took an
            # agent's subscription to its task topic would reach nobody.
            wait_until(
                lambda: all(a.connection.wait_subscribed(0.1) for a in agents),
                30,
                "the agents' subscriptions",
            )

            # Execute: the bomb on both agents' task topics, then a run; and during the run
            # on a result and a status topic (results are subscribed once the run starts)
            for agent in agents:
                attacker.publish_wait(TOPICS.tasks(agent.agent_id), BOMB)
            wait_until(
                lambda: (
                    sample_value(
                        agent_metrics, "faultfleet_tasks_rejected_total", {"reason": "malformed"}
                    )
                    == 2
                ),
                30,
                "the agents' refusals",
            )
            service = CoordinatorService(settings, CoordinatorMetrics(registry))
            coordinator = CoordinatorThread(service)
            try:
                wait_until(lambda: service.fleet is not None, 60, "the run's start")
                wait_until(lambda: service.connection.wait_subscribed(0.1), 30, "subscriptions")
                attacker.publish_wait(TOPICS.results("m00"), BOMB)
                attacker.publish_wait(TOPICS.agent_status("m01"), BOMB)
                wait_until(
                    lambda: (
                        sample_value(
                            registry,
                            "faultfleet_updates_rejected_total",
                            {"reason": RejectReason.MALFORMED.value},
                        )
                        == 2
                    ),
                    30,
                    "the coordinator's refusals (a result and a status)",
                )
                summary = coordinator.result(timeout_s=180)
            finally:
                coordinator.close()
    finally:
        attacker.stop()

    # Assert: both agents answered every genuine task after the bomb; nothing escaped a handler
    assert summary.finished
    assert summary.server_round == 2
    assert sample_value(registry, "faultfleet_updates_received_total") == 2 * 2
    assert service.connection.handler_errors == 0
    assert all(a.connection.handler_errors == 0 for a in agents)
