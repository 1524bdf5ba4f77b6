"""A small federation end to end over a real Mosquitto broker.

Eight simulated machines in two groups of four (the mixed-fault scenario: machines 0–3
hold labels 0 and 1, machines 4–7 labels 2 and 3) run as edge agents in threads, the
coordinator in another thread, exactly as the CLI wires them. FLACC with options for tiny
data (merge up to 7 pairs per round, separate after 1 round without a merge, α0 = 0.3)
clusters them in round 1, separates in round 3 and publishes one ONNX model per cluster;
every agent must end up diagnosing live windows with its own cluster's model.

On this data the within-group update similarities are about 0.55 and the cross-group ones
about 0 (seeded, so every run sees the same values), far on either side of α0.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from pydantic import TypeAdapter

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.engine.state import has_state, load_state
from coordinator.runtime.run_summary import load_summary
from coordinator.runtime.service import CoordinatorService
from faultfleet.wire.codec import RejectReason, parse_envelope, split_frame
from faultfleet.wire.messages import ClusterAssignment, Diagnosis, ModelAnnouncement
from faultfleet.wire.settings import BrokerSettings
from signal_pipeline.conditions import label_names

from .services import (
    CoordinatorThread,
    coordinator_settings,
    open_signed,
    running_agents,
    sample_value,
    wait_until,
)
from .wire_clients import (
    ALL_ASSIGNMENTS,
    ALL_MODELS,
    TOPICS,
    Recorder,
)

ROUNDS = 3
MACHINES = range(8)
FLACC_OPTIONS = {"n_merge": 7, "n_sep": 1, "alpha0": 0.3}
GROUPS = {
    "cluster-0": ["m00", "m01", "m02", "m03"],
    "cluster-1": ["m04", "m05", "m06", "m07"],
}

_ASSIGNMENT = TypeAdapter(ClusterAssignment)
_ANNOUNCEMENT = TypeAdapter(ModelAnnouncement)
_DIAGNOSIS = TypeAdapter(Diagnosis)


def test_federation_clusters_the_groups_and_agents_diagnose_with_their_cluster_model(
    broker_settings: BrokerSettings, tmp_path: Path, recorder: Recorder
) -> None:
    # Prepare
    registry = CollectorRegistry()
    state_dir = tmp_path / "coordinator"
    settings = coordinator_settings(
        broker_settings,
        state_dir,
        strategy="flacc",
        strategy_options=FLACC_OPTIONS,
        rounds=ROUNDS,
        min_agents=len(MACHINES),
    )
    service = CoordinatorService(settings, CoordinatorMetrics(registry))

    # Execute
    with running_agents(broker_settings, tmp_path / "agents", MACHINES) as agents:
        coordinator = CoordinatorThread(service)
        try:
            summary = coordinator.result(timeout_s=120)
        finally:
            coordinator.close()

        def every_agent_diagnosed_with_the_published_model() -> bool:
            published = [
                parse_envelope(_DIAGNOSIS, m.payload) for m in recorder.on(TOPICS.all_diagnoses())
            ]
            return all(
                any(d.agent_id == a.agent_id and d.model_version == 1 for d in published)
                for a in agents
            )

        wait_until(every_agent_diagnosed_with_the_published_model, 30, "every agent's diagnoses")
        active = {a.agent_id: a.diagnoser.active for a in agents}
        held = {a.agent_id: a.assignment for a in agents}

    agent_dirs = {a.agent_id: a.settings.state_dir for a in agents}

    # Assert: the run, its clusters, its checkpoint
    assert summary.finished
    assert summary.server_round == ROUNDS
    assert summary.clusters == GROUPS
    assert summary.model_version == 1
    assert has_state(state_dir / "engine")
    assert load_state(state_dir / "engine").meta["server_round"] == ROUNDS
    saved = load_summary(state_dir)
    assert saved is not None
    assert (saved["run_id"], saved["server_round"], saved["finished"]) == (
        summary.run_id,
        ROUNDS,
        True,
    )

    # Assert: the clustering judged without ground truth, in summary.json and the metrics
    quality = saved["cluster_quality"]
    assert quality["settled"] is True
    assert sorted(c["size"] for c in quality["clusters"]) == sorted(map(len, GROUPS.values()))
    assert 0.0 <= quality["confidence"] <= 1.0
    assert registry.get_sample_value("faultfleet_cluster_confidence_ratio") == pytest.approx(
        quality["confidence"]
    )
    assert registry.get_sample_value("faultfleet_cluster_min_margin") == pytest.approx(
        quality["min_margin"]
    )

    # Assert: one retained ONNX model per cluster, its digest over the bytes delivered
    models = {}
    for message in recorder.on(ALL_MODELS):
        header, onnx_bytes = split_frame(message.payload, max_bytes=len(message.payload))
        announcement = open_signed(_ANNOUNCEMENT, header)
        assert hashlib.sha256(onnx_bytes).hexdigest() == announcement.sha256
        assert announcement.size_bytes == len(onnx_bytes)
        models[announcement.cluster_id] = announcement
    assert sorted(models) == sorted(GROUPS)
    assert {cid: (m.version, m.members, m.run_id) for cid, m in models.items()} == {
        cid: (1, len(members), summary.run_id) for cid, members in GROUPS.items()
    }

    # Assert: each agent was assigned its cluster and runs exactly that model
    assignments = {
        a.agent_id: a
        for a in (open_signed(_ASSIGNMENT, m.payload) for m in recorder.on(ALL_ASSIGNMENTS))
    }
    for cid, members in GROUPS.items():
        for agent_id in members:
            assignment = assignments[agent_id]
            assert (assignment.cluster_id, assignment.model_version) == (cid, 1)
            assert assignment.sha256 == models[cid].sha256
            assert held[agent_id] == assignment
            loaded = active[agent_id]
            assert loaded is not None
            assert (loaded.cluster_id, loaded.version, loaded.sha256) == (
                cid,
                1,
                models[cid].sha256,
            )
            assert (agent_dirs[agent_id] / "model").is_dir()
            assert (agent_dirs[agent_id] / "diagnoses.jsonl").stat().st_size > 0

    # Assert: diagnoses on agents/+/diagnoses follow the schema and name the agent's model
    class_names = label_names(tuple(range(12)))
    diagnoses = recorder.on(TOPICS.all_diagnoses())
    for message in diagnoses:
        diagnosis = parse_envelope(_DIAGNOSIS, message.payload)
        assert message.topic == TOPICS.diagnoses(diagnosis.agent_id)
        assert diagnosis.class_name == class_names[diagnosis.class_id]
        assert diagnosis.cluster_id == assignments[diagnosis.agent_id].cluster_id
        assert diagnosis.true_label is not None

    # Assert: the metrics moved
    def value(name: str, **labels: str) -> float:
        return sample_value(registry, name, labels)

    assert value("faultfleet_rounds_total") == ROUNDS
    assert value("faultfleet_round") == ROUNDS
    assert value("faultfleet_updates_received_total") == ROUNDS * len(MACHINES)
    assert value("faultfleet_models_published_total") == len(GROUPS)
    assert value("faultfleet_clusters") == len(GROUPS)
    assert value("faultfleet_agents_online") == len(MACHINES)
    assert value("faultfleet_payload_sent_bytes_total") > 0
    assert all(
        value("faultfleet_updates_rejected_total", reason=r.value) == 0 for r in RejectReason
    )
