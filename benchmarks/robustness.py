"""Robustness of a clustering strategy over many seeds and fleets: failures, wrong merges.

Usage: python benchmarks/robustness.py --out DIR (--seeds S ... | --seed-range FIRST LAST)
       [--strategy flacc] [--option KEY=VALUE ...] [--profile quick|paper]
       [--fleet NAME ...] [--groups TEXT ...] [--compare local fedavg ...]
       [--rounds N] [--jobs J] [--threads T]

Runs the strategy (default ``flacc`` with the profile's options and ``--option`` on top)
on every fleet and seed, and each ``--compare`` method on the same federations. Fleets are
the named label-groups fleets (``three-groups``, ``twelve-groups``, ``unequal-sizes``,
``shared-label``: :data:`faultfleet_apps.simulation.robustness.FLEET_PRESETS`; all four
by default), a ``faultfleet sim`` scenario (``--fleet mixed-fault``) or any ``--groups``
text. Every run keeps its ``results.json`` in ``DIR/<fleet>/<method>/seed<S>/`` and a run
already there is read back (so an interrupted benchmark resumes; one written with other
settings is an error). Runs go to ``--jobs`` processes (default: one per CPU) with
``--threads`` torch threads each; progress goes to stderr.

Prints markdown tables: per run the clusters found, ARI, mean accuracy, wall seconds, run
confidence and the round of every merge that joined two true groups
(:mod:`faultfleet_apps.simulation.merge_audit`); per fleet the failure rate (ARI < 0.9),
mean accuracy and, per compared method, its accuracy and whether the strategy beat it.
Writes ``DIR/runs.csv`` and ``DIR/summary.json``. Seeds 0-99 are for tuning, seeds from
100 for reporting: the header says which were used.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from coordinator.strategies.registry import parse_options
from faultfleet_apps.simulation.robustness import (
    FAIL_ARI,
    FLEET_PRESETS,
    Fleet,
    RunRow,
    Task,
    fleet_from_groups,
    fleet_named,
    fleet_summary,
    method,
    run_grid,
)
from faultfleet_apps.simulation.table import seed_range, write_document
from signal_pipeline.label_groups import format_label_groups

CSV_FIELDS = (
    "fleet",
    "method",
    "seed",
    "groups",
    "clusters",
    "ari",
    "accuracy",
    "wall_seconds",
    "confidence",
    "merges",
    "wrong_merge_rounds",
    "mixed_growth_rounds",
    "failed",
)
RUN_HEADER = (
    "fleet",
    "method",
    "seed",
    "clusters (true)",
    "ARI",
    "accuracy (%)",
    "wall (s)",
    "confidence",
    "wrong merges (rounds)",
)
FLEET_HEADER = (
    "fleet",
    "runs",
    "failures (ARI < 0.9)",
    "runs with a wrong merge",
    "mean accuracy (%)",
    "mean ARI",
    "median wall (s)",
    "compared: accuracy (%), seeds won",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    seeds = parser.add_mutually_exclusive_group(required=True)
    seeds.add_argument("--seeds", type=int, nargs="+")
    seeds.add_argument("--seed-range", type=int, nargs=2, metavar=("FIRST", "LAST"))
    parser.add_argument("--strategy", default="flacc")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--profile", choices=("quick", "paper"), default="quick")
    parser.add_argument("--fleet", action="append", default=[], metavar="NAME")
    parser.add_argument("--groups", action="append", default=[], metavar="TEXT")
    parser.add_argument("--compare", nargs="+", default=[], metavar="METHOD")
    parser.add_argument("--rounds", type=int, help="default: the profile's")
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--threads", type=int, default=1, help="torch threads per job")
    return parser.parse_args(argv)


def seed_use(seeds: list[int]) -> str:
    """Whether ``seeds`` are tuning seeds (0-99), report seeds (>= 100), or both."""
    tuning = [s for s in seeds if s < 100]
    if not tuning:
        return "report seeds (>= 100)"
    return "tuning seeds (0-99)" if len(tuning) == len(seeds) else "tuning and report seeds"


def _number(value: float | None, digits: int) -> str:
    return "—" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _rounds(rounds: tuple[int, ...]) -> str:
    return " ".join(str(r) for r in rounds) or "—"


def progress(done: list[int], total: int) -> Any:
    """The ``on_done`` callback of :func:`run_grid`: one stderr line per run."""

    def report(task: Task, rows: list[RunRow]) -> None:
        done[0] += 1
        for row in rows:
            note = " (read back)" if row.reused else ""
            print(
                f"[{done[0]}/{total}] {row.fleet} seed {row.seed} {row.method}: "
                f"{row.clusters} clusters of {row.groups}, ARI {row.ari:.3f}, accuracy "
                f"{_number(row.accuracy, 4)}, {row.wall_seconds:.0f} s, wrong merges at "
                f"rounds {_rounds(row.wrong_merge_rounds)}{note}",
                file=sys.stderr,
                flush=True,
            )

    return report


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _compared(summary: dict[str, Any]) -> str:
    parts = []
    for tag, c in summary["compare"].items():
        accuracy = None if c["mean_accuracy"] is None else 100 * c["mean_accuracy"]
        verdict = "beaten" if c["beaten"] else "NOT beaten"
        parts.append(f"{tag} {_number(accuracy, 1)} {verdict}, {c['seed_wins']}/{c['runs']}")
    return "; ".join(parts) or "—"


def print_tables(rows: list[RunRow], fleets: list[Fleet], summaries: dict[str, Any]) -> None:
    """The per-run and per-fleet markdown tables."""
    print(_row(list(RUN_HEADER)))
    print(_row(["---"] * len(RUN_HEADER)))
    for r in rows:
        cells = [r.fleet, r.method, str(r.seed), f"{r.clusters} ({r.groups})", f"{r.ari:.3f}"]
        cells += [_number(100 * r.accuracy, 1), f"{r.wall_seconds:.0f}"]
        cells += [_number(r.confidence, 3), _rounds(r.wrong_merge_rounds)]
        print(_row(cells))
    print()
    print(_row(list(FLEET_HEADER)))
    print(_row(["---"] * len(FLEET_HEADER)))
    for fleet in fleets:
        s = summaries[fleet.name]
        accuracy = None if s["mean_accuracy"] is None else 100 * s["mean_accuracy"]
        cells = [fleet.name, str(s["runs"]), str(s["failures"]), str(s["runs_with_wrong_merge"])]
        cells += [_number(accuracy, 1), _number(s["mean_ari"], 3)]
        cells += [_number(s["median_wall_seconds"], 0), _compared(s)]
        print(_row(cells))


def write_outputs(out: Path, rows: list[RunRow], document: dict[str, Any]) -> None:
    """``runs.csv`` (one line per run) and ``summary.json``."""
    with (out / "runs.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_FIELDS)
        for r in rows:
            values = {**asdict(r), "failed": r.failed}
            values["wrong_merge_rounds"] = " ".join(map(str, r.wrong_merge_rounds))
            values["mixed_growth_rounds"] = " ".join(map(str, r.mixed_growth_rounds))
            writer.writerow([values[name] for name in CSV_FIELDS])
    write_document(out / "summary.json", document)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its tables."""
    args = parse_args(argv)
    if args.seed_range:
        first, last = args.seed_range
        seeds = list(range(first, last + 1))
    else:
        seeds = list(args.seeds)
    names = args.fleet or ([] if args.groups else list(FLEET_PRESETS))
    fleets = [fleet_named(name) for name in names] + [fleet_from_groups(t) for t in args.groups]
    strategy = method(args.strategy)
    strategy = method(args.strategy, parse_options(strategy.strategy, args.option))
    compare = [method(name) for name in args.compare]
    overrides = (("rounds", args.rounds),) if args.rounds else ()
    tasks = [
        Task(fleet, seed, (strategy, *compare), args.out, args.profile, overrides)
        for fleet in fleets
        for seed in seeds
    ]
    print(
        f"{len(tasks)} fleet-seeds x {1 + len(compare)} methods, {args.jobs} jobs",
        file=sys.stderr,
    )
    rows = run_grid(tasks, jobs=args.jobs, threads=args.threads, on_done=progress([0], len(tasks)))
    tags = [m.tag for m in compare]
    summaries = {
        f.name: fleet_summary([r for r in rows if r.fleet == f.name], strategy.tag, tags)
        for f in fleets
    }
    own = [r for r in rows if r.method == strategy.tag]
    print(
        f"\n{strategy.tag} on {args.profile} profile, seeds {seed_range(seeds)} "
        f"({seed_use(seeds)}), failure = ARI < {FAIL_ARI}: {sum(r.failed for r in own)} of "
        f"{len(own)} runs failed\n"
    )
    print_tables(rows, fleets, summaries)
    document = {
        "profile": args.profile,
        "strategy": strategy.tag,
        "strategy_options": strategy.options,
        "compare": tags,
        "seeds": seeds,
        "seed_use": seed_use(seeds),
        "fail_ari": FAIL_ARI,
        "fleets": {
            f.name: {
                "scenario": f.scenario,
                "groups": format_label_groups(f.groups),
                **summaries[f.name],
            }
            for f in fleets
        },
        "failures": sum(r.failed for r in own),
        "runs": [{**asdict(r), "failed": r.failed} for r in rows],
    }
    write_outputs(args.out, rows, document)
    print(f"\nruns.csv and summary.json in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
