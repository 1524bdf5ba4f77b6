"""Run a benchmark suite: methods × scenarios × seeds, resumable, in parallel processes.

Every *cell* (scenario, method, seed) is one simulated run whose ``results.json`` (the
document of :meth:`~faultfleet.simulation.runner.SimResult.to_json`, plus a ``bench``
section naming the suite, scenario and dataset) lands in
``OUT/<scenario>/<method>/seed<k>/``. A cell already written is read back instead of run,
so an interrupted suite resumes where it stopped; a cell written with other settings is an
error, never silently reused.

Methods are those of :mod:`faultfleet.simulation.table` (``flacc``, ``ifca-K``,
``faacl-v1``, …) and two upper bounds that use the ground truth, as in FAACL's tables:

``fedavg-oracle``
    FedAvg inside the true groups (strategy ``fixed``, FAACL's "FedAvg (optimal)").
``centralized``
    One model per true group trained on the group's pooled training data (FAACL's
    "Centralize"), for as many epochs as a client trains in the federated run on average
    (``fraction × rounds × epochs``), so that the bound is not bought with extra compute.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edge_agent.training import evaluate, local_update, select_device
from faultfleet.imagebench import faacl_federations, flacc_federations, jgl_federation
from faultfleet.imagebench.datasets import load_pool
from faultfleet.imagebench.errors import DatasetError
from faultfleet.imagebench.pool import ImagePool
from faultfleet.imagebench.suites import (
    CENTRALIZED,
    ORACLE,
    SCENARIO_PREFIX,
    BenchScenario,
    Suite,
)
from faultfleet.models.zoo import build_model
from faultfleet.scoring import mean_client_accuracy
from faultfleet.simulation.config import SimConfig
from faultfleet.simulation.runner import RoundRecord, SimResult, model_factory, run_simulation
from faultfleet.simulation.table import Document, cell_path, method_strategy, write_document
from signal_pipeline.federation import Dataset, Federation

Builder = Callable[..., Federation]

BUILDERS: dict[str, Builder] = {
    "rotated": flacc_federations.rotated,
    "grouped": flacc_federations.grouped,
    "label_swapped": flacc_federations.label_swapped,
    "grouped_rotated": flacc_federations.grouped_rotated,
    "s0_iid": faacl_federations.s0_iid,
    "s1_label_ranges": faacl_federations.s1_label_ranges,
    "s2_shifted_labels": faacl_federations.s2_shifted_labels,
    "a1_noisy": faacl_federations.a1_noisy,
    "a2_scarce": faacl_federations.a2_scarce,
    "overlapping_clusters": jgl_federation.overlapping_clusters,
}
"""Federation builders by the name a :class:`BenchScenario` gives."""


class CellError(ValueError):
    """A cell raised; the message names the cell, the cause and how to resume."""

    def __init__(self, cell: Cell, cause: BaseException) -> None:
        super().__init__(
            f"cell {cell.label} failed: {cause}; finished cells are kept in {cell.out}, so "
            "the same command resumes once the cause is fixed"
        )


@dataclass(frozen=True)
class Cell:
    """One run of a suite, everything a worker process needs to do it.

    Attributes
    ----------
    suite : str
    scenario : BenchScenario
    method : str
    seed : int
    dataset : str
        Dataset name (the scenario's, or ``--dataset``).
    data_dir : str or None
        Where to read it (None: the dataset's default place).
    out : Path
        Output folder of the whole suite.
    threads : int
        torch threads of the process that runs the cell.
    """

    suite: str
    scenario: BenchScenario
    method: str
    seed: int
    dataset: str
    data_dir: str | None
    out: Path
    threads: int

    @property
    def path(self) -> Path:
        """Where the cell's ``results.json`` is written."""
        return cell_path(self.out / self.scenario.name, self.method, self.seed)

    @property
    def label(self) -> str:
        """``scenario/method/seed k``, for messages."""
        return f"{self.scenario.name}/{self.method}/seed {self.seed}"

    def identity(self) -> dict[str, Any]:
        """What, besides the SimConfig, identifies the cell (checked on resume).

        The suite is not part of it: ``full`` and ``flacc`` share their cells.
        """
        scenario = {**self.scenario.to_json(), "builder_options": builder_options(self.scenario)}
        return {"scenario": scenario, "method": self.method, "dataset": self.dataset}


def builder_options(scenario: BenchScenario) -> dict[str, Any]:
    """The scenario's builder options with the builder's defaults filled in (JSON-ready).

    Part of a cell's identity, so that a changed default is noticed on resume.
    """
    parameters = inspect.signature(BUILDERS[scenario.builder]).parameters.values()
    defaults = {p.name: p.default for p in parameters if p.kind is p.KEYWORD_ONLY}
    unknown = sorted(set(scenario.builder_options) - set(defaults))
    if unknown:
        raise ValueError(
            f"scenario {scenario.name!r}: builder {scenario.builder!r} has no option "
            f"{', '.join(unknown)}; its options are {', '.join(sorted(defaults))}"
        )
    resolved: dict[str, Any] = json.loads(
        json.dumps({**defaults, **scenario.builder_options}, default=list)
    )
    return resolved


def check_method(method: str) -> None:
    """Raise ValueError unless ``method`` is an upper bound or a table method."""
    if method not in (CENTRALIZED, ORACLE):
        method_strategy(method)


def cell_config(cell: Cell, federation: Federation | None = None) -> SimConfig:
    """The SimConfig of ``cell``; the oracle's assignment comes from ``federation``.

    Without a federation the oracle's assignment is empty: good for comparisons that leave
    it out (:func:`comparable`), refused by the strategy if it were run.
    """
    scenario = cell.scenario
    if cell.method == CENTRALIZED:
        strategy, options = CENTRALIZED, {}
    elif cell.method == ORACLE:
        strategy = "fixed"
        truth = {} if federation is None else {c.client_id: c.group for c in federation.clients}
        options = {"assignment": truth}
    else:
        strategy, options = method_strategy(cell.method)
    return SimConfig(
        scenario=SCENARIO_PREFIX + scenario.name,
        strategy=strategy,
        seed=cell.seed,
        rounds=scenario.rounds,
        fraction=scenario.fraction,
        model=scenario.model,
        train=scenario.train,
        strategy_options={**scenario.strategy_options.get(strategy, {}), **options},
        eval_every=scenario.eval_every,
    )


@functools.lru_cache(maxsize=2)
def _pool(dataset: str, data_dir: str | None, part: str) -> ImagePool:
    return load_pool(dataset, data_dir, part=part)


def build_cell_federation(cell: Cell) -> Federation:
    """The scenario's federation for the cell's seed (the pool is cached per process)."""
    scenario = cell.scenario
    pool = _pool(cell.dataset, cell.data_dir, scenario.part)
    return BUILDERS[scenario.builder](pool, cell.seed, **dict(scenario.builder_options))


def comparable(config: dict[str, Any]) -> dict[str, Any]:
    """A SimConfig document without the oracle's assignment (it follows from the seed)."""
    options = {k: v for k, v in config.get("strategy_options", {}).items() if k != "assignment"}
    return {**config, "strategy_options": options}


def read_cell(cell: Cell) -> Document | None:
    """The cell's document if it was written before (None if not).

    The document must carry the cell's identity and the same settings
    (:func:`cell_config`; the oracle's assignment, drawn from the federation, aside).

    Raises
    ------
    ValueError
        If the document on disk was written with other settings.
    """
    if not cell.path.is_file():
        return None
    try:
        document: Document = json.loads(cell.path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(
            f"{cell.path} is not a readable results document ({exc}); delete it to run the "
            "cell again"
        ) from exc
    bench = document.get("bench", {})
    identity = cell.identity()
    written = {key: bench.get(key) for key in identity}
    expected = comparable(cell_config(cell).to_json())
    if written != identity or comparable(document.get("config", {})) != expected:
        raise ValueError(
            f"{cell.path} was written with other settings than this suite asks for; delete "
            "it or write the suite to another folder"
        )
    return document


def run_cell(cell: Cell) -> Document:
    """Run one cell (or read it back) and return its document; the worker entry point."""
    torch.set_num_threads(cell.threads)
    done = read_cell(cell)
    if done is not None:
        return done
    federation = build_cell_federation(cell)
    config = cell_config(cell, federation)
    if cell.method == CENTRALIZED:
        result = run_centralized(config, federation)
    else:
        result = run_simulation(config, federation=federation, on_round=_heartbeat(cell, config))
    document = result.to_json()
    document["bench"] = {
        "suite": cell.suite,
        **cell.identity(),
        "federation": federation.metadata,
    }
    write_document(cell.path, document)
    return document


def _heartbeat(cell: Cell, config: SimConfig) -> Callable[[RoundRecord], None]:
    """A progress line on stderr at every quarter of a run (cells can take minutes)."""
    every = max(1, config.rounds // 4)

    def report(record: RoundRecord) -> None:
        if record.round % every == 0 and record.round < config.rounds:
            print(
                f"  {cell.scenario.name} {cell.method} seed {cell.seed}: round "
                f"{record.round}/{config.rounds}, {record.num_clusters} clusters",
                file=sys.stderr,
                flush=True,
            )

    return report


def centralized_epochs(config: SimConfig) -> int:
    """Epochs of the centralized bound: what a client trains in the run on average."""
    return max(1, round(config.fraction * config.rounds * config.train.epochs))


def run_centralized(
    config: SimConfig, federation: Federation, clock: Callable[[], float] = time.perf_counter
) -> SimResult:
    """Train one model per true group on the group's pooled training data; score clients.

    Every group starts from the run's initial model (``model_factory(0)``, as every
    strategy) and trains :func:`centralized_epochs` epochs with the run's optimiser. Each
    client is tested with its group's model; the clustering is the truth (ARI 1).
    """
    start = clock()
    device = select_device(config.device)
    template = build_model(config.model, federation.sample_shape, federation.n_classes)
    initial = model_factory(
        config.model, federation.sample_shape, federation.n_classes, config.seed
    )(0)
    train = replace(config.train, epochs=centralized_epochs(config))
    groups = sorted({c.group for c in federation.clients})
    weights: dict[int, np.ndarray[Any, np.dtype[np.float32]]] = {}
    losses: list[float] = []
    for group in groups:
        members = [c for c in federation.clients if c.group == group]
        pooled = Dataset(
            np.concatenate([c.train.x for c in members]),
            np.concatenate([c.train.y for c in members]),
        )
        seed = int(np.random.SeedSequence([config.seed, 7, group]).generate_state(1)[0])
        update = local_update(template, initial, pooled, train, seed, device)
        weights[group] = update.weights
        losses.append(update.train_loss)
    accuracy = {
        c.client_id: evaluate(template, weights[c.group], c.test, device=device).accuracy
        for c in federation.clients
    }
    record = RoundRecord(
        round=config.rounds,
        accuracy=mean_client_accuracy(list(accuracy.values())),
        num_clusters=len(groups),
        ari=1.0,
        purity=1.0,
        bytes_up=0,
        bytes_down=0,
        seconds=clock() - start,
        train_loss=float(np.mean(losses)),
        answered=len(federation.clients),
        failures=0,
    )
    return SimResult(
        config=config,
        federation=federation,
        history=[record],
        clusters={c.client_id: c.group for c in federation.clients},
        client_accuracy=accuracy,
        wall_seconds=clock() - start,
    )


def plan_cells(
    suite: Suite,
    *,
    out: Path,
    methods: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    scenarios: Sequence[str] | None = None,
    dataset: str | None = None,
    data_dir: str | None = None,
    threads: int = 1,
) -> list[Cell]:
    """Every cell of ``suite`` (restricted to ``methods``/``seeds``/``scenarios`` if given).

    Raises
    ------
    ValueError
        For an unknown method or a scenario the suite does not have.
    """
    chosen = list(suite.scenarios)
    if scenarios:
        names = [s.name for s in suite.scenarios]
        unknown = [s for s in scenarios if s not in names]
        if unknown:
            raise ValueError(
                f"suite {suite.name!r} has no scenario {', '.join(unknown)}; its scenarios are "
                f"{', '.join(names)}"
            )
        chosen = [s for s in chosen if s.name in scenarios]
    for method in methods or ():
        check_method(method)
    return [
        Cell(
            suite.name,
            scenario,
            method,
            seed,
            dataset or scenario.dataset,
            data_dir,
            out,
            threads,
        )
        for scenario in chosen
        for seed in (seeds or suite.seeds)
        for method in (methods or scenario.methods)
    ]


def check_cells(cells: Sequence[Cell]) -> None:
    """Build every scenario's federation once (first seed) before any cell runs.

    A missing dataset, or a dataset a scenario cannot be built from (too few samples or
    classes), then stops the suite at once instead of inside a worker hours later.

    Raises
    ------
    ValueError
        Naming the scenario and dataset; a :class:`DatasetError` for missing files.
    """
    seen: set[tuple[str, str, str | None]] = set()
    for cell in cells:
        key = (cell.scenario.name, cell.dataset, cell.data_dir)
        if key in seen:
            continue
        seen.add(key)
        try:
            build_cell_federation(cell)
        except DatasetError:
            raise
        except ValueError as exc:
            raise ValueError(
                f"scenario {cell.scenario.name!r} cannot be built from dataset "
                f"{cell.dataset!r}: {exc}"
            ) from exc


def default_jobs(threads: int) -> int:
    """Worker processes that keep every core busy with ``threads`` torch threads each."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // max(1, threads))


def run_cells(
    cells: Sequence[Cell],
    *,
    jobs: int = 1,
    report: Callable[[Cell, Document, int, int], None] | None = None,
) -> list[Document]:
    """Run ``cells`` (finished ones are read back) and return their documents in order.

    With ``jobs > 1`` the cells still to run go to that many worker processes (spawned, so
    every worker starts clean); ``report(cell, document, done, total)`` is called as each
    one finishes, in completion order.
    """
    documents: dict[int, Document] = {}
    pending: list[int] = []
    for index, cell in enumerate(cells):
        done = read_cell(cell)
        if done is not None:
            documents[index] = done
        else:
            pending.append(index)
    total = len(cells)

    def finish(index: int, document: Document) -> None:
        documents[index] = document
        if report is not None:
            report(cells[index], document, len(documents), total)

    if jobs <= 1 or len(pending) <= 1:
        for index in pending:
            try:
                document = run_cell(cells[index])
            except Exception as exc:
                raise CellError(cells[index], exc) from exc
            finish(index, document)
    else:
        _run_parallel(cells, pending, min(jobs, len(pending)), finish)
    return [documents[i] for i in range(total)]


def _run_parallel(
    cells: Sequence[Cell],
    pending: Iterable[int],
    jobs: int,
    finish: Callable[[int, Document], None],
) -> None:
    """Run ``pending`` cells in ``jobs`` spawned workers; the first failure cancels the rest.

    Cells already running when one fails are left to finish (their documents are written),
    queued ones are cancelled, then :class:`CellError` names the failed cell.
    """
    executor = ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"))
    try:
        futures: dict[Future[Document], int] = {
            executor.submit(run_cell, cells[i]): i for i in pending
        }
        while futures:
            finished, _ = wait(futures, return_when=FIRST_COMPLETED)
            for future in finished:
                index = futures.pop(future)
                try:
                    document = future.result()
                except Exception as exc:
                    raise CellError(cells[index], exc) from exc  # the finally cancels the rest
                finish(index, document)
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
