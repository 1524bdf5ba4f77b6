"""How many torch threads a process computes with, so that the cores it may use are never
oversubscribed.

PyTorch sizes its intra-op thread pool from the machine, not from what else runs on it. Two
processes that each take every core, or one process whose threads spin-wait at every
operator while another program holds a core, can run many times slower than one thread
would: on the shared 2-core development machine one ``faultfleet sim`` of the mixed-fault
workload took 382 s with 2 torch threads against 57 s with 1. One rule, used by every
command that trains:

1. An explicit request wins: the command's ``--threads``, else the ``OMP_NUM_THREADS``
   environment variable when it holds a positive whole number (the convention of OpenMP
   and of torch itself). A request that oversubscribes is honoured and logged as a warning.
2. Otherwise the cores this process may run on (``os.sched_getaffinity``: a container's or
   ``taskset``'s limit, not the machine's core count) are shared evenly among the
   ``workers`` that compute side by side: ``max(1, cores // workers)``.

What counts as a worker:

* ``faultfleet sim``: one; on the CPU it turns its threads into as many lanes of one thread
  each, which train the round's clients side by side
  (:mod:`faultfleet_apps.simulation.lanes`).
* ``faultfleet bench``: each of the ``--jobs`` worker processes.
* ``faultfleet agent``: one per process, however many ``--machines`` it runs, because the
  agents of a process take turns at the compute (:mod:`edge_agent.compute_turns`); a host
  that runs several agent processes says so with ``--threads`` (``faultfleet demo`` does).

Threads beyond the first only pay if they do not spin while a busy machine has
descheduled their partner: the command line sets ``OMP_WAIT_POLICY=PASSIVE`` before torch
loads OpenMP (:mod:`faultfleet_apps.cli`, where the measurement is).

Passive waiting makes every wake-up of a second thread a system call, which small models
cannot repay: their operators on a batch of 32 windows are too short. So training takes
one thread for a model of at most :data:`SINGLE_THREAD_MAX_PARAMETERS` parameters, unless a
thread count was asked for (:class:`TrainingThreads`). Measured with
``OMP_WAIT_POLICY=PASSIVE python benchmarks/bench_round_training.py --threads N`` on the
2-core development machine (its sequential row, the agent's way of training; one round of
12 ``compact`` clients, 60,432 parameters, E = 5), three interleaved runs of each: 4.83,
4.43 and 4.53 s on one thread against 4.53, 5.00 and 5.88 s on two, with 20-40 % less CPU
time; with two busy-loop processes on the two cores, 7.93 and 8.06 s against 11.28 and
11.49 s. An earlier set gave 4.69 s against 9.00 s (medians of 3). The ``paper`` model
(4,409,036 parameters), one epoch of 400 windows through ``local_update``: 2.90 s on one
thread against 1.99 s on two. The simulator takes the other way to use the cores:
one lane per thread, each on one thread (:mod:`faultfleet_apps.simulation.lanes`).

The decision is the pure :func:`torch_threads`; :func:`decide_threads` reads the cores and
the environment and decides, :func:`set_torch_threads` sets torch's pool, and
:func:`apply_thread_policy` does both. ``faultfleet agent`` decides at its start
(:func:`decide_training_threads`) and sets the pool as each task's turn begins, by the
task's model (:class:`edge_agent.task_runner.TaskRunner`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

logger = logging.getLogger(__name__)

THREADS_VARIABLE = "OMP_NUM_THREADS"
"""The environment variable read as an explicit request when no ``--threads`` is given."""


SINGLE_THREAD_MAX_PARAMETERS = 1_000_000
"""Training models of at most this many parameters takes one torch thread unless a count
was asked for: between the two models measured (module docstring)."""


@dataclass(frozen=True)
class TrainingThreads:
    """Torch threads for a training task, by the size of its model.

    Attributes
    ----------
    threads : int
        The process's decision (:func:`decide_threads`), used for large models.
    requested : bool
        Whether ``threads`` was asked for (``--threads``, ``OMP_NUM_THREADS``); then it is
        used for every model.
    """

    threads: int
    requested: bool

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ValueError(f"threads must be at least 1, got {self.threads}")

    def for_model(self, parameters: int) -> int:
        """Threads for a model of ``parameters`` parameters: one for a model of at most
        :data:`SINGLE_THREAD_MAX_PARAMETERS` unless threads were requested, else
        :attr:`threads`."""
        if self.requested or parameters > SINGLE_THREAD_MAX_PARAMETERS:
            return self.threads
        return 1


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity where the platform reports one,
    otherwise the machine's count (at least 1)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def requested_threads(option: int | None, environ: Mapping[str, str]) -> int | None:
    """The explicit thread request: ``option`` (``--threads``) if given, else
    ``OMP_NUM_THREADS`` from ``environ`` when it is a positive whole number, else None.

    Raises
    ------
    ValueError
        ``option`` is below 1.
    """
    if option is not None:
        if option < 1:
            raise ValueError(f"threads must be at least 1, got {option}")
        return option
    raw = environ.get(THREADS_VARIABLE, "").strip()
    if raw.isdigit() and int(raw) >= 1:
        return int(raw)
    return None


def torch_threads(*, cores: int, workers: int = 1, requested: int | None = None) -> int:
    """Intra-op threads for each of ``workers`` computations running side by side.

    Parameters
    ----------
    cores : int
        Cores the process (or the group of worker processes) may use, at least 1.
    workers : int
        Computations that run at the same time on those cores (worker processes, Ray
        actors), at least 1.
    requested : int, optional
        An explicit request (:func:`requested_threads`); it wins.

    Returns
    -------
    int
        ``requested`` if given, else ``max(1, cores // workers)``.

    Raises
    ------
    ValueError
        ``cores``, ``workers`` or ``requested`` is below 1.
    """
    for name, value in (("cores", cores), ("workers", workers)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if requested is not None:
        if requested < 1:
            raise ValueError(f"requested threads must be at least 1, got {requested}")
        return requested
    return max(1, cores // workers)


def worker_plan(*, cores: int, jobs: int | None, threads: int | None) -> tuple[int, int]:
    """Worker processes and torch threads per worker for ``cores``; ``faultfleet bench``.

    Given neither, one single-threaded worker per core (cells side by side beat threads
    inside a cell for the small models of the suites). Given one, the other shares the
    cores: ``jobs = max(1, cores // threads)`` or ``threads = max(1, cores // jobs)``.
    Given both, both are kept.

    Returns
    -------
    (jobs, threads) : tuple of int

    Raises
    ------
    ValueError
        ``cores``, ``jobs`` or ``threads`` is below 1.
    """
    if jobs is None:
        per_worker = torch_threads(cores=cores, requested=threads or 1)
        return max(1, cores // per_worker), per_worker
    return jobs, torch_threads(cores=cores, workers=jobs, requested=threads)


def decide_threads(
    option: int | None = None,
    *,
    workers: int = 1,
    environ: Mapping[str, str] | None = None,
) -> int:
    """This process's torch threads (:func:`torch_threads`) from its cores and environment;
    a decision that oversubscribes the cores is logged as a warning.

    Parameters
    ----------
    option : int, optional
        The command's ``--threads``.
    workers : int
        Computations sharing this process's cores (see the module docstring).
    environ : mapping, optional
        Environment to read ``OMP_NUM_THREADS`` from; default ``os.environ``.
    """
    cores = usable_cores()
    requested = requested_threads(option, os.environ if environ is None else environ)
    threads = torch_threads(cores=cores, workers=workers, requested=requested)
    if threads * workers > cores:
        logger.warning(
            "%d torch thread(s) for each of %d worker(s) oversubscribe the %d core(s) this "
            "process may use; expect slow runs on a busy machine",
            threads,
            workers,
            cores,
        )
    logger.debug("torch threads: %d (%d core(s), %d worker(s))", threads, cores, workers)
    return threads


def decide_training_threads(
    option: int | None = None,
    *,
    workers: int = 1,
    environ: Mapping[str, str] | None = None,
) -> TrainingThreads:
    """This process's :class:`TrainingThreads`: :func:`decide_threads`, and whether the
    count was requested (``option`` or ``OMP_NUM_THREADS``)."""
    env = os.environ if environ is None else environ
    threads = decide_threads(option, workers=workers, environ=env)
    return TrainingThreads(threads, requested_threads(option, env) is not None)


def set_torch_threads(threads: int) -> None:
    """``torch.set_num_threads(threads)``, importing torch if it is not loaded yet."""
    import torch  # noqa: PLC0415 (the agent calls this at its first task)

    torch.set_num_threads(threads)


def apply_thread_policy(
    option: int | None = None,
    *,
    workers: int = 1,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Decide this process's torch threads (:func:`decide_threads`) and set them.

    Returns
    -------
    int
        The threads set with ``torch.set_num_threads``.
    """
    threads = decide_threads(option, workers=workers, environ=environ)
    set_torch_threads(threads)
    return threads
