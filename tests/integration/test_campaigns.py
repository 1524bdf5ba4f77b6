"""Training campaigns over a real Mosquitto broker: first start, new labels, a command.

Two agents with a plant engineer's recordings folder each (FedAvg, one cluster) train the
first campaign (two rounds) and the coordinator keeps serving. A recording confirmed at
maintenance is then appended to m00's manifest: m00 reports the new labelled windows, which
pass ``[campaigns] min_new_labelled_windows`` and start campaign c2 by themselves, and m00
trains on them in it. Finally ``faultfleet campaign start`` starts c3. ``faultfleet status
--json`` shows each campaign, and every registry version names the campaign that made it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.model_registry import ModelRegistry
from coordinator.runtime.service import CoordinatorService
from coordinator.runtime.settings import CampaignSettings, CoordinatorSettings, ModelsSettings
from edge_agent.labelled_data import labelled_windows
from edge_agent.metrics import AgentMetrics
from edge_agent.service import AgentService
from edge_agent.settings import AgentSettings, LabelsSettings, SourceSettings
from faultfleet.wire.settings import BrokerSettings, MetricsSettings
from faultfleet_apps.cli.agent_run import build_source
from faultfleet_apps.cli.main import main
from signal_pipeline.conditions import Condition
from signal_pipeline.machine import MachineProfile
from signal_pipeline.readers import write_recording
from signal_pipeline.simulator import simulate

from .services import TRUSTED, coordinator_settings, sample_value, wait_until

TIMEOUT_S = 120.0
NEW_WINDOWS = 20
"""``min_new_labelled_windows``: one new recording of 2 s holds 23 windows of 1024 samples."""


def add_recording(folder: Path, machine: str, label: int, seed: int) -> None:
    """A 2 s recording of condition ``label`` in ``folder``, appended to its manifest."""
    rng = np.random.default_rng(seed)
    simulation = simulate(Condition.from_label(label), MachineProfile.nominal(), 2.0, rng)
    name = f"train/{machine}-{seed}.npz"
    write_recording(simulation.to_recording(source="test"), folder / name)
    manifest = folder / "manifest.csv"
    rows = manifest.read_text(encoding="utf-8") if manifest.exists() else "path,machine_id,label\n"
    manifest.write_text(rows + f"{name},{machine},{label}\n", encoding="utf-8")


def agent(
    broker: BrokerSettings, tmp_path: Path, machine: str, labels: tuple[int, ...]
) -> AgentService:
    folder = tmp_path / "recordings" / machine
    for seed, label in enumerate(labels):
        add_recording(folder, machine, label, seed)
    settings = AgentSettings(
        agent_id=machine,
        device="cpu",
        state_dir=tmp_path / "agents" / machine,
        broker=broker,
        metrics=MetricsSettings(port=0),
        source=SourceSettings(kind="recordings", path=folder, poll_s=0.2),
        labels=LabelsSettings(rescan_s=0.2, keep_windows_bytes=0),
        signing=TRUSTED,
    )
    source = build_source(settings.source, settings.diagnosis.interval_s, ())
    return AgentService(settings, source, metrics=AgentMetrics(class_names=source.class_names))


@pytest.fixture
def fleet(
    broker_settings: BrokerSettings, tmp_path: Path
) -> Iterator[tuple[CoordinatorService, list[AgentService]]]:
    """A serving coordinator (campaigns of 2, then 1 round) and two recordings agents."""
    base = coordinator_settings(broker_settings, tmp_path / "coordinator", rounds=2)
    settings = CoordinatorSettings(
        **{
            **dict(base),
            "campaigns": CampaignSettings(min_new_labelled_windows=NEW_WINDOWS, rounds=1),
            "models": ModelsSettings(request_poll_s=0.2),
        }
    )
    service = CoordinatorService(settings, CoordinatorMetrics())
    agents = [
        agent(broker_settings, tmp_path, "m00", (0, 8)),
        agent(broker_settings, tmp_path, "m01", (0, 8)),
    ]
    stop = threading.Event()
    threads = [threading.Thread(target=a.run, args=(stop,), name=a.agent_id) for a in agents]
    threads.append(threading.Thread(target=service.run, args=(stop,), name="coordinator"))
    for thread in threads:
        thread.start()
    try:
        yield service, agents
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)


@pytest.fixture
def status_config(broker_settings: BrokerSettings, tmp_path: Path) -> Path:
    path = tmp_path / "status.toml"
    path.write_text(
        f'[broker]\nhost = "{broker_settings.host}"\nport = {broker_settings.port}\n',
        encoding="utf-8",
    )
    return path


def campaign_of(config: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """The coordinator's campaign as ``faultfleet status --json`` shows it ({} before one)."""
    assert main(["status", "--config", str(config), "--json", "--timeout", "30"]) == 0
    document = json.loads(capsys.readouterr().out)
    coordinator = document["coordinator"] or {}
    return coordinator.get("campaign") or {}


def wait_for_campaign(
    config: Path, capsys: pytest.CaptureFixture[str], campaign_id: str, status: str
) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def reached() -> bool:
        seen.update(campaign_of(config, capsys))
        return (seen.get("campaign_id"), seen.get("status")) == (campaign_id, status)

    wait_until(reached, TIMEOUT_S, f"campaign {campaign_id} {status} in faultfleet status")
    return seen


def campaigns_in_registry(state_dir: Path) -> set[str | None]:
    registry = ModelRegistry(state_dir / "models")
    return {
        registry.record(cluster, version).campaign_id
        for cluster in registry.clusters()
        for version in registry.versions(cluster)
    }


@pytest.mark.timeout(300)
def test_first_start_then_new_labels_then_a_command_each_run_a_campaign(
    fleet: tuple[CoordinatorService, list[AgentService]],
    status_config: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    service, agents = fleet
    state_dir = service.state_dir

    # Assert: the first campaign runs run.rounds and ends; its versions carry c1
    first = wait_for_campaign(status_config, capsys, "c1", "done")
    assert (first["trigger"], first["rounds_done"], first["end_round"]) == ("first_start", 2, 2)
    assert first["min_new_labelled_windows"] == NEW_WINDOWS
    assert campaigns_in_registry(state_dir) == {"c1"}
    before = labelled_windows(agents[0].labelled.active)

    # Execute: a new labelled recording appended to m00's manifest
    add_recording(agents[0].source.path, "m00", 3, seed=7)  # type: ignore[attr-defined]

    # Assert: it starts c2 by itself (labels), m00 trains on it, c2's versions carry c2
    second = wait_for_campaign(status_config, capsys, "c2", "done")
    assert (second["trigger"], second["start_round"], second["end_round"]) == ("labels", 2, 3)
    assert labelled_windows(agents[0].labelled.active) >= before + NEW_WINDOWS
    assert campaigns_in_registry(state_dir) == {"c1", "c2"}

    # Execute: an operator asks for a campaign
    assert main(["campaign", "start", "--state-dir", str(state_dir)]) == 0
    assert "campaign start requested" in capsys.readouterr().out

    # Assert
    third = wait_for_campaign(status_config, capsys, "c3", "done")
    assert (third["trigger"], third["start_round"], third["end_round"]) == ("command", 3, 4)
    assert campaigns_in_registry(state_dir) == {"c1", "c2", "c3"}
    assert main(["campaign", "status", "--state-dir", str(state_dir), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [c["trigger"] for c in listed["campaigns"]] == ["first_start", "labels", "command"]
    registry = service.metrics.registry
    for trigger in ("first_start", "labels", "command"):
        assert sample_value(registry, "faultfleet_campaigns_total", {"trigger": trigger}) == 1
    assert sample_value(registry, "faultfleet_campaign_state", {"state": "idle"}) == 1
