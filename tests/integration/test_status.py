"""``faultfleet status --json`` over a real Mosquitto broker while a fleet runs.

A coordinator trains three simulated machines (FedAvg, a first campaign of one round) and
keeps serving; the agents diagnose with the published model and send a heartbeat every
0.2 s. The status command shows the campaign, its promotion, and the three agents online
with their cluster, model and last diagnosis; m02 is then
stopped (offline, stopped, last seen) and retired (retired). The coordinator's
``faultfleet_agents_by_state`` follows: the per-state counts the dashboard plots.
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.runtime.service import CoordinatorService
from edge_agent.metrics import AgentMetrics
from edge_agent.retire import retire_agent
from edge_agent.service import AgentService
from edge_agent.settings import AgentSettings, DiagnosisSettings, SourceSettings
from faultfleet.wire.settings import BrokerSettings, MetricsSettings
from faultfleet_apps.cli.agent_run import build_source
from faultfleet_apps.cli.main import main
from signal_pipeline.scenarios import MIXED_FAULT_CLASS_NAMES

from .services import TRUSTED, coordinator_settings, kill, sample_value, start_cli, wait_until

TIMEOUT_S = 240.0


@dataclass
class RunningAgent:
    service: AgentService
    stop: threading.Event
    thread: threading.Thread

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


def start_agent(broker: BrokerSettings, state_dir: Path, index: int) -> RunningAgent:
    """Simulated machine ``index`` as agent ``m0<index>``, heartbeats every 0.2 s."""
    settings = AgentSettings(
        agent_id=f"m{index:02d}",
        device="cpu",
        state_dir=state_dir / f"m{index:02d}",
        broker=broker,
        metrics=MetricsSettings(port=0),
        source=SourceSettings(
            machine_index=index, clients_per_group=4, windows_per_client=(40, 60)
        ),
        diagnosis=DiagnosisSettings(interval_s=0.05, heartbeat_s=0.2),
        signing=TRUSTED,
    )
    source = build_source(settings.source, settings.diagnosis.interval_s, ())
    service = AgentService(settings, source, metrics=AgentMetrics(class_names=source.class_names))
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), name=settings.agent_id)
    thread.start()
    return RunningAgent(service, stop, thread)


@pytest.fixture
def status_config(broker_settings: BrokerSettings, tmp_path: Path) -> Path:
    path = tmp_path / "status.toml"
    path.write_text(
        f'[broker]\nhost = "{broker_settings.host}"\nport = {broker_settings.port}\n',
        encoding="utf-8",
    )
    return path


def fleet_status(config: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """What ``faultfleet status --config CONFIG --json`` prints, parsed."""
    assert main(["status", "--config", str(config), "--json", "--timeout", "30"]) == 0
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


def agents(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["agent_id"]: row for row in document["agents"]}


def by_state(metrics: CoordinatorMetrics) -> dict[str, float]:
    return {
        state: sample_value(metrics.registry, "faultfleet_agents_by_state", {"state": state})
        for state in ("online", "offline", "retired")
    }


@pytest.fixture
def fleet(
    broker_settings: BrokerSettings, tmp_path: Path
) -> Iterator[tuple[CoordinatorMetrics, list[RunningAgent]]]:
    """A serving coordinator (one FedAvg round, then it serves) and three agents."""
    metrics = CoordinatorMetrics()
    settings = coordinator_settings(
        broker_settings, tmp_path / "coordinator", rounds=1, min_agents=3
    )
    service = CoordinatorService(settings, metrics)
    stop = threading.Event()
    coordinator = threading.Thread(target=service.run, args=(stop,), name="coordinator")
    running = [start_agent(broker_settings, tmp_path / "agents", index) for index in range(3)]
    coordinator.start()
    try:
        yield metrics, running
    finally:
        stop.set()
        coordinator.join(60)
        for agent in running:
            agent.close()


@pytest.mark.timeout(600)
def test_status_shows_agents_online_then_a_stopped_one_offline_then_retired(
    fleet: tuple[CoordinatorMetrics, list[RunningAgent]],
    status_config: Path,
    broker_settings: BrokerSettings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Prepare: wait until every agent diagnoses with the trained model and said so
    metrics, running = fleet
    seen: dict[str, Any] = {}

    def all_diagnosing() -> bool:
        seen.update(fleet_status(status_config, capsys))
        rows = agents(seen).values()
        return len(rows) == 3 and all(r["last_diagnosis"] is not None for r in rows)

    wait_until(all_diagnosing, TIMEOUT_S, "three agents diagnosing in faultfleet status")

    # Assert: online, with what they serve and what they diagnosed
    rows = agents(seen)
    assert seen["counts"] == {"online": 3, "offline": 0, "retired": 0, "unknown": 0}
    assert seen["coordinator"]["state"] == "online"
    assert seen["coordinator"]["strategy"] == "fedavg"
    campaign = seen["coordinator"]["campaign"]
    assert (campaign["campaign_id"], campaign["trigger"], campaign["status"]) == (
        "c1",
        "first_start",
        "done",
    )
    assert (campaign["rounds_done"], campaign["end_round"]) == (1, 1)
    promotions = seen["coordinator"]["recent_promotions"]
    assert [(p["version"], p["decision"], p["campaign_id"]) for p in promotions] == [
        (1, "promoted", "c1")
    ]
    for row in rows.values():
        assert row["state"] == "online"
        assert row["cluster_id"] is not None
        assert row["serving_model_version"] is not None
        assert row["last_diagnosis"]["class_name"] in MIXED_FAULT_CLASS_NAMES
        assert 0.0 <= row["last_diagnosis"]["probability"] <= 1.0
        assert row["last_seen"] >= row["last_diagnosis"]["timestamp"]
    wait_until(lambda: by_state(metrics)["online"] == 3, 30, "coordinator: 3 online")

    # Execute: stop m02 as `systemctl stop` would
    heard_last = rows["m02"]["last_seen"]
    running[2].close()
    wait_until(
        lambda: agents(fleet_status(status_config, capsys))["m02"]["state"] == "offline",
        60,
        "m02 offline in faultfleet status",
    )
    stopped = fleet_status(status_config, capsys)

    # Assert
    m02 = agents(stopped)["m02"]
    assert m02["offline_cause"] == "stopped"
    assert m02["last_seen"] >= heard_last
    assert m02["last_diagnosis"] is not None  # kept from its last heartbeat
    assert stopped["counts"] == {"online": 2, "offline": 1, "retired": 0, "unknown": 0}
    wait_until(
        lambda: by_state(metrics) == {"online": 2.0, "offline": 1.0, "retired": 0.0},
        30,
        "coordinator: 1 offline",
    )

    # Execute: retire it
    retire_agent(running[2].service.settings)
    wait_until(
        lambda: agents(fleet_status(status_config, capsys))["m02"]["state"] == "retired",
        60,
        "m02 retired in faultfleet status",
    )
    retired = fleet_status(status_config, capsys)

    # Assert
    assert retired["counts"] == {"online": 2, "offline": 0, "retired": 1, "unknown": 0}
    # last seen: its last heartbeat (the retirement is not a sign of the agent's life)
    assert heard_last <= agents(retired)["m02"]["last_seen"] <= m02["last_seen"]
    wait_until(
        lambda: by_state(metrics) == {"online": 2.0, "offline": 0.0, "retired": 1.0},
        30,
        "coordinator: 1 retired",
    )
    assert broker_settings.username is None  # the anonymous test broker; ACL: test_mosquitto


def test_watch_refreshes_until_ctrl_c_and_exits_0(status_config: Path, tmp_path: Path) -> None:
    # Prepare
    log = tmp_path / "status.log"
    process = start_cli(["status", "--config", str(status_config), "--watch", "0.2", "--json"], log)
    try:

        def documents() -> list[dict[str, Any]]:
            lines = log.read_text(encoding="utf-8").splitlines()
            return [json.loads(line) for line in lines if line.startswith("{")]

        wait_until(lambda: len(documents()) >= 2, 120, "two refreshes of faultfleet status")

        # Execute
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=60)
    finally:
        kill(process)

    # Assert
    assert code == 0
    assert "Traceback" not in log.read_text(encoding="utf-8")
    assert all(d["agents"] == [] and d["coordinator"] is None for d in documents())
