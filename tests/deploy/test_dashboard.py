"""The Grafana dashboard: works when provisioned from a file, declares what it needs, and its
fleet-health panels show what the alert rules fire on (a stopped agent, a fault streak).

The agents-up and agents-by-state expressions are evaluated by Prometheus's own engine
(``promtool test rules`` with a ``promql_expr_test``) on the series a stopped agent leaves;
tests/deploy/test_prometheus_scrape.py does it again with a real Prometheus scraping real
metrics endpoints.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
BOARD = DEPLOY / "grafana" / "faultfleet-dashboard.json"
GRAFANA_BUILT_INS = {"__rate_interval", "__interval", "__range", "__all"}
MIN_GRAFANA_FOR_SCHEMA = {36: (9, 0, 0)}
"""The first Grafana release that writes a dashboard schema version (Grafana migrates older
schemas forward, never back): ``__requires`` may not name an older one."""


def board() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(BOARD.read_text(encoding="utf-8"))
    return loaded


def panel(title: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [p for p in board()["panels"] if p["title"] == title]
    assert len(found) == 1, title
    return found[0]


def expressions(title: str) -> list[str]:
    return [target["expr"] for target in panel(title)["targets"]]


def test_every_variable_the_panels_use_is_defined_so_a_provisioned_file_works() -> None:
    # Prepare
    text = BOARD.read_text(encoding="utf-8")
    variables = {v["name"]: v for v in board()["templating"]["list"]}

    # Execute
    used = set(re.findall(r"\$\{(\w+)\}", text)) | set(re.findall(r"\$(\w+)", text))

    # Assert: no import-time placeholder is left for a provisioned file to trip on
    assert "__inputs" not in board()
    assert used - GRAFANA_BUILT_INS <= set(variables)
    source = variables["DS_PROMETHEUS"]
    assert (source["type"], source["query"]) == ("datasource", "prometheus")
    assert next(iter(variables)) == "DS_PROMETHEUS"  # defined before the variables that use it


def test_requires_names_the_panel_types_used_and_a_grafana_that_knows_the_schema() -> None:
    # Prepare
    dashboard = board()
    requires = {(r["type"], r["id"]): r for r in dashboard["__requires"]}

    # Execute
    panel_types = {p["type"] for p in dashboard["panels"] if p["type"] != "row"}
    grafana = tuple(int(part) for part in requires[("grafana", "grafana")]["version"].split("."))

    # Assert
    assert {pid for kind, pid in requires if kind == "panel"} == panel_types
    assert ("datasource", "prometheus") in requires
    assert dashboard["schemaVersion"] in MIN_GRAFANA_FOR_SCHEMA
    assert grafana >= MIN_GRAFANA_FOR_SCHEMA[dashboard["schemaVersion"]]


def test_panel_ids_and_places_do_not_collide() -> None:
    # Prepare
    panels = board()["panels"]
    cells: dict[tuple[int, int], str] = {}

    # Execute / Assert
    assert len({p["id"] for p in panels}) == len(panels)
    for p in panels:
        grid = p["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]


def test_the_fault_alarm_panel_turns_red_where_the_rule_fires() -> None:
    # Prepare
    rules = yaml.safe_load((DEPLOY / "prometheus" / "faultfleet-rules.yml").read_text("utf-8"))
    (rule,) = [
        r
        for g in rules["groups"]
        for r in g["rules"]
        if r.get("alert") == "FaultfleetFaultDiagnosed"
    ]
    alarm = panel("Fault alarms: current streak (windows in a row)")

    # Execute
    windows = int(re.search(r">=\s*(\d+)", rule["expr"]).group(1))  # type: ignore[union-attr]
    steps = alarm["fieldConfig"]["defaults"]["thresholds"]["steps"]

    # Assert
    assert [step["color"] for step in steps] == ["green", "red"]
    assert steps[1]["value"] == windows
    assert "faultfleet_diagnosis_streak_windows" in alarm["targets"][0]["expr"]


def test_the_agents_up_panel_reports_a_stopped_agent_as_down(promtool: str, tmp_path: Path) -> None:
    """Prometheus's engine on the series a stopped agent leaves: m07 stops after 2 minutes.

    ``up`` goes to 0 for m07 (Prometheus still scrapes it), so the panel's expression keeps
    a series for m07 that reads 0 (DOWN) instead of losing it; and the coordinator's count
    of offline agents, which the next panel plots, reads 1.
    """
    # Prepare
    agents_up, coordinator_up = expressions("Agents up")
    (by_state,) = expressions("Agents by state (broker)")
    coordinator = 'job="faultfleet-coordinator", instance="coordinator:9400"'
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": 'up{job="faultfleet-agents", instance="m07"}', "values": "1 1 0 0"},
                    {"series": 'up{job="faultfleet-agents", instance="m08"}', "values": "1 1 1 1"},
                    {"series": f"up{{{coordinator}}}", "values": "1 1 1 1"},
                    *(
                        {
                            "series": f'faultfleet_agents_by_state{{{coordinator}, state="{s}"}}',
                            "values": values,
                        }
                        for s, values in (
                            ("online", "2 2 1 1"),
                            ("offline", "0 0 1 1"),
                            ("retired", "0 0 0 0"),
                        )
                    ),
                ],
                "promql_expr_test": [
                    {
                        "expr": agents_up,
                        "eval_time": "3m",
                        "exp_samples": [
                            {"labels": 'up{job="faultfleet-agents", instance="m07"}', "value": 0},
                            {"labels": 'up{job="faultfleet-agents", instance="m08"}', "value": 1},
                        ],
                    },
                    {
                        "expr": coordinator_up,
                        "eval_time": "3m",
                        "exp_samples": [{"labels": f"up{{{coordinator}}}", "value": 1}],
                    },
                    {
                        "expr": by_state,
                        "eval_time": "3m",
                        "exp_samples": [
                            {"labels": '{state="online"}', "value": 1},
                            {"labels": '{state="offline"}', "value": 1},
                            {"labels": '{state="retired"}', "value": 0},
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "panels.test.yml").write_text(yaml.safe_dump(tests), encoding="utf-8")

    # Execute
    result = subprocess.run(
        [promtool, "test", "rules", "panels.test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    # Assert
    assert result.returncode == 0, result.stdout + result.stderr
