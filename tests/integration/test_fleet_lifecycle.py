"""A FLACC fleet's life over a real Mosquitto broker, as a plant engineer would live it.

Six simulated machines in two groups (m00–m02 hold labels 0 and 1, m04–m06 labels 2 and 3)
train a first campaign: FLACC clusters them in round 1 and separates in round 3, which
publishes one model per group. Then

1. a seventh machine, m07 of the second group, comes online after the separation: the
   coordinator offers it both cluster models, it scores them on its validation windows,
   is placed on its group's cluster in the pass that found it, and diagnoses with that
   cluster's serving version; a live sensor without any label, m09, comes online too and
   is served the cluster of most members (on a tie, the first), flagged unverified;
2. a maintenance finding labels m00's live windows (its labels file): the new labelled
   windows start campaign c2, in which m07 has joined the federation and trains with its
   cluster — which now serves most members, so m09 follows it;
3. a deliberately worse candidate for the second cluster — a model trained on that group's
   windows with its two labels swapped — goes through the coordinator's promotion path:
   the agents evaluate it, the gate rejects it and they keep the serving version;
4. ``faultfleet models rollback`` returns the cluster to version 1 and its agents report
   serving the version that restores it.

``faultfleet status --json`` shows each step.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.model_registry import ModelRegistry
from coordinator.runtime.promotion import ModelPromotion
from coordinator.runtime.service import CoordinatorService
from coordinator.runtime.settings import CampaignSettings, CoordinatorSettings, ModelsSettings
from edge_agent.settings import AgentSettings, DiagnosisSettings, LabelsSettings, SourceSettings
from edge_agent.training import local_update
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.tasks import TrainConfig
from faultfleet.types import FloatArray
from faultfleet.wire.settings import BrokerSettings
from faultfleet_apps.cli.main import main
from signal_pipeline.federation import Dataset

from .services import coordinator_settings, running_agents, sample_value, wait_until
from .test_federation import FLACC_OPTIONS

FIRST = (0, 1, 2, 4, 5, 6)
TIMEOUT_S = 120.0


def quick(settings: AgentSettings) -> AgentSettings:
    """Heartbeats and label rescans every 0.2 s."""
    return settings.model_copy(
        update={
            "diagnosis": DiagnosisSettings(interval_s=0.05, heartbeat_s=0.2),
            "labels": LabelsSettings(rescan_s=0.2),
        }
    )


def live(settings: AgentSettings) -> AgentSettings:
    """A live sensor: no labelled window, diagnosis only."""
    return quick(settings).model_copy(update={"source": SourceSettings(kind="live")})


def status_of(config: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """``faultfleet status --json`` as a document."""
    assert main(["status", "--config", str(config), "--json", "--timeout", "30"]) == 0
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


def wait_for_status(
    config: Path, capsys: pytest.CaptureFixture[str], what: str, holds: Any
) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def reached() -> bool:
        seen.clear()
        seen.update(status_of(config, capsys))
        return bool(holds(seen))

    wait_until(reached, TIMEOUT_S, what)
    return seen


def campaign(document: dict[str, Any]) -> dict[str, Any]:
    return (document["coordinator"] or {}).get("campaign") or {}


def agent_rows(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["agent_id"]: row for row in document["agents"]}


def swapped_labels_model(agents: list[Any]) -> FloatArray:
    """A compact model trained on the agents' training windows with labels 2 and 3 swapped."""
    data = [a.source.training_data().train for a in agents]
    x = np.concatenate([d.x for d in data])
    y = np.concatenate([d.y for d in data])
    swapped = np.where(y == 2, 3, np.where(y == 3, 2, y)).astype(np.int64)
    model = build_model("compact", (1, 1024), 12, seed=7)
    config = TrainConfig(epochs=5, learning_rate=1e-3)
    start = flatten_weights(model)
    update = local_update(model, start, Dataset(x, swapped), config, 7, torch.device("cpu"))
    return update.weights


@pytest.fixture
def status_config(broker_settings: BrokerSettings, tmp_path: Path) -> Path:
    path = tmp_path / "status.toml"
    path.write_text(
        f'[broker]\nhost = "{broker_settings.host}"\nport = {broker_settings.port}\n',
        encoding="utf-8",
    )
    return path


@pytest.mark.timeout(600)
def test_a_newcomer_is_served_at_once_new_labels_retrain_and_the_gate_and_rollback_hold(
    broker_settings: BrokerSettings,
    tmp_path: Path,
    status_config: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Prepare: a serving coordinator; after the first campaign, campaigns of one round
    state_dir = tmp_path / "coordinator"
    base = coordinator_settings(
        broker_settings,
        state_dir,
        strategy="flacc",
        strategy_options=FLACC_OPTIONS,
        rounds=3,
        min_agents=len(FIRST),
    )
    settings = CoordinatorSettings(
        **{
            **dict(base),
            "campaigns": CampaignSettings(min_new_labelled_windows=10, rounds=1),
            "models": ModelsSettings(request_poll_s=0.2, promotion_margin=0.02),
        }
    )
    metrics = CoordinatorMetrics(CollectorRegistry())
    service = CoordinatorService(settings, metrics)
    registry = ModelRegistry(state_dir / "models")
    stop = threading.Event()
    coordinator = threading.Thread(target=service.run, args=(stop,), name="coordinator")
    agents_dir = tmp_path / "agents"
    started = time.time()

    with running_agents(broker_settings, agents_dir, FIRST, adjust=quick) as members:
        coordinator.start()
        try:
            # Step 0: the first campaign separates the groups and publishes v1 of each
            first = wait_for_status(
                status_config, capsys, "campaign c1 done",
                lambda d: campaign(d).get("status") == "done",
            )  # fmt: skip
            serving = registry.serving()
            group_a, group_b = serving.agents["m00"], serving.agents["m04"]
            by_agent = dict(serving.agents)

            # Step 1: m07 (second group) and m09 (no labels) come online, served at once
            with (
                running_agents(broker_settings, agents_dir, [7], adjust=quick) as (late,),
                running_agents(broker_settings, agents_dir, [9], adjust=live) as (sensor,),
            ):

                def serves(agent: Any, cluster: str) -> bool:
                    active = agent.diagnoser.active
                    return active is not None and active.cluster_id == cluster

                wait_until(
                    lambda: serves(late, group_b) and serves(sensor, group_a),
                    TIMEOUT_S,
                    "m07 and m09 loading their cluster's model",
                )
                late_model = late.diagnoser.active
                placed = wait_for_status(
                    status_config, capsys, "m07 and m09 placed in faultfleet status",
                    lambda d: all(
                        (agent_rows(d).get(a) or {}).get("placement") is not None
                        and agent_rows(d)[a]["serving_model_version"] is not None
                        for a in ("m07", "m09")
                    ),
                )  # fmt: skip
                note = service.newcomers.book.placements["m07"]  # type: ignore[union-attr]

                # Step 2: a maintenance finding labels m00's live windows: campaign c2
                labels = members[0].settings.state_dir / "labels.csv"
                labels.write_text(f"start,end,label\n{started},{time.time()},0\n")
                second = wait_for_status(
                    status_config, capsys, "campaign c2 done",
                    lambda d: (campaign(d).get("campaign_id"), campaign(d).get("status"))
                    == ("c2", "done"),
                )  # fmt: skip
                strategy = service.engine.strategy  # type: ignore[union-attr]
                wait_until(lambda: serves(sensor, group_b), TIMEOUT_S, "m09 following m07")
                followed = status_of(status_config, capsys)
                trained = sample_value(
                    late.metrics.registry, "faultfleet_local_training_seconds_count"
                )

                # Step 3: a candidate trained on swapped labels goes through the gate
                b_agents = sorted(a for a, c in registry.serving().agents.items() if c == group_b)
                kept_version = registry.serving().clusters[group_b].version
                worse = swapped_labels_model([a for a in members if a.agent_id in b_agents])
                promotion = ModelPromotion(
                    registry, service.publisher, service.fleet, metrics,  # type: ignore[arg-type]
                    margin=0.02, keep_versions=20,
                )  # fmt: skip
                rejected_version = promotion.next_version(service.summary.model_version)  # type: ignore[union-attr]
                promotion.publish(
                    rejected_version,
                    second["coordinator"]["server_round"],
                    {group_b: worse},
                    dict.fromkeys(b_agents, group_b),
                )
                b_services = [a for a in [*members, late, sensor] if a.agent_id in b_agents]
                kept = {a.agent_id: a.diagnoser.active.version for a in b_services}  # type: ignore[union-attr]
                after_gate = status_of(status_config, capsys)

                # Step 4: faultfleet models rollback returns the cluster to v1
                assert (
                    main(["models", "rollback", "--state-dir", str(state_dir), group_b, "1"]) == 0
                )
                capsys.readouterr()
                restored = rejected_version + 1
                rolled = wait_for_status(
                    status_config, capsys, f"{group_b}'s agents serving v{restored}",
                    lambda d: all(
                        agent_rows(d)[a]["serving_model_version"] == restored for a in b_agents
                    ),
                )  # fmt: skip
                assert main(["models", "list", "--state-dir", str(state_dir), "--json"]) == 0
                listed = json.loads(capsys.readouterr().out)
        finally:
            stop.set()
            coordinator.join(60)

    # Assert step 0: two clusters, one per group, each v1 promoted
    assert campaign(first)["trigger"] == "first_start"
    assert {p["cluster_id"]: p["decision"] for p in first["coordinator"]["recent_promotions"]} == {
        group_a: "promoted",
        group_b: "promoted",
    }
    assert group_a != group_b
    assert {a for a, c in by_agent.items() if c == group_b} == {"m04", "m05", "m06"}

    # Assert step 1: placed on its group's cluster by its own evaluation, in the pass that
    # found it, and served that cluster's serving version
    assert (note.cluster_id, note.basis, note.verified) == (group_b, "evaluation", True)
    assert note.seen_at <= note.placed_at
    assert [s.cluster_id for s in note.scores] == [group_b, group_a]
    assert note.scores[0].loss < note.scores[1].loss
    assert late_model is not None
    assert (late_model.cluster_id, late_model.version) == (group_b, note.model_version)
    row = agent_rows(placed)["m07"]
    assert row["placement"]["cluster_id"] == group_b
    assert row["placement"]["verified"] is True
    assert row["serving_model_version"] == note.model_version
    blind = agent_rows(placed)["m09"]
    assert (blind["can_train"], blind["placement"]["verified"]) == (False, False)
    assert blind["placement"]["basis"] == "most_members"
    assert blind["placement"]["cluster_id"] == group_a  # 3 members each: the first
    assert sorted(p["agent_id"] for p in placed["coordinator"]["placements"]) == ["m07", "m09"]

    # Assert step 2: new labels started c2, in which m07 joined its cluster and trained
    assert campaign(second)["trigger"] == "labels"
    assert "m07" in strategy.client_ids_
    assert strategy.model_key_for("m07") == strategy.model_key_for("m04")
    assert trained > 0
    joined = {p["agent_id"]: p for p in second["coordinator"]["placements"]}["m07"]
    assert joined["joined_round"] == campaign(second)["start_round"] + 1
    assert agent_rows(followed)["m09"]["placement"]["cluster_id"] == group_b  # 4 against 3
    assert agent_rows(followed)["m09"]["placement"]["verified"] is False

    # Assert step 3: the swapped-label candidate was rejected; the agents kept their version
    record = registry.record(group_b, rejected_version)
    assert record.gate.decision == "rejected"
    assert record.gate.candidate_accuracy is not None
    assert record.gate.serving_accuracy is not None
    assert record.gate.candidate_accuracy + 0.02 < record.gate.serving_accuracy
    assert "m07" in record.gate.agents
    assert kept == dict.fromkeys(b_agents, kept_version)
    assert all(agent_rows(after_gate)[a]["serving_model_version"] == kept_version for a in b_agents)

    # Assert step 4: the rollback restores v1's bytes as a new version the agents serve
    assert registry.record(group_b, restored).restores == 1
    assert registry.record(group_b, restored).sha256 == registry.record(group_b, 1).sha256
    assert rolled["coordinator"]["recent_promotions"][-1]["decision"] == "rollback"
    decisions = {v["version"]: v["decision"] for v in listed["clusters"][group_b]["versions"]}
    assert decisions[1] == "promoted"
    assert decisions[rejected_version] == "rejected"
    assert decisions[restored] == "rollback"
