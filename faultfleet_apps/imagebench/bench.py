"""Run a benchmark suite: methods × scenarios × seeds, resumable, in parallel processes.

Every *cell* (scenario, method, seed) is one simulated run whose ``results.json`` (the
document of :meth:`~faultfleet_apps.simulation.runner.SimResult.to_json`, plus a ``bench``
section naming the suite, scenario and dataset) lands in
``OUT/<scenario>/<method>/seed<k>/``. A cell already written is read back instead of run,
so an interrupted suite resumes where it stopped; a cell written with other settings is an
error, never silently reused.

Methods are those of :mod:`faultfleet_apps.simulation.table` (``flacc``, ``ifca-K``,
``faacl-v1``, …) and two upper bounds that use the ground truth, as in FAACL's tables:

``fedavg-oracle``
    FedAvg inside the true groups (strategy ``fixed``, FAACL's "FedAvg (optimal)").
``centralized``
    One model per true group trained on the group's pooled training data (FAACL's
    "Centralize"), for as many epochs as a client trains in the federated run on average
    (``fraction × rounds × epochs``), so that the bound is not bought with extra compute.

This module runs cells, one after the other or in worker processes. What a cell is, its
settings and the check of a cell already on disk are in :mod:`faultfleet_apps.imagebench.cells`;
the centralized bound is :mod:`faultfleet_apps.imagebench.centralized`.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from multiprocessing import get_context

import torch

from faultfleet.errors import FaultfleetError, UsageError
from faultfleet_apps.imagebench.cells import Cell, build_cell_federation, cell_config, read_cell
from faultfleet_apps.imagebench.centralized import run_centralized
from faultfleet_apps.imagebench.suites import CENTRALIZED
from faultfleet_apps.progress import use_thread_lock
from faultfleet_apps.simulation.config import SimConfig
from faultfleet_apps.simulation.runner import RoundRecord, run_simulation
from faultfleet_apps.simulation.table import Document, write_document


class CellError(FaultfleetError):
    """A cell raised; the message names the cell, the cause and how to resume.

    Build one with :func:`cell_error`, which picks :class:`CellUsageError` when the cause
    is something the user can fix.
    """

    def __init__(self, cell: Cell, cause: BaseException) -> None:
        what = str(cause) if isinstance(cause, UsageError) else _described(cause)
        super().__init__(
            f"cell {cell.label} failed: {what}; finished cells are kept in {cell.out}, so "
            "the same command resumes once the cause is fixed"
        )
        self.cause = cause


class CellUsageError(CellError, UsageError):
    """A cell failed on something the user can fix (a dataset's files, a setting)."""


def cell_error(cell: Cell, cause: BaseException) -> CellError:
    """The error that reports ``cell`` failing on ``cause``."""
    kind = CellUsageError if isinstance(cause, UsageError) else CellError
    return kind(cell, cause)


def _described(cause: BaseException) -> str:
    return f"{type(cause).__name__}: {cause}"


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
                raise cell_error(cells[index], exc) from exc
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
    queued ones are cancelled, then :class:`CellError` names the failed cell. Workers ignore
    SIGINT: on Ctrl-C this process stops them (a cell's document is written whole or not at
    all) and lets the KeyboardInterrupt go on.
    """
    executor = ProcessPoolExecutor(
        max_workers=jobs, mp_context=get_context("spawn"), initializer=_ignore_interrupts
    )
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
                    raise cell_error(cells[index], exc) from exc  # the finally cancels the rest
                finish(index, document)
    except KeyboardInterrupt:
        # concurrent.futures has no public way to stop running workers before Python 3.14
        for process in list((executor._processes or {}).values()):
            process.terminate()
        raise
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


def _ignore_interrupts() -> None:
    """Worker initializer: Ctrl-C reaches the whole process group; the parent handles it.

    tqdm (which torch.fx uses) would otherwise create a multiprocessing lock, a named
    semaphore that a worker stopped mid-cell leaves for the resource tracker to warn about;
    a worker draws no progress bars, so a thread lock does.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    use_thread_lock()
