"""The fleet demo's configuration, bookkeeping and report (the full run is ``make demo``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coordinator.runtime.settings import CoordinatorSettings
from coordinator.strategies.evidence import ClusterEvidence
from coordinator.strategies.quality import assess
from edge_agent.settings import AgentSettings
from faultfleet.wire.messages import Diagnosis
from faultfleet.wire.settings import load_settings
from faultfleet.wire.signing import SigningKey
from faultfleet_apps.cli.runtime import parse_machines
from faultfleet_apps.demo.fleet import (
    DemoOutcome,
    DemoPlan,
    live_accuracy,
    machine_slices,
    prepare_secrets,
    write_configs,
)
from faultfleet_apps.demo.report import format_outcome, found_labels, true_group, write_report
from faultfleet_apps.fleet_status.settings import StatusSettings


class _Address:
    host = "127.0.0.1"
    port = 18999


def _diagnosis(agent: str, cluster: str, predicted: int, truth: int | None) -> Diagnosis:
    return Diagnosis(
        agent_id=agent,
        window_index=0,
        class_id=predicted,
        class_name=f"label {predicted}",
        probability=0.9,
        model_version=3,
        cluster_id=cluster,
        timestamp=0.0,
        true_label=truth,
    )


def test_demo_configs_load_with_the_services_settings(tmp_path: Path) -> None:
    plan = DemoPlan(out=tmp_path, rounds=7, clients_per_group=2)
    secrets = prepare_secrets(plan)

    coordinator, agents = write_configs(plan, _Address(), secrets)  # type: ignore[arg-type]

    coordinator_settings = load_settings(CoordinatorSettings, coordinator)
    agent_settings = load_settings(AgentSettings, agents)
    assert coordinator_settings.run.rounds == 7
    # One machine of the 12 is held back to join late: the run starts with 11.
    assert plan.machines == 12
    assert coordinator_settings.run.min_agents == 11
    assert coordinator_settings.run.strategy_options == {"n_merge": 3, "n_sep": 5}
    assert coordinator_settings.broker.port == 18999
    assert agent_settings.source.clients_per_group == 2
    assert agent_settings.broker.port == 18999
    assert agent_settings.device == "cpu"
    m07 = agent_settings.broker.for_agent("m07")
    m07_password = secrets.accounts.password_path("m07").read_text().strip()
    assert (m07.username, m07.password()) == ("m07", m07_password)
    assert coordinator_settings.broker.username == "coordinator"
    assert coordinator_settings.broker.password()
    assert agent_settings.signing.trusted_keys == (secrets.public_key,)
    key_file = coordinator_settings.signing.key_file
    assert key_file is not None
    assert SigningKey.load(key_file).key_id == secrets.key_id
    assert len(secrets.accounts.users) == plan.machines + 3
    status_settings = load_settings(StatusSettings, coordinator.parent / "status.toml")
    assert status_settings.broker.username == "status"
    assert status_settings.broker.password() == (
        secrets.accounts.password_path("status").read_text().strip()
    )


def test_demo_agents_can_train_on_a_gpu_when_there_is_one(tmp_path: Path) -> None:
    plan = DemoPlan(out=tmp_path, clients_per_group=1, device="auto")

    _, agents = write_configs(plan, _Address(), prepare_secrets(plan))  # type: ignore[arg-type]

    assert load_settings(AgentSettings, agents).device == "auto"


@pytest.mark.parametrize(
    ("machines", "parts", "expected"),
    [(48, 2, ["0-23", "24-47"]), (5, 2, ["0-2", "3-4"]), (3, 1, ["0-2"])],
)
def test_agent_processes_split_the_machines(machines: int, parts: int, expected: list[str]) -> None:
    assert machine_slices(machines, parts) == expected
    covered = [i for text in expected for i in parse_machines(text)]
    assert covered == list(range(machines))


@pytest.mark.parametrize("text", ["5-3", "a-b", "", "1-2-3"])
def test_bad_machine_ranges_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--machines"):
        parse_machines(text)


def test_live_accuracy_counts_only_windows_with_a_known_label() -> None:
    diagnoses = [
        _diagnosis("m00", "cluster-0", 1, 1),
        _diagnosis("m01", "cluster-0", 2, 1),
        _diagnosis("m01", "cluster-0", 2, None),
        _diagnosis("m02", "cluster-1", 4, 4),
    ]

    accuracy = live_accuracy(diagnoses)

    assert accuracy == {"cluster-0": (0.5, 2), "cluster-1": (1.0, 1)}


def test_report_scores_the_clusters_against_the_hidden_groups(tmp_path: Path) -> None:
    plan = DemoPlan(out=tmp_path, clients_per_group=2, groups=2)
    similarity = np.array([[np.nan, 0.8, 0.1, 0.1], [0.8, np.nan, 0.1, 0.1]] * 2)
    similarity[2:] = [[0.1, 0.1, np.nan, 0.6], [0.1, 0.1, 0.6, np.nan]]
    quality = assess(
        ClusterEvidence(("m00", "m01", "m02", "m03"), (0, 0, 1, 1), similarity, "update cosines")
    )
    outcome = DemoOutcome(
        summary={
            "clusters": {"cluster-0": ["m00", "m01"], "cluster-1": ["m02", "m03"]},
            "accuracy_by_cluster": {"cluster-0": 0.8, "cluster-1": 0.9},
            "accuracy": 0.85,
            "model_version": 3,
            "cluster_quality": quality.to_json(),
        },
        live=[_diagnosis("m00", "cluster-0", 1, 1), _diagnosis("m02", "cluster-1", 5, 4)],
        live_seconds=2.0,
        wall_seconds=10.0,
        broker_kind="mosquitto",
    )

    text = format_outcome(plan, outcome)
    folder = write_report(plan, outcome)

    assert [true_group(plan, a) for a in ("m00", "m01", "m02", "m03")] == [0, 0, 1, 1]
    assert found_labels(outcome) == {"m00": 0, "m01": 0, "m02": 1, "m03": 1}
    assert "clusters found: 2 (truth: 2 groups), adjusted Rand index 1.00" in text
    assert "2 windows in 2.0 s = 1 diagnoses per second" in text
    assert "cluster quality: confidence 1.000, min margin 0.500, 0 borderline" in text
    assert {p.name for p in folder.iterdir()} == {"summary.json", "clusters.png", "accuracy.png"}
    written = json.loads((folder / "summary.json").read_text())
    assert written["clustering"]["confidence"] == 1.0
    assert written["coordinator"]["cluster_quality"]["clusters"][1]["margin"] == pytest.approx(0.5)
