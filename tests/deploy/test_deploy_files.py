"""deploy/: systemd units, example TOMLs, Prometheus and Grafana files agree with the code.

These keep the deployment files honest when the code moves: the units call real CLI
subcommands, the example configs use only the design's keys, the ACL names the topics
``faultfleet.wire.topics`` builds, and every metric the dashboard plots exists.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.metrics.ingest_worker import IngestWorkerMetrics
from coordinator.runtime.ingest_worker_settings import IngestWorkerSettings
from coordinator.runtime.settings import CoordinatorSettings
from edge_agent.metrics import AgentMetrics
from edge_agent.settings import AgentSettings
from faultfleet.wire.settings import DEFAULT_MAX_PAYLOAD_BYTES
from faultfleet.wire.topics import Topics
from faultfleet_apps.brokers.launch import PUBLISH_HEADER_ROOM_BYTES
from faultfleet_apps.cli.main import build_parser
from faultfleet_apps.fleet_status.settings import StatusSettings
from faultfleet_apps.fleet_status.view import FleetView
from tests.faultfleet.scrape import exposed_types, samples

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
UNITS = {
    "coordinator": DEPLOY / "systemd" / "faultfleet-coordinator.service",
    "agent": DEPLOY / "systemd" / "faultfleet-agent@.service",
    "ingest-worker": DEPLOY / "systemd" / "faultfleet-ingest@.service",
}
HARDENING = {
    "User": "faultfleet",
    "Group": "faultfleet",
    "ProtectSystem": "strict",
    "ProtectHome": "true",
    "PrivateTmp": "true",
    "NoNewPrivileges": "true",
    "ProtectKernelTunables": "true",
    "ProtectKernelModules": "true",
    "ProtectControlGroups": "true",
    "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
    "RestrictNamespaces": "true",
    "LockPersonality": "true",
    "CapabilityBoundingSet": "",
    "SystemCallArchitectures": "native",
    "Restart": "on-failure",
    "RestartSec": "5",
    "RestartPreventExitStatus": "2",  # a user error: a restart cannot fix it
    "KillSignal": "SIGTERM",
}


def _settings_keys(model: type[BaseModel]) -> dict[str, set[str]]:
    """Top-level keys ("") and each section's keys, as the settings class defines them."""
    keys: dict[str, set[str]] = {"": set()}
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys[name] = set(annotation.model_fields)
        else:
            keys[""].add(name)
    return keys


SETTINGS_KEYS: dict[str, dict[str, set[str]]] = {
    "coordinator": _settings_keys(CoordinatorSettings),
    "agent": _settings_keys(AgentSettings),
    "ingest": _settings_keys(IngestWorkerSettings),
    "status": _settings_keys(StatusSettings),
}


def read_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Sections -> key -> values (a key may repeat), comments and blank lines dropped."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, separator, value = line.partition("=")
        assert separator, f"{path.name}: {raw!r} is neither a section, a comment nor key=value"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def service(name: str) -> dict[str, str]:
    return {key: values[-1] for key, values in read_unit(UNITS[name])["Service"].items()}


@pytest.mark.parametrize("name", sorted(UNITS))
def test_unit_is_hardened_and_restarts_on_failure(name: str) -> None:
    # Execute
    sections = read_unit(UNITS[name])
    settings = service(name)

    # Assert
    assert set(sections) == {"Unit", "Service", "Install"}
    assert {key: settings.get(key) for key in HARDENING} == HARDENING
    assert "MemoryDenyWriteExecute" not in settings  # breaks PyTorch's JIT and ONNX Runtime
    assert int(settings["TimeoutStopSec"]) > 0
    assert sections["Unit"]["After"] == ["network-online.target mosquitto.service"]
    assert sections["Unit"]["Wants"] == ["network-online.target"]
    assert sections["Install"]["WantedBy"] == ["multi-user.target"]


@pytest.mark.parametrize("name", sorted(UNITS))
def test_unit_writes_only_its_state_directory(name: str) -> None:
    # Execute
    settings = service(name)
    state_dir = "/var/lib/" + settings["StateDirectory"]

    # Assert
    writable = settings["ReadWritePaths"].split()
    assert writable[0] == state_dir
    assert settings["WorkingDirectory"] == state_dir
    # the agent may also write its recordings folder, and only that ("-": if it exists)
    assert writable[1:] == (["-/srv/recordings/%i"] if name == "agent" else [])
    assert settings["EnvironmentFile"].startswith("-/etc/faultfleet/")


@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("coordinator", "/etc/faultfleet/coordinator.toml"),
        ("agent", "/etc/faultfleet/agent-m07.toml"),
        ("ingest-worker", "/etc/faultfleet/ingest.toml"),
    ],
)
def test_unit_runs_the_real_cli_subcommand(name: str, config: str) -> None:
    # Prepare: systemd replaces %i with the instance name, here m07
    argv = shlex.split(service(name)["ExecStart"].replace("%i", "m07"))

    # Execute
    args = build_parser().parse_args(argv[1:])

    # Assert
    assert argv[0] == "/opt/faultfleet/venv/bin/faultfleet"
    assert args.command == name
    assert str(args.config) == config


def test_units_pass_systemd_analyze_when_it_is_installed(tmp_path: Path) -> None:
    """``systemd-analyze verify`` is exact but optional: the key checks above always run.

    It refuses a unit whose executable is missing, so the copies run /bin/true instead.
    """
    analyze = shutil.which("systemd-analyze")
    names = []
    for path in UNITS.values():
        text = path.read_text(encoding="utf-8")
        copy_name = path.name.replace("@.", "@m07.")
        (tmp_path / copy_name).write_text(
            text.replace("/opt/faultfleet/venv/bin/faultfleet", "/bin/true"), encoding="utf-8"
        )
        names.append(copy_name)
    if analyze is None:
        return
    result = subprocess.run(
        [analyze, "verify", "--man=no", *names],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, "")


@pytest.mark.parametrize("name", sorted(SETTINGS_KEYS))
def test_example_config_uses_only_the_settings_keys(name: str) -> None:
    # Execute
    config = tomllib.loads((DEPLOY / "config" / f"{name}.toml").read_text(encoding="utf-8"))

    # Assert
    sections = {key: value for key, value in config.items() if isinstance(value, dict)}
    top = set(config) - set(sections)
    assert top <= SETTINGS_KEYS[name][""]
    assert set(sections) == set(SETTINGS_KEYS[name]) - {""}
    for section, keys in sections.items():
        assert set(keys) <= SETTINGS_KEYS[name][section], section


def test_example_agent_config_matches_its_unit_and_acl() -> None:
    # Execute
    agent = tomllib.loads((DEPLOY / "config" / "agent.toml").read_text(encoding="utf-8"))
    coordinator = tomllib.loads((DEPLOY / "config" / "coordinator.toml").read_text("utf-8"))

    # Assert: username = agent id (the ACL's %u), state_dir = the unit's StateDirectory
    agent_id = agent["agent_id"]
    assert agent["broker"]["username"] == agent_id
    assert agent["state_dir"] == "/var/lib/" + service("agent")["StateDirectory"].replace(
        "%i", agent_id
    )
    assert agent["source"]["path"] == f"/srv/recordings/{agent_id}"
    assert coordinator["state_dir"] == "/var/lib/" + service("coordinator")["StateDirectory"]
    assert coordinator["broker"]["username"] == "coordinator"
    assert (coordinator["metrics"]["port"], agent["metrics"]["port"]) == (9400, 9401)


def test_example_ingest_config_matches_its_unit_and_acl() -> None:
    # Execute
    ingest = tomllib.loads((DEPLOY / "config" / "ingest.toml").read_text(encoding="utf-8"))
    args = build_parser().parse_args(shlex.split(service("ingest-worker")["ExecStart"])[1:])

    # Assert: the ACL's account, the unit's state directory, the instance as worker id
    assert ingest["broker"]["username"] == "ingest"
    assert "user ingest\n" in (DEPLOY / "mosquitto" / "faultfleet.acl").read_text("utf-8")
    assert ingest["state_dir"] == "/var/lib/" + service("ingest-worker")["StateDirectory"]
    assert args.worker_id == "%i"
    assert ingest["metrics"]["port"] == IngestWorkerSettings.model_fields["metrics"].default.port
    assert ingest["metrics"]["port"] == 9402


def test_acl_names_exactly_the_agent_topics_of_the_topic_tree() -> None:
    # Prepare: "AGENT" stands in for mosquitto's %u
    topics = Topics()
    expected = {
        ("readwrite", topics.agent_status("AGENT")),  # read back by --retire
        ("write", topics.results("AGENT")),
        ("write", topics.diagnoses("AGENT")),
        ("write", topics.heartbeat("AGENT")),
        ("read", topics.tasks("AGENT")),
        ("read", topics.assignment("AGENT")),
        ("read", topics.coordinator_status()),
        ("read", f"{topics.root}/clusters/+/model"),
    }
    text = (DEPLOY / "mosquitto" / "faultfleet.acl").read_text(encoding="utf-8")

    # Execute
    patterns = re.findall(r"^pattern (\w+) (\S+)$", text, flags=re.MULTILINE)
    coordinator = re.search(r"^user coordinator\ntopic readwrite (\S+)$", text, flags=re.MULTILINE)

    # Assert
    assert {(access, topic.replace("%u", "AGENT")) for access, topic in patterns} == expected
    assert len(patterns) == len(expected)
    assert coordinator is not None
    assert coordinator.group(1) == f"{topics.root}/#"


def test_acl_gives_the_status_account_the_topics_faultfleet_status_reads_and_no_write() -> None:
    # Prepare
    topics = Topics()
    view = FleetView(topics)
    text = (DEPLOY / "mosquitto" / "faultfleet.acl").read_text(encoding="utf-8")

    # Execute: the "topic" lines of the status account, up to the next account
    block = text.split("\nuser status\n", 1)[1].split("\nuser ", 1)[0]
    rules = re.findall(r"^topic (\w+) (\S+)$", block, flags=re.MULTILINE)

    # Assert
    assert {topic for access, topic in rules if access == "read"} == set(view.routes(live=True))
    assert {topic for access, topic in rules if access == "deny"} == {
        f"{topics.root}/agents/status/#",  # the agent pattern lines apply to every account
        f"{topics.root}/clusters/#",
    }
    assert {access for access, _ in rules} == {"read", "deny"}


def test_broker_limits_let_the_largest_allowed_payload_through() -> None:
    # Prepare
    text = (DEPLOY / "mosquitto" / "faultfleet.conf").read_text(encoding="utf-8")

    # Execute
    options = dict(re.findall(r"^(\w+) (.+)$", text, flags=re.MULTILINE))

    # Assert
    assert int(options["message_size_limit"]) == DEFAULT_MAX_PAYLOAD_BYTES
    assert int(options["max_packet_size"]) >= DEFAULT_MAX_PAYLOAD_BYTES + PUBLISH_HEADER_ROOM_BYTES
    assert options["allow_anonymous"] == "false"
    assert options["password_file"] == "/etc/mosquitto/faultfleet.passwd"
    assert options["acl_file"] == "/etc/mosquitto/faultfleet.acl"
    assert "listener 1883 127.0.0.1" in text


def test_prometheus_scrapes_the_default_metrics_ports() -> None:
    # Execute
    text = (DEPLOY / "prometheus" / "prometheus.yml").read_text(encoding="utf-8")

    # Assert
    assert "\t" not in text
    assert re.search(
        r"job_name: faultfleet-coordinator\n(.*\n){1,4}.*targets: \[\"[^\"]+:9400\"\]", text
    )
    assert re.search(
        r"job_name: faultfleet-agents\n(.*\n){1,6}.*targets: \[\"[^\"]+:9401\"\]", text
    )
    # ingest workers only from files: none by default, so a plant without any alerts nothing
    jobs = {job["job_name"]: job for job in yaml.safe_load(text)["scrape_configs"]}
    assert "static_configs" not in jobs["faultfleet-ingest"]
    assert jobs["faultfleet-ingest"]["file_sd_configs"]
    assert re.search(r"targets: \[\"[^\"]+:9402\"\]", text)


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        (DEPLOY / "grafana" / "faultfleet-dashboard.json").read_text(encoding="utf-8")
    )
    return loaded


def queries(node: Any) -> list[str]:
    """Every PromQL expression and variable query anywhere in the dashboard."""
    if isinstance(node, dict):
        found = [node[k] for k in ("expr", "definition") if isinstance(node.get(k), str)]
        return found + [q for value in node.values() for q in queries(value)]
    if isinstance(node, list):
        return [q for item in node for q in queries(item)]
    return []


def test_dashboard_is_an_importable_grafana_dashboard() -> None:
    # Execute
    board = dashboard()
    panels = [p for p in board["panels"] if p["type"] != "row"]

    # Assert: the data source is a template variable (tests/deploy/test_dashboard.py)
    assert board["schemaVersion"] >= 36
    assert "__inputs" not in board
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    for panel in panels:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        assert all(t["datasource"]["uid"] == "${DS_PROMETHEUS}" for t in panel["targets"])
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]


PROMETHEUS_SERIES = {"up", "ALERTS"}
"""Series Prometheus makes itself (scrape health, alert state) rather than scraping them."""


def test_dashboard_plots_every_metric_and_only_metrics_that_exist() -> None:
    # Prepare: a real scrape of each service's registry (the process collectors included)
    registries = (
        CoordinatorMetrics().registry,
        AgentMetrics(class_names=["a"]).registry,
        IngestWorkerMetrics().registry,
    )
    exposed = {name for registry in registries for name, _ in samples(registry)}
    metrics = {name for registry in registries for name in exposed_types(registry)}

    # Execute
    used = {
        token
        for q in queries(dashboard())
        for token in re.findall(r"\b(?:(?:faultfleet|process|python)_[a-z_]+|up|ALERTS)\b", q)
    }
    own = {name for name in used if name.startswith("faultfleet_")}

    # Assert
    assert used - (exposed | metrics | PROMETHEUS_SERIES) == set()  # cluster series once set
    assert {re.sub(r"_(bucket|sum|count)$", "", name) for name in own} == metrics
    assert {"up", "process_resident_memory_bytes", "process_cpu_seconds_total"} <= used
