"""``benchmarks/bench_all.py``: each benchmark's JSON turned into rows of one markdown table,
checked on hand-made documents, and the whole path on the windowing benchmark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_all  # noqa: E402


def test_ingest_rows_compare_our_receiver_with_the_raw_one_of_the_same_model() -> None:
    document = {
        "rows": [
            {
                "model": "compact",
                "receiver": "mosquitto_sub",
                "journal": "-",
                "updates_per_s": 400.0,
            },
            {"model": "compact", "receiver": "paho, no-op", "journal": "-", "updates_per_s": 390.0},
            {
                "model": "compact",
                "receiver": "MqttFleet.fit",
                "journal": "disk",
                "updates_per_s": 300.0,
            },
        ]
    }

    rows = bench_all.ingest_rows(document)

    assert rows == [
        ("ingest", "compact updates/s, journal disk (vs mosquitto_sub)", 300.0, 400.0, "higher")
    ]


def test_the_worker_rows_give_each_count_against_one_worker() -> None:
    document = {
        "rows": [
            {"workers": 0, "updates_per_s": 500.0},
            {"workers": 1, "updates_per_s": 200.0},
            {"workers": 2, "updates_per_s": 340.0},
        ]
    }

    rows = bench_all.ingest_workers_rows(document)
    table = bench_all.table(rows, {"peers": "exit status 1"})

    assert (
        "| ingest_workers | 2 workers updates/s (vs 1 worker) | 340 | 200 | 1.70 | higher |"
        in table
    )
    assert (
        "| ingest_workers | 1 worker updates/s (vs mosquitto_sub) | 200 | 500 | 0.40 | higher |"
        in table
    )
    assert "| peers | failed: exit status 1 | | | | |" in table


def test_the_compile_row_gives_the_compiled_step_against_the_eager_one() -> None:
    document = {
        "model": "compact",
        "device": "cpu",
        "eager_ms_per_step": 12.0,
        "compiled_ms_per_step": 18.0,
    }

    rows = bench_all.compile_rows(document)
    table = bench_all.table(rows, {})

    assert (
        "| compile | compact ms per training step on cpu, torch.compile (vs eager) | 18 | 12 "
        "| 1.50 | lower |" in table
    )


@pytest.mark.integration
def test_the_windowing_benchmark_ends_in_the_table(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_all.py"),
            "--out",
            str(tmp_path),
            "--only",
            "windowing",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    table = (tmp_path / "bench.md").read_text()
    assert table.startswith("| benchmark | measure | ours | baseline | ratio | better |")
    assert "| windowing | windows/s, L=" in table


def test_the_status_rows_give_each_pass_at_the_largest_fleet_against_the_smallest() -> None:
    document = {
        "rows": [
            {"agents": n, "pass": name, "us_per_status": us}
            for n, name, us in [
                (1000, "first online", 20.0),
                (1000, "offline", 18.0),
                (10000, "first online", 30.0),
                (10000, "offline", 18.0),
            ]
        ]
    }

    rows = bench_all.fleet_statuses_rows(document)
    table = bench_all.table(rows, {})

    assert rows == [
        (
            "fleet_statuses",
            "us per agent status at 10000 agents, first online (vs 1000 agents)",
            30.0,
            20.0,
            "lower",
        ),
        (
            "fleet_statuses",
            "us per agent status at 10000 agents, offline (vs 1000 agents)",
            18.0,
            18.0,
            "lower",
        ),
    ]
    assert "| 30 | 20 | 1.50 | lower |" in table


def test_one_fleet_size_gives_no_status_rows() -> None:
    document = {"rows": [{"agents": 1000, "pass": "offline", "us_per_status": 18.0}]}

    assert bench_all.fleet_statuses_rows(document) == []


def test_the_dispatch_rows_give_the_bounded_backlog_against_the_unbounded_one() -> None:
    document = {
        "rows": [
            {
                "variant": "bounded",
                "model": "paper",
                "tasks": 48,
                "seconds": 1.2,
                "peak_rss_mb": 480.0,
            },
            {
                "variant": "unbounded",
                "model": "paper",
                "tasks": 48,
                "seconds": 1.6,
                "peak_rss_mb": 1600.0,
            },
        ]
    }

    table = bench_all.table(bench_all.dispatch_rows(document), {})

    assert (
        "| dispatch | peak RSS MB dispatching 48 paper fit tasks (vs no backlog bound) | 480 "
        "| 1600 | 0.30 | lower |" in table
    )
    assert (
        "| dispatch | s to dispatch 48 paper fit tasks (vs no backlog bound) | 1.2 | 1.6 "
        "| 0.75 | lower |" in table
    )
