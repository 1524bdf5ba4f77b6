"""The run of ``faultfleet bench`` (:mod:`faultfleet_apps.cli.bench`): cells, tables, plots.

Imported only when ``bench`` runs: it loads the simulator and the image benchmarks.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from faultfleet_apps.cli.bench import unique, with_model, with_rounds
from faultfleet_apps.imagebench.bench import run_cells
from faultfleet_apps.imagebench.cells import Cell, check_cells, plan_cells
from faultfleet_apps.imagebench.report import draw, group_documents, write_csv, write_markdown
from faultfleet_apps.imagebench.suites import get_suite
from faultfleet_apps.plotting import require_pyplot
from faultfleet_apps.simulation.table import Document
from faultfleet_apps.thread_policy import requested_threads, usable_cores, worker_plan


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
    suite = with_model(with_rounds(get_suite(args.suite), args.rounds), args.model)
    threads_asked = requested_threads(args.threads, os.environ)
    jobs, threads = worker_plan(cores=usable_cores(), jobs=args.jobs, threads=threads_asked)
    cells = plan_cells(
        suite,
        out=args.out,
        methods=unique(args.methods),
        seeds=unique(args.seeds),
        scenarios=unique(args.scenarios),
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
