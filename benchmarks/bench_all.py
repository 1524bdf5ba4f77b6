"""The benchmark set in short settings, summed up in one markdown table of ratios.

Usage: python benchmarks/bench_all.py [--out bench-out/all] [--only NAME ...] [--timeout-s 1800]

Runs each performance benchmark that measures faultfleet against a baseline (a peer
framework, the broker's raw rate, bare ONNX Runtime, numpy, the exact path, a smaller
fleet, the code without a bound) in its own process, with short settings so the set
finishes in well under an hour on two cores, and collects what it writes with ``--json``.
Each benchmark's output goes to ``OUT/NAME.log`` and its JSON to ``OUT/NAME.json``; the
table goes to ``OUT/bench.md`` and is printed. A benchmark that fails gives a row saying
so (and the run exits 1 at the end).

Columns: ``ours`` and ``baseline`` in the measure's unit, ``ratio`` = ours / baseline, and
which direction is better. Short settings mean few repeats: the ratios are indications,
not the medians of interleaved runs each benchmark gives with its default settings. Left
out: the accuracy studies (``bench_difficulty``, ``bench_jgl_purity``, ``bench_poisoning``,
``bench_robust_aggregation``, ``bench_sensor_quality``, ``bench_wire_precision``,
``bench_probe_frames``), which train federations for minutes to hours and report
accuracies, the robustness drills (``bench_agent_fuzz``, ``bench_broker_restart``,
``bench_agent_rss``), which report pass counts and memory, not ratios, and
``bench_same_model_evidence``, which reports the time and memory of IFCA's and FAACL's
evidence with no baseline run beside it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
Row = tuple[str, str, float, float, str]
"""(benchmark, measure, ours, baseline, better: "higher" or "lower")."""


def simulator_rows(doc: dict[str, Any]) -> list[Row]:
    rows = []
    for fs in sorted({r["fs_hz"] for r in doc["rows"]}):
        slowest = min(r["x_realtime"] for r in doc["rows"] if r["fs_hz"] == fs)
        rows.append(
            (
                "simulator",
                f"signal s per wall s at {fs:g} Hz (slowest condition)",
                slowest,
                1.0,
                "higher",
            )
        )
    return rows


def windowing_rows(doc: dict[str, Any]) -> list[Row]:
    longest = max(r["signal_s"] for r in doc["rows"])
    return [
        (
            "windowing",
            f"windows/s, L={r['window_length']} stride {r['stride']} (vs sliding_window_view)",
            r["ours_windows_per_s"],
            r["baseline_windows_per_s"],
            "higher",
        )
        for r in doc["rows"]
        if r["signal_s"] == longest
    ]


def diagnosis_rows(doc: dict[str, Any]) -> list[Row]:
    return [
        (
            "diagnosis_latency",
            f"{r['model']} {r['variant']} p50 ms (vs bare ORT)",
            r["p50_ms"],
            r["bare_p50_ms"],
            "lower",
        )
        for r in doc["rows"]
        if r["variant"] != "bare"
    ]


def ingest_rows(doc: dict[str, Any]) -> list[Row]:
    raw = {r["model"]: r["updates_per_s"] for r in doc["rows"] if r["receiver"] == "mosquitto_sub"}
    return [
        (
            "ingest",
            f"{r['model']} updates/s, journal {r['journal']} (vs mosquitto_sub)",
            r["updates_per_s"],
            raw[r["model"]],
            "higher",
        )
        for r in doc["rows"]
        if r["receiver"] not in ("mosquitto_sub", "paho, no-op")
    ]


def ingest_workers_rows(doc: dict[str, Any]) -> list[Row]:
    by = {r["workers"]: r for r in doc["rows"]}
    rows: list[Row] = []
    if 1 in by and 0 in by:
        rows.append(
            (
                "ingest_workers",
                "1 worker updates/s (vs mosquitto_sub)",
                by[1]["updates_per_s"],
                by[0]["updates_per_s"],
                "higher",
            )
        )
    for k, r in sorted(by.items()):
        if k > 1 and 1 in by:
            rows.append(
                (
                    "ingest_workers",
                    f"{k} workers updates/s (vs 1 worker)",
                    r["updates_per_s"],
                    by[1]["updates_per_s"],
                    "higher",
                )
            )
    return rows


def server_scale_rows(doc: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for r in doc["rows"]:
        n = r["agents"]
        rows.append(
            (
                "server_scale",
                f"FLACC step CPU s at {n} agents (vs 1 s budget)",
                r["seconds_per_step"],
                1.0,
                "lower",
            )
        )
        rows.append(
            (
                "server_scale",
                f"clusters' ARI vs exact at {n} agents",
                r["ari_vs_exact"],
                1.0,
                "higher",
            )
        )
    last = doc["rows"][-1]
    if len(doc["rows"]) > 1:
        rows.append(
            (
                "server_scale",
                f"step growth to {last['agents']} agents (vs n log n)",
                last["growth"],
                last["nlogn_growth"],
                "lower",
            )
        )
    return rows


def peers_rows(doc: dict[str, Any]) -> list[Row]:
    summary = doc["summary"]
    ours = summary.get("faultfleet")
    if ours is None:
        return []
    rows: list[Row] = []
    for peer in ("flower", "bare"):
        if peer in summary:
            theirs = summary[peer]
            rows.append(
                (
                    "peers",
                    f"s per round (vs {peer})",
                    ours["seconds_per_round"],
                    theirs["seconds_per_round"],
                    "lower",
                )
            )
            rows.append(
                (
                    "peers",
                    f"final accuracy (vs {peer})",
                    ours["final_accuracy"],
                    theirs["final_accuracy"],
                    "higher",
                )
            )
    return rows


def compile_rows(doc: dict[str, Any]) -> list[Row]:
    return [
        (
            "compile",
            f"{doc['model']} ms per training step on {doc['device']}, torch.compile (vs eager)",
            doc["compiled_ms_per_step"],
            doc["eager_ms_per_step"],
            "lower",
        )
    ]


def fleet_statuses_rows(doc: dict[str, Any]) -> list[Row]:
    smallest = min(r["agents"] for r in doc["rows"])
    largest = max(r["agents"] for r in doc["rows"])
    base = {r["pass"]: r["us_per_status"] for r in doc["rows"] if r["agents"] == smallest}
    return [
        (
            "fleet_statuses",
            f"us per agent status at {largest} agents, {r['pass']} (vs {smallest} agents)",
            r["us_per_status"],
            base[r["pass"]],
            "lower",
        )
        for r in doc["rows"]
        if r["agents"] == largest and largest > smallest
    ]


def dispatch_rows(doc: dict[str, Any]) -> list[Row]:
    by = {r["variant"]: r for r in doc["rows"]}
    bounded, unbounded = by["bounded"], by["unbounded"]
    what = f"{bounded['tasks']} {bounded['model']} fit tasks"
    return [
        (
            "dispatch",
            f"peak RSS MB dispatching {what} (vs no backlog bound)",
            bounded["peak_rss_mb"],
            unbounded["peak_rss_mb"],
            "lower",
        ),
        (
            "dispatch",
            f"s to dispatch {what} (vs no backlog bound)",
            bounded["seconds"],
            unbounded["seconds"],
            "lower",
        ),
    ]


def server_scale_document(path: Path) -> dict[str, Any]:
    """``bench_server_scale.py`` writes a list of rows."""
    rows = json.loads(path.read_text())
    return {"rows": rows if isinstance(rows, list) else rows["rows"]}


@dataclass(frozen=True)
class Benchmark:
    name: str
    script: str
    arguments: tuple[str, ...]
    rows: Callable[[dict[str, Any]], list[Row]]


SUITE = (
    Benchmark(
        "simulator", "bench_simulator.py", ("--repeats", "3", "--seconds", "2"), simulator_rows
    ),
    Benchmark("windowing", "bench_windowing.py", ("--repeats", "3"), windowing_rows),
    Benchmark(
        "diagnosis_latency",
        "bench_diagnosis_latency.py",
        ("--windows", "1000", "--block", "500", "--warm-up", "20"),
        diagnosis_rows,
    ),
    Benchmark(
        "ingest",
        "bench_ingest.py",
        ("--repeats", "1", "--updates-compact", "100", "--updates-paper", "6", "--journal", "disk"),
        ingest_rows,
    ),
    Benchmark(
        "ingest_workers",
        "bench_ingest_workers.py",
        ("--repeats", "1", "--updates", "200"),
        ingest_workers_rows,
    ),
    Benchmark(
        "server_scale",
        "bench_server_scale.py",
        ("--agents", "1000", "2000", "--rounds", "3"),
        server_scale_rows,
    ),
    Benchmark("dispatch", "bench_dispatch.py", ("--tasks", "48", "--repeats", "1"), dispatch_rows),
    Benchmark(
        "fleet_statuses",
        "bench_fleet_statuses.py",
        ("--agents", "1000", "10000", "--repeats", "3"),
        fleet_statuses_rows,
    ),
    Benchmark("peers", "bench_peers.py", ("--repeats", "1", "--rounds", "3"), peers_rows),
    Benchmark("compile", "bench_compile.py", ("--steps", "30", "--repeats", "3"), compile_rows),
)


def table(rows: list[Row], failed: dict[str, str]) -> str:
    """The markdown table of ``rows``, then one line per failed benchmark."""
    lines = [
        "| benchmark | measure | ours | baseline | ratio | better |",
        "|---|---|---:|---:|---:|---|",
    ]
    for name, measure, ours, baseline, better in rows:
        ratio = ours / baseline if baseline and not math.isnan(baseline) else float("nan")
        lines.append(
            f"| {name} | {measure} | {ours:.4g} | {baseline:.4g} | {ratio:.2f} | {better} |"
        )
    for name, why in failed.items():
        lines.append(f"| {name} | failed: {why} | | | | |")
    return "\n".join(lines) + "\n"


def run(benchmark: Benchmark, out: Path, timeout_s: float) -> list[Row]:
    """Run one benchmark; its rows (raises RuntimeError when it fails)."""
    result = out / f"{benchmark.name}.json"
    result.unlink(missing_ok=True)
    command = [
        sys.executable,
        str(HERE / benchmark.script),
        *benchmark.arguments,
        "--json",
        str(result),
    ]
    root = str(HERE.parent)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
    }
    with (out / f"{benchmark.name}.log").open("w") as log:
        log.write("command: " + shlex.join(command) + "\n")
        log.flush()
        try:
            done = subprocess.run(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"timed out after {timeout_s:g} s") from None
    if done.returncode != 0 or not result.is_file():
        raise RuntimeError(f"exit status {done.returncode}, see {out / benchmark.name}.log")
    document = (
        server_scale_document(result)
        if benchmark.name == "server_scale"
        else json.loads(result.read_text())
    )
    return benchmark.rows(document)


def main() -> None:
    """Run the suite (or ``--only`` some of it) and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench-out/all"))
    parser.add_argument("--only", nargs="+", choices=[b.name for b in SUITE])
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="per benchmark")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} cpus, load average {load}; short settings, one process per benchmark")
    rows: list[Row] = []
    failed: dict[str, str] = {}
    for benchmark in SUITE:
        if args.only and benchmark.name not in args.only:
            continue
        started = time.perf_counter()
        try:
            rows += run(benchmark, args.out, args.timeout_s)
            status = "done"
        except RuntimeError as error:
            failed[benchmark.name] = str(error)
            status = f"FAILED ({error})"
        seconds = time.perf_counter() - started
        print(f"{benchmark.name}: {status} in {seconds:.0f} s", flush=True)
    markdown = table(rows, failed)
    (args.out / "bench.md").write_text(markdown)
    print(f"\n{markdown}\nwritten to {args.out / 'bench.md'}")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
