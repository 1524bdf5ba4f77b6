"""A real Prometheus scrapes real metrics endpoints with deploy/'s configuration and rules.

Prometheus runs ``deploy/prometheus/prometheus.yml`` (its targets replaced by two agents'
and a coordinator's endpoints on this machine, scraped every second) and the shipped alert
rules. One agent's endpoint stops, as its process would: the dashboard's *Agents up*
expression then reads 0 for it instead of losing it, while the coordinator's count of
offline agents (*Agents by state*) reads what the coordinator reports.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from coordinator.adapters.metrics import CoordinatorMetrics
from edge_agent.metrics import AgentMetrics
from faultfleet.metrics_http import MetricsServer, serve_metrics
from faultfleet.wire.settings import MetricsSettings
from faultfleet_apps.brokers.launch import free_port

pytestmark = pytest.mark.integration  # starts a Prometheus server

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
LOCALHOST = "127.0.0.1"
TIMEOUT_S = 60.0


def board_expressions(title: str) -> list[str]:
    board = json.loads((DEPLOY / "grafana" / "faultfleet-dashboard.json").read_text("utf-8"))
    (panel,) = [p for p in board["panels"] if p["title"] == title]
    return [target["expr"] for target in panel["targets"]]


def endpoint(registry: Any) -> MetricsServer:
    server = serve_metrics(MetricsSettings(host=LOCALHOST, port=free_port()), registry)
    assert server is not None
    return server


def plant_config(tmp_path: Path, agents: dict[str, int], coordinator_port: int) -> Path:
    """deploy's prometheus.yml, scraping this machine's endpoints every second."""
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text("utf-8"))
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    shutil.copy(DEPLOY / "prometheus" / "faultfleet-rules.yml", tmp_path / "rules.yml")
    config["rule_files"] = [str(tmp_path / "rules.yml")]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    jobs["faultfleet-coordinator"]["static_configs"] = [
        {"targets": [f"{LOCALHOST}:{coordinator_port}"]}
    ]
    agents_job = jobs["faultfleet-agents"]
    agents_job.pop("file_sd_configs")
    agents_job["static_configs"] = [
        {"targets": [f"{LOCALHOST}:{port}"], "labels": {"agent": agent}}
        for agent, port in agents.items()
    ]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.fixture
def start_prometheus(
    prometheus_bin: str, tmp_path: Path
) -> Iterator[Callable[[Path], Callable[[str], dict[str, float]]]]:
    """Start Prometheus on a config; returns a query function (instance or label → value)."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(config: Path) -> Callable[[str], dict[str, float]]:
        port = free_port()
        log = (tmp_path / "prometheus.log").open("wb")
        processes.append(
            subprocess.Popen(
                [
                    prometheus_bin,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'data'}",
                    f"--web.listen-address={LOCALHOST}:{port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )

        def query(expr: str) -> dict[str, float]:
            url = f"http://{LOCALHOST}:{port}/api/v1/query?" + urllib.parse.urlencode(
                {"query": expr}
            )
            with urllib.request.urlopen(url, timeout=5) as response:
                answer = json.load(response)
            assert answer["status"] == "success", answer
            return {
                item["metric"].get("instance", item["metric"].get("state", "")): float(
                    item["value"][1]
                )
                for item in answer["data"]["result"]
            }

        return query

    yield start
    for process in processes:
        process.terminate()
        process.wait(timeout=30)


def until(query: Callable[[str], dict[str, float]], expr: str, expected: dict[str, float]) -> None:
    """Poll ``expr`` until it returns ``expected``; AssertionError with the last answer."""
    deadline = time.monotonic() + TIMEOUT_S
    last: dict[str, float] | str = "no answer"
    while time.monotonic() < deadline:
        try:
            last = query(expr)
        except OSError as error:  # Prometheus still starting
            last = str(error)
        if last == expected:
            return
        time.sleep(0.2)
    raise AssertionError(f"{expr} never read {expected} within {TIMEOUT_S:g} s; last: {last}")


def test_a_stopped_agent_reads_down_on_the_dashboard_and_the_rules_load(
    start_prometheus: Callable[[Path], Callable[[str], dict[str, float]]], tmp_path: Path
) -> None:
    # Prepare: two agents and a coordinator that sees one of three agents offline
    m07, m08 = AgentMetrics(class_names=["a"]), AgentMetrics(class_names=["a"])
    coordinator = CoordinatorMetrics()
    coordinator.set_agents(online=2, registered=3, retired=0)
    servers = {"m07": endpoint(m07.registry), "m08": endpoint(m08.registry)}
    coordinator_server = endpoint(coordinator.registry)
    agents_up, _ = board_expressions("Agents up")
    (by_state,) = board_expressions("Agents by state (broker)")
    try:
        query = start_prometheus(
            plant_config(tmp_path, {a: s.port for a, s in servers.items()}, coordinator_server.port)
        )
        until(query, agents_up, {"m07": 1.0, "m08": 1.0})

        # Execute: m08's process stops
        servers["m08"].stop()

        # Assert: m08 still has a series, reading 0 (DOWN)
        until(query, agents_up, {"m07": 1.0, "m08": 0.0})
        until(query, by_state, {"online": 2.0, "offline": 1.0, "retired": 0.0})
        # the rule saw it too (pending for its first 2 minutes, then firing)
        until(query, 'count(ALERTS{alertname="FaultfleetAgentDown", instance="m08"})', {"": 1.0})
        coordinator_instance = f"{LOCALHOST}:{coordinator_server.port}"
        until(query, "faultfleet_build_info", {coordinator_instance: 1.0, "m07": 1.0})
    finally:
        for server in (*servers.values(), coordinator_server):
            server.stop()
