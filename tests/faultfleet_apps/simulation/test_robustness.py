"""Robustness runs: fleets, method tags, resumable runs, rows and per-fleet summaries."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from faultfleet.errors import UsageError
from faultfleet_apps.simulation import robustness
from faultfleet_apps.simulation.robustness import (
    FLEET_PRESETS,
    RunRow,
    Task,
    fleet_from_groups,
    fleet_named,
    fleet_summary,
    method,
    run_grid,
    run_row,
)
from signal_pipeline.label_groups import class_labels, parse_label_groups

ROOT = Path(__file__).resolve().parents[3]
TINY = (("rounds", 2), ("windows_per_client", (30, 40)))


def test_the_presets_are_the_fleets_the_benchmark_promises() -> None:
    fleets = {name: parse_label_groups(text) for name, text in FLEET_PRESETS.items()}

    assert len(fleets["three-groups"]) == 3
    assert len(fleets["twelve-groups"]) == 12
    sizes = [group.machines for group in fleets["unequal-sizes"]]
    assert (min(sizes), max(sizes)) == (2, 16)
    shared = fleets["shared-label"]
    pairs = [(a, b) for a in shared for b in shared if a != b and set(a.labels) & set(b.labels)]
    assert len(pairs) == 2  # one pair of groups, both ways
    assert len(class_labels(shared)) == 11


def test_fleets_by_name_by_scenario_and_by_groups_text() -> None:
    assert fleet_named("shared-label").scenario == "label-groups"
    assert fleet_named("mixed-fault").groups == ()
    custom = fleet_from_groups("0,1*2; 2,3*2")
    assert custom == fleet_from_groups("0,1*2;2,3*2")  # one folder for one fleet
    assert custom.name.startswith("groups-")
    with pytest.raises(UsageError, match="unknown fleet 'label-groups'"):
        fleet_named("label-groups")


def test_method_tags_name_their_options_in_key_order() -> None:
    assert method("flacc").tag == "flacc"
    chosen = method("flacc", {"rule": "paper", "alpha0": 0.1})
    assert chosen.tag == "flacc+alpha0=0.1+rule=paper"
    assert chosen.options == {"rule": "paper", "alpha0": 0.1}
    assert method("ifca-6").options == {"n_clusters": 6}


def test_a_tiny_grid_runs_then_reads_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: flacc and fedavg on two groups of two machines, 2 rounds, one seed
    fleet = fleet_from_groups("0,1*2;12,19*2")
    task = Task(fleet, 3, (method("flacc"), method("fedavg")), tmp_path, "quick", TINY)

    # Execute
    first = run_grid([task], jobs=1)
    monkeypatch.setattr(robustness, "build_federation", _must_not_run)
    monkeypatch.setattr("faultfleet_apps.simulation.table.run_simulation", _must_not_run)
    again = run_grid([task], jobs=1)

    # Assert: one row per method, from the results.json each run wrote
    assert [(r.method, r.seed, r.groups) for r in first] == [("flacc", 3, 2), ("fedavg", 3, 2)]
    path = tmp_path / fleet.name / "flacc" / "seed3" / "results.json"
    written = json.loads(path.read_text())
    assert written["config"]["groups"] == "0,1*2;12,19*2"
    assert first[0] == run_row(fleet.name, "flacc", written)
    assert not any(r.reused for r in first)
    assert all(r.reused for r in again)
    assert [(r.ari, r.accuracy) for r in again] == [(r.ari, r.accuracy) for r in first]


def _must_not_run(*args: object, **kwargs: object) -> None:
    raise AssertionError("a finished run was run again")


def row(seed: int, tag: str, ari: float, accuracy: float, wrong: tuple[int, ...] = ()) -> RunRow:
    return RunRow("fleet", tag, seed, 3, 3, ari, accuracy, 10.0, 0.5, 2, wrong, ())


def test_the_fleet_summary_counts_failures_and_compares_accuracy() -> None:
    rows = [
        row(100, "flacc", 1.0, 0.90),
        row(101, "flacc", 0.8, 0.70, wrong=(12,)),
        row(100, "local", 0.0, 0.85),
        row(101, "local", 0.0, 0.75),
        row(100, "fedavg", 0.0, 0.30),
        row(101, "fedavg", 0.0, 0.40),
    ]

    summary = fleet_summary(rows, "flacc", ["local", "fedavg"])

    assert (summary["runs"], summary["failures"], summary["failure_rate"]) == (2, 1, 0.5)
    assert summary["runs_with_wrong_merge"] == 1
    assert summary["mean_accuracy"] == pytest.approx(0.80)
    assert summary["compare"]["local"] == {
        "runs": 2,
        "mean_accuracy": pytest.approx(0.80),
        "beaten": False,  # 0.80 is not above 0.80
        "seed_wins": 1,
    }
    assert summary["compare"]["fedavg"]["beaten"] is True
    assert summary["compare"]["fedavg"]["seed_wins"] == 2


def load_benchmark() -> Any:
    spec = importlib.util.spec_from_file_location(
        "robustness_benchmark", ROOT / "benchmarks" / "robustness.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_prints_its_tables_and_writes_its_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Execute: one round, one seed, one fleet of two machines, fedavg beside flacc
    argv = ["--out", str(tmp_path), "--seeds", "4", "--groups", "0,1*1;2,3*1", "--rounds", "1"]
    load_benchmark().main([*argv, "--compare", "fedavg", "--jobs", "1"])

    # Assert
    printed = capsys.readouterr()
    assert "| fleet | method | seed | clusters (true) |" in printed.out
    assert "seeds 4 (tuning seeds (0-99))" in printed.out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["seeds"] == [4]
    assert [r["method"] for r in summary["runs"]] == ["flacc", "fedavg"]
    lines = (tmp_path / "runs.csv").read_text().splitlines()
    assert lines[0].startswith("fleet,method,seed,groups,clusters,ari,accuracy")
    assert len(lines) == 3
    assert "seed 4 flacc: " in printed.err
