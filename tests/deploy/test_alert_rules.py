"""deploy/prometheus/faultfleet-rules.yml: promtool checks it and runs its unit tests.

``promtool`` (Debian package ``prometheus``, in deploy/debian-packages.txt; the
``promtool`` fixture of conftest.py) is required under ``CI=true``; elsewhere these tests
skip saying how to install it. The rules' unit tests live in
``tests/deploy/promtool/faultfleet-rules.test.yml``; the checks below keep that file and the
rules in step (every alert fires in some test and stays quiet in another) and keep the
rules on metrics the services really export.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.metrics.ingest_worker import IngestWorkerMetrics
from edge_agent.metrics import AgentMetrics
from tests.faultfleet.scrape import all_types

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = DEPLOY / "faultfleet-rules.yml"
RULE_TESTS = Path(__file__).resolve().parent / "promtool" / "faultfleet-rules.test.yml"
PROMETHEUS_BUILT_INS = {"up"}
"""Series Prometheus makes itself rather than scraping them."""
SEVERITIES = {"info", "warning", "critical"}


def run(command: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return loaded


def alerts() -> dict[str, dict[str, Any]]:
    """Every alerting rule by name."""
    return {
        rule["alert"]: rule
        for group in load(RULES)["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }


def test_promtool_checks_the_rules(promtool: str) -> None:
    # Execute
    result = run([promtool, "check", "rules", str(RULES)])

    # Assert
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in result.stdout


def test_the_rules_pass_their_unit_tests(promtool: str) -> None:
    # Execute: rule_files in the test file are relative to it
    result = run([promtool, "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent)

    # Assert
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_prometheus_config_with_the_rules_passes_promtool(promtool: str, tmp_path: Path) -> None:
    # Prepare: the rule file where prometheus.yml expects it, here in tmp_path
    config = (DEPLOY / "prometheus.yml").read_text(encoding="utf-8")
    assert "/etc/prometheus/faultfleet-rules.yml" in config
    shutil.copy(RULES, tmp_path / RULES.name)
    (tmp_path / "prometheus.yml").write_text(
        config.replace("/etc/prometheus/faultfleet-rules.yml", str(tmp_path / RULES.name)),
        encoding="utf-8",
    )

    # Execute
    result = run([promtool, "check", "config", str(tmp_path / "prometheus.yml")])

    # Assert
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 1 rule files found" in result.stdout


def test_every_alert_is_tested_firing_and_quiet() -> None:
    # Prepare
    fired: set[str] = set()
    quiet: set[str] = set()
    tests = load(RULE_TESTS)

    # Execute
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            (fired if check["exp_alerts"] else quiet).add(check["alertname"])

    # Assert
    assert tests["rule_files"] == ["../../../deploy/prometheus/faultfleet-rules.yml"]
    assert fired == set(alerts())
    assert quiet == set(alerts())


def test_the_rules_watch_only_metrics_the_services_export() -> None:
    # Prepare: the families a real scrape of each service's registry holds
    exported = (
        set(all_types(CoordinatorMetrics().registry))
        | set(all_types(AgentMetrics(class_names=["a"]).registry))
        | set(all_types(IngestWorkerMetrics().registry))
    )

    # Execute
    used = {
        name
        for rule in alerts().values()
        for name in re.findall(r"\b(faultfleet_[a-z_]+|up)\b", rule["expr"])
    }

    # Assert
    assert used - PROMETHEUS_BUILT_INS <= exported
    assert {
        "faultfleet_agents_by_state",
        "faultfleet_broker_connected",
        "faultfleet_windows_processed_total",
        "faultfleet_diagnosis_streak_windows",
        "faultfleet_models_rejected_total",
        "faultfleet_rounds_without_quorum_total",
        "faultfleet_promotions_total",
        "up",
    } <= used


def test_every_alert_has_a_known_severity_a_summary_and_the_scraped_jobs() -> None:
    # Prepare
    config = load(DEPLOY / "prometheus.yml")
    jobs = {job["job_name"] for job in config["scrape_configs"]}

    # Execute
    named_jobs = {
        job for rule in alerts().values() for job in re.findall(r'job="([^"]+)"', rule["expr"])
    }

    # Assert
    assert named_jobs <= jobs
    assert config["rule_files"] == ["/etc/prometheus/faultfleet-rules.yml"]
    for name, rule in alerts().items():
        assert name.startswith("Faultfleet"), name
        assert rule["labels"]["severity"] in SEVERITIES, name
        assert rule["annotations"]["summary"], name
        assert rule["annotations"]["description"], name
