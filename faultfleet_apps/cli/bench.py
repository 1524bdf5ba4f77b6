"""``faultfleet bench``: the papers' image benchmarks, methods × scenarios × seeds.

Writes ``OUT/<scenario>/<method>/seed<k>/results.json`` per cell (finished cells are read
back, so an interrupted suite resumes), then ``OUT/results.csv``, ``OUT/summary.md`` and
per-scenario plots (:mod:`faultfleet_apps.imagebench.report`). Suites and their settings are in
:mod:`faultfleet_apps.imagebench.suites`; docs/reproduction.md compares them with the papers.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from faultfleet.models.zoo import MODEL_NAMES
from faultfleet_apps.cli.arguments import POSITIVE, SEED
from faultfleet_apps.imagebench.bench import run_cells
from faultfleet_apps.imagebench.cells import Cell, check_cells, plan_cells
from faultfleet_apps.imagebench.datasets import DATASET_NAMES
from faultfleet_apps.imagebench.report import draw, group_documents, write_csv, write_markdown
from faultfleet_apps.imagebench.suites import SUITES, BenchScenario, Suite, get_suite
from faultfleet_apps.plotting import require_pyplot
from faultfleet_apps.simulation.table import Document
from faultfleet_apps.thread_policy import requested_threads, usable_cores, worker_plan


def add_bench_command(commands: Any) -> None:
    """Register ``bench``."""
    bench = commands.add_parser(
        "bench",
        help="run the papers' image benchmarks (FLACC, FAACL, joint gradient and loss)",
        description=(
            "Run a benchmark suite: every method on every scenario for every seed, each "
            "cell in OUT/<scenario>/<method>/seed<k>/. Finished cells are skipped, so an "
            "interrupted suite resumes. Writes results.csv, summary.md and plots to OUT."
        ),
    )
    bench.add_argument(
        "--suite",
        required=True,
        choices=sorted(SUITES),
        help="; ".join(f"{s.name}: {s.description}" for s in SUITES.values()),
    )
    bench.add_argument("--out", type=Path, required=True, help="output folder")
    bench.add_argument(
        "--methods",
        nargs="+",
        help="methods (default: the suite's per scenario): local, fedavg, flacc, cfl, flhc, "
        "ifca-K, flacc-next, faacl-v1, faacl-v2, jgl-kK, fedac-kK, fedavg-oracle, centralized",
    )
    bench.add_argument("--seeds", type=SEED, nargs="+", help="seeds (default: the suite's)")
    bench.add_argument("--scenarios", nargs="+", help="only these scenarios of the suite")
    bench.add_argument(
        "--dataset",
        choices=DATASET_NAMES,
        help="dataset of every scenario (default: the scenario's, Fashion-MNIST)",
    )
    bench.add_argument(
        "--data-dir", help="folder holding the dataset's files (default: where it installs)"
    )
    bench.add_argument("--rounds", type=POSITIVE, help="override every scenario's round count")
    bench.add_argument(
        "--model",
        choices=MODEL_NAMES,
        help="zoo model every scenario trains (default: the scenario's; the FLACC scenarios' "
        "paper CNN is flacc-cnn2d, meant for a GPU)",
    )
    bench.add_argument(
        "--threads",
        type=POSITIVE,
        help="torch threads per worker process (default: the cores shared among --jobs, "
        "1 when --jobs is not given)",
    )
    bench.add_argument(
        "--jobs",
        type=POSITIVE,
        help="worker processes running cells side by side (default: cores / threads)",
    )
    bench.set_defaults(handler=run_bench)


def _with_rounds(suite: Suite, rounds: int | None) -> Suite:
    if rounds is None:
        return suite
    scenarios = tuple(
        replace(s, rounds=rounds, eval_every=min(s.eval_every, rounds)) for s in suite.scenarios
    )
    return replace(suite, scenarios=scenarios)


def _with_model(suite: Suite, model: str | None) -> Suite:
    """``suite`` with every scenario training ``model``; a paper column says it differs."""
    if model is None:
        return suite

    def retrained(scenario: BenchScenario) -> BenchScenario:
        if scenario.model == model:
            return scenario
        source = scenario.paper_source
        if source:
            source += f" (these cells trained {model}, not the scenario's {scenario.model})"
        return replace(scenario, model=model, paper_source=source)

    return replace(suite, scenarios=tuple(retrained(s) for s in suite.scenarios))


def _unique(values: list[Any] | None) -> list[Any] | None:
    """``values`` without repeats, first occurrence kept (a seed given twice runs once)."""
    return None if values is None else list(dict.fromkeys(values))


def _progress(cell: Cell, document: Document, done: int, total: int) -> None:
    final = document["final"]
    print(
        f"[{done}/{total}] {cell.scenario.name} {cell.method} seed {cell.seed}: accuracy "
        f"{100 * final['accuracy']:.2f} %, {final['num_clusters']} clusters, ARI "
        f"{final['ari']:.3f}, {document['wall_seconds']:.0f} s",
        file=sys.stderr,
        flush=True,
    )


def run_bench(args: argparse.Namespace) -> int:
    """Handler of ``faultfleet bench``."""
    suite = _with_model(_with_rounds(get_suite(args.suite), args.rounds), args.model)
    threads_asked = requested_threads(args.threads, os.environ)
    jobs, threads = worker_plan(cores=usable_cores(), jobs=args.jobs, threads=threads_asked)
    cells = plan_cells(
        suite,
        out=args.out,
        methods=_unique(args.methods),
        seeds=_unique(args.seeds),
        scenarios=_unique(args.scenarios),
        dataset=args.dataset,
        data_dir=args.data_dir,
        threads=threads,
    )
    check_cells(cells)
    require_pyplot()  # the run ends in figures: no matplotlib, no run
    print(
        f"suite {suite.name}: {len(cells)} cells "
        f"({len({c.scenario.name for c in cells})} scenarios), "
        f"up to {jobs} at a time; results in {args.out}",
        file=sys.stderr,
        flush=True,
    )
    start = time.perf_counter()
    try:
        documents = run_cells(cells, jobs=jobs, report=_progress)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(
            f"interrupted; finished cells are kept in {args.out}, and the same command "
            "resumes from them"
        ) from None
    grouped = group_documents(
        suite.scenarios, [(c.scenario.name, d) for c, d in zip(cells, documents, strict=True)]
    )
    write_csv(grouped, args.out / "results.csv")
    header = (
        f"# faultfleet bench --suite {suite.name}\n\n"
        f"Dataset: {', '.join(sorted({c.dataset for c in cells}))}; model: "
        f"{', '.join(sorted({c.scenario.model for c in cells}))}. Accuracy is the mean "
        "client test accuracy after the last round, mean ± std over seeds (population std); "
        "clusters and ARI are scored against the federation's true groups."
    )
    write_markdown(suite.scenarios, grouped, args.out / "summary.md", header=header)
    for scenario in suite.scenarios:
        if grouped.get(scenario.name):
            draw(scenario, grouped[scenario.name], args.out)
    print((args.out / "summary.md").read_text(encoding="utf-8"))
    print(
        f"{len(cells)} cells in {time.perf_counter() - start:.0f} s wall time",
        file=sys.stderr,
    )
    return 0
