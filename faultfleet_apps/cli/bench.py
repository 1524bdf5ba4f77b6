"""``faultfleet bench``: the papers' image benchmarks, methods × scenarios × seeds.

Writes ``OUT/<scenario>/<method>/seed<k>/results.json`` per cell (finished cells are read
back, so an interrupted suite resumes), then ``OUT/results.csv``, ``OUT/summary.md`` and
per-scenario plots (:mod:`faultfleet_apps.imagebench.report`). Suites and their settings are in
:mod:`faultfleet_apps.imagebench.suites`; docs/reproduction.md compares them with the papers.
This module builds the command line; the run is :mod:`faultfleet_apps.cli.bench_run`,
imported only when ``bench`` runs.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from faultfleet.models.zoo import MODEL_NAMES
from faultfleet_apps.cli.arguments import POSITIVE, SEED
from faultfleet_apps.cli.lazy import lazy_handler
from faultfleet_apps.imagebench.datasets import DATASET_NAMES
from faultfleet_apps.imagebench.suites import SUITES, BenchScenario, Suite


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
    bench.set_defaults(handler=lazy_handler("faultfleet_apps.cli.bench_run", "run_bench"))


def with_rounds(suite: Suite, rounds: int | None) -> Suite:
    if rounds is None:
        return suite
    scenarios = tuple(
        replace(s, rounds=rounds, eval_every=min(s.eval_every, rounds)) for s in suite.scenarios
    )
    return replace(suite, scenarios=scenarios)


def with_model(suite: Suite, model: str | None) -> Suite:
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


def unique(values: list[Any] | None) -> list[Any] | None:
    """``values`` without repeats, first occurrence kept (a seed given twice runs once)."""
    return None if values is None else list(dict.fromkeys(values))
