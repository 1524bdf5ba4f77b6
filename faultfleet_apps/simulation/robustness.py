"""Robustness runs: one strategy over many seeds and fleets, resumable, in parallel.

A *fleet* is a simulated federation: a ``faultfleet sim`` scenario (``mixed-fault``, ...),
one of the named ``label-groups`` fleets of :data:`FLEET_PRESETS`, or any groups text
(:mod:`signal_pipeline.label_groups`). A *method* is a strategy with options under a tag
(``flacc``, ``flacc+rule=paper``; the short names of :mod:`~faultfleet_apps.simulation.table`
such as ``ifca-6`` work too). :func:`run_fleet_seed` runs every method on one fleet and
seed, sharing the federation, and keeps each run's ``results.json`` in
``OUT/<fleet>/<method>/seed<S>/`` (:func:`~faultfleet_apps.simulation.table.run_cell`:
a run already written is read back, so an interrupted benchmark resumes); :func:`run_grid`
runs many in parallel processes. :func:`run_row` reads a document's figures, with the
rounds of its wrong merges (:mod:`~faultfleet_apps.simulation.merge_audit`), and
:func:`fleet_summary` sums up one fleet.
"""

from __future__ import annotations

import hashlib
import math
import multiprocessing
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from faultfleet.errors import UsageError
from faultfleet_apps.simulation.config import LABEL_GROUPS, SCENARIOS, SimConfig, profile
from faultfleet_apps.simulation.merge_audit import audit_merges, wrong_merge_rounds
from faultfleet_apps.simulation.runner import build_federation
from faultfleet_apps.simulation.table import cell_path, method_strategy, run_cell
from signal_pipeline.federation import Federation
from signal_pipeline.label_groups import LabelGroups, format_label_groups, parse_label_groups

FAIL_ARI = 0.9
"""A run whose final ARI is below this failed to find its fleet's groups."""

FLEET_PRESETS: dict[str, str] = {
    # three groups of six machines, conditions from three bearing states
    "three-groups": "0,1*6;4,8*6;14,19*6",
    # twelve groups of three: ten disjoint label pairs and two pairs that reuse labels
    "twelve-groups": "0,1*3;2,3*3;4,5*3;6,7*3;8,9*3;10,11*3;12,13*3;14,15*3;16,17*3;"
    "18,19*3;0,19*3;3,16*3",
    # unequal sizes, from 2 to 16 machines
    "unequal-sizes": "0,1*2;2,3*16;4,8*4;5,6*8;9,10*3",
    # mixed-fault's quick fleet with group 1 holding label 1 of group 0 instead of label 2
    "shared-label": "0,1*3;1,3*3;4,8*3;5,6*3;7,11*3;9,10*3",
}
"""Named label-groups fleets of the robustness benchmark (``LABELS*N;...`` text)."""


@dataclass(frozen=True)
class Fleet:
    """A fleet to run: a folder name, its scenario, and its groups for ``label-groups``."""

    name: str
    scenario: str
    groups: LabelGroups = ()


def fleet_named(name: str) -> Fleet:
    """A preset of :data:`FLEET_PRESETS` or a sim scenario, by name."""
    if name in FLEET_PRESETS:
        return Fleet(name, LABEL_GROUPS, parse_label_groups(FLEET_PRESETS[name]))
    if name in SCENARIOS and name != LABEL_GROUPS:
        return Fleet(name, name)
    choices = [*FLEET_PRESETS, *(s for s in SCENARIOS if s != LABEL_GROUPS)]
    raise UsageError(
        f"unknown fleet {name!r}; choose one of {', '.join(choices)}, or give --groups TEXT"
    )


def fleet_from_groups(text: str) -> Fleet:
    """A fleet given as groups text; its folder name is ``groups-`` and a digest of it."""
    groups = parse_label_groups(text)
    digest = hashlib.sha1(format_label_groups(groups).encode("ascii")).hexdigest()[:8]
    return Fleet(f"groups-{digest}", LABEL_GROUPS, groups)


@dataclass(frozen=True)
class Method:
    """A strategy with options, under the tag that names its folder and table rows."""

    tag: str
    strategy: str
    options: dict[str, Any] = field(default_factory=dict)


def method(name: str, options: Mapping[str, Any] | None = None) -> Method:
    """``name`` (a strategy or a table method such as ``ifca-6``) with ``options`` on top.

    The tag is ``name``, followed by ``+key=value`` for every option in key order.
    """
    strategy, fixed = method_strategy(name)
    given = dict(options or {})
    suffix = "".join(f"+{key}={given[key]}" for key in sorted(given))
    tag = re.sub(r"[^A-Za-z0-9._=+-]", "_", name + suffix)
    return Method(tag, strategy, {**fixed, **given})


def run_config(
    fleet: Fleet, chosen: Method, seed: int, profile_name: str, overrides: Mapping[str, Any]
) -> SimConfig:
    """The settings of one run: the profile, the fleet, the method, then ``overrides``."""
    values = {"rounds": None, **overrides}
    return profile(
        profile_name,
        scenario=fleet.scenario,
        groups=fleet.groups or None,
        strategy=chosen.strategy,
        seed=seed,
        strategy_options=chosen.options,
        **values,
    )


@dataclass(frozen=True)
class RunRow:
    """The figures of one run, as the benchmark reports them."""

    fleet: str
    method: str
    seed: int
    groups: int
    """True groups of the fleet."""
    clusters: int
    ari: float
    accuracy: float
    """Mean final test accuracy over machines, in [0, 1]."""
    wall_seconds: float
    confidence: float | None
    """Run confidence (``cluster_quality.confidence``), None when the strategy has none."""
    merges: int
    wrong_merge_rounds: tuple[int, ...]
    """Round of every merge that joined true groups (``joins``)."""
    mixed_growth_rounds: tuple[int, ...]
    """Round of every merge that grew an already mixed cluster (``grows-mixed``)."""
    reused: bool = False
    """Read back from an earlier run rather than run now."""

    @property
    def failed(self) -> bool:
        """Whether the run missed its fleet's groups (ARI below :data:`FAIL_ARI`)."""
        return self.ari < FAIL_ARI


def run_row(fleet: str, tag: str, document: Mapping[str, Any], reused: bool = False) -> RunRow:
    """The figures of a ``results.json`` document."""
    final = document["final"]
    verdicts = audit_merges(document)
    quality = document.get("cluster_quality") or {}
    accuracy = final.get("accuracy")
    return RunRow(
        fleet=fleet,
        method=tag,
        seed=int(document["seed"]),
        groups=len(set(document["true_groups"].values())),
        clusters=int(final["num_clusters"]),
        ari=float(final["ari"]),
        accuracy=float("nan") if accuracy is None else float(accuracy),
        wall_seconds=float(document["wall_seconds"]),
        confidence=quality.get("confidence"),
        merges=len(verdicts),
        wrong_merge_rounds=wrong_merge_rounds(verdicts),
        mixed_growth_rounds=tuple(v.round for v in verdicts if v.kind == "grows-mixed"),
        reused=reused,
    )


@dataclass(frozen=True)
class Task:
    """Every method on one fleet and seed (one federation), written under ``out``."""

    fleet: Fleet
    seed: int
    methods: tuple[Method, ...]
    out: Path
    profile_name: str
    overrides: tuple[tuple[str, Any], ...] = ()


def run_fleet_seed(task: Task) -> list[RunRow]:
    """Run (or read back) every method of ``task``; the federation is built once, if needed.

    Wall seconds are those of the run alone, without building the federation.
    """
    federation: Federation | None = None
    rows = []
    folder = task.out / task.fleet.name
    for chosen in task.methods:
        config = run_config(task.fleet, chosen, task.seed, task.profile_name, dict(task.overrides))
        reused = cell_path(folder, chosen.tag, task.seed).is_file()
        if federation is None and not reused:
            federation = build_federation(config)
        document = run_cell(chosen.tag, config, folder, federation)
        rows.append(run_row(task.fleet.name, chosen.tag, document, reused))
    return rows


def _init_worker(threads: int) -> None:
    torch.set_num_threads(threads)


def run_grid(
    tasks: Sequence[Task],
    *,
    jobs: int,
    threads: int = 1,
    on_done: Callable[[Task, list[RunRow]], None] | None = None,
) -> list[RunRow]:
    """Run ``tasks`` in ``jobs`` processes (1: in this one), ``threads`` torch threads each.

    ``on_done(task, rows)`` is called in this process as each task finishes; the rows come
    back in task order. An error in a run stops the grid (finished runs are kept on disk).
    """
    if jobs < 1 or threads < 1:
        raise UsageError(f"jobs and threads must be >= 1, got {jobs} and {threads}")
    results: dict[int, list[RunRow]] = {}
    if jobs == 1:
        _init_worker(threads)
        for index, task in enumerate(tasks):
            results[index] = run_fleet_seed(task)
            if on_done is not None:
                on_done(task, results[index])
    else:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(jobs, context, _init_worker, (threads,)) as pool:
            pending = {pool.submit(run_fleet_seed, task): i for i, task in enumerate(tasks)}
            try:
                while pending:
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        index = pending.pop(future)
                        results[index] = future.result()
                        if on_done is not None:
                            on_done(tasks[index], results[index])
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    return [row for index in range(len(tasks)) for row in results[index]]


def _mean(values: Iterable[float]) -> float | None:
    finite = [v for v in values if not math.isnan(v)]
    return statistics.fmean(finite) if finite else None


def fleet_summary(rows: Sequence[RunRow], strategy: str, compare: Sequence[str]) -> dict[str, Any]:
    """One fleet's figures: the strategy's failures and accuracy, and each compared method's.

    ``rows`` are the fleet's runs (every method); a compared method is *beaten* when the
    strategy's mean accuracy is above its own; ``seed_wins`` counts the seeds where the
    strategy's accuracy is above it.
    """
    own = [r for r in rows if r.method == strategy]
    by_seed = {r.seed: r.accuracy for r in own}
    summary: dict[str, Any] = {
        "runs": len(own),
        "failures": sum(r.failed for r in own),
        "failure_rate": sum(r.failed for r in own) / len(own) if own else None,
        "runs_with_wrong_merge": sum(bool(r.wrong_merge_rounds) for r in own),
        "mean_accuracy": _mean(r.accuracy for r in own),
        "mean_ari": _mean(r.ari for r in own),
        "mean_clusters": _mean(r.clusters for r in own),
        "median_wall_seconds": statistics.median(r.wall_seconds for r in own) if own else None,
        "compare": {},
    }
    for tag in compare:
        theirs = [r for r in rows if r.method == tag]
        accuracy = _mean(r.accuracy for r in theirs)
        mine = summary["mean_accuracy"]
        summary["compare"][tag] = {
            "runs": len(theirs),
            "mean_accuracy": accuracy,
            "beaten": mine is not None and accuracy is not None and mine > accuracy,
            "seed_wins": sum(r.seed in by_seed and by_seed[r.seed] > r.accuracy for r in theirs),
        }
    return summary
