"""``benchmarks/bench_peers.py`` end to end on a tiny workload, without Flower."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

# It starts the benchmark and its runner processes: seconds on an idle machine, minutes on
# a loaded one.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
FIELDS = {
    "startup_s",
    "round_s",
    "eval_s",
    "final_accuracy",
    "runner",
    "wall_s",
    "peak_rss_mb",
    "seconds_per_round",
}


def test_faultfleet_and_the_bare_loop_run_the_same_workload(tmp_path: Path) -> None:
    # Prepare: 6 clients, 2 rounds of one epoch; Flower asked for through an interpreter
    # that does not exist, so it is left out and said to be
    out = tmp_path / "peers.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_peers.py"), "--rounds", "2"]
    command += ["--repeats", "1", "--clients-per-group", "1", "--windows-per-client", "40", "60"]
    command += ["--epochs", "1", "--json", str(out), "--flower-python", str(tmp_path / "no-python")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    # Execute
    finished = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=600, check=False
    )

    # Assert
    assert finished.returncode == 0, finished.stderr
    document = json.loads(out.read_text())
    assert document["workload"]["rounds"] == 2
    assert len(document["workload"]["clients"]) == 6
    runs = {run["runner"]: run for run in document["runs"]}
    assert set(runs) == {"faultfleet", "bare"}
    assert "no-python does not run" in document["flower"]
    assert "Flower left out" in finished.stdout
    for name in ("faultfleet", "bare"):
        run = runs[name]
        assert set(run) >= FIELDS
        assert len(run["round_s"]) == 2
        assert 0.0 <= run["final_accuracy"] <= 1.0
        assert all(math.isfinite(run[k]) and run[k] >= 0 for k in FIELDS - {"runner", "round_s"})
        assert run["peak_rss_mb"] > 0
    assert set(document["summary"]) >= {"faultfleet", "bare"}
    assert document["ratios"]["faultfleet/bare"] > 0
