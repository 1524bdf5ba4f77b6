"""Compute lanes: a round's clients shared among worker threads of one torch thread each.

On the CPU, one computation on two torch threads is slower than two computations on one
thread each whenever the operators are small: every operator wakes the second thread and
waits for it, and under passive OpenMP waiting (what the command line sets, so that a busy
machine does not collapse, :mod:`faultfleet_apps.cli`) each wake-up costs a system call.
Flower's simulation gets its speed from the second way (one single-threaded actor per
core), and so does the simulator: :class:`Lanes` splits the clients of a task list among
``count`` lanes of near-equal work and runs the lanes side by side, each on its own
thread with one torch thread. Torch releases the GIL inside its operators, so the lanes
compute in parallel; only the Python between operators takes turns.

Measured on the 2-core development machine with ``OMP_WAIT_POLICY=PASSIVE python
benchmarks/bench_round_training.py --threads 2`` (one round, E = 5, B = 32, Adam; in
``docs/federated.md``, *Threads* and *Against Flower and a bare loop*):

* ``compact``, 12 clients, medians of 3: batched 2.72 s on 2 torch threads, 2.17 s in 2
  lanes; sequential 5.42 s and 2.94 s. With two busy-loop processes on the two cores:
  batched 3.42 s and 4.44 s (lanes lose: a lane descheduled while it holds the GIL stalls
  the other), sequential 10.31 s and 5.51 s;
* ``paper``, 4 clients, one run: sequential 36.03 s on 2 torch threads, 26.45 s in 2 lanes.

Each lane has its own copy of the model (the models are called functionally, but the paths
switch them between training and evaluation modes, and the sequential one loads weights
into them). Whatever patches torch for the whole process must not run beside a computing
lane: ``torch.fx`` tracing, which the batched path uses, replaces every module's
``__call__`` while it runs, so the lanes' models are traced once, one after the other,
before any lane computes (``prepare``). A client's answer depends only on its
own task and data: on the sequential path it is the same, bit for bit, in any lane; on the
batched path its batch companions change with the split, which changes float rounding
only. The split itself is deterministic (:func:`partition`), so a seeded run gives the same
result every time with the same number of lanes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch
from torch import nn

from edge_agent.executor import ClientExecutor

AnswerT = TypeVar("AnswerT")

LaneWork = Callable[[nn.Module, list[int]], Mapping[int, AnswerT]]
"""What one lane computes: (its model, its positions) -> answers by position."""


def partition(loads: Mapping[int, int], count: int) -> list[list[int]]:
    """Positions shared among at most ``count`` lanes of near-equal total load.

    Longest processing time first: positions by load, heaviest first (ties by position),
    each to the lane with the least load so far (ties to the lowest lane). Deterministic;
    no lane is empty, each lane's positions are in ascending order.

    Parameters
    ----------
    loads : mapping of position to load
        The work of each position, e.g. its client's training windows; at least 0.
    count : int
        Lanes available, at least 1.

    Raises
    ------
    ValueError
        ``count`` is below 1 or a load is negative.
    """
    if count < 1:
        raise ValueError(f"lanes must be at least 1, got {count}")
    negative = sorted(p for p, load in loads.items() if load < 0)
    if negative:
        raise ValueError(f"loads must be at least 0; positions {negative} are negative")
    lanes: list[list[int]] = [[] for _ in range(min(count, len(loads)))]
    totals = [0] * len(lanes)
    for position in sorted(loads, key=lambda p: (-loads[p], p)):
        lightest = totals.index(min(totals))
        lanes[lightest].append(position)
        totals[lightest] += loads[position]
    return [sorted(lane) for lane in lanes]


class Lanes:
    """``count`` lanes, each with its own copy of ``model``; the first holds ``model`` itself.

    Parameters
    ----------
    model : torch module
        The architecture every lane computes with.
    count : int
        Lanes, at least 1. With one, :meth:`run` computes in the calling thread with its
        torch threads, as if there were no lanes.
    prepare : callable, optional
        Called with each lane's model, one after the other in this thread, before any lane
        computes: for work that must not run beside a computing lane, such as tracing a
        model with ``torch.fx`` (which patches every module's ``__call__`` while it runs),
        e.g. :func:`~faultfleet_apps.simulation.stacked_forward.stacked_step_function`.
    """

    def __init__(
        self, model: nn.Module, count: int, prepare: Callable[[nn.Module], object] | None = None
    ) -> None:
        if count < 1:
            raise ValueError(f"lanes must be at least 1, got {count}")
        self.models = [model] + [copy.deepcopy(model) for _ in range(count - 1)]
        if prepare is not None and count > 1:
            for lane_model in self.models:
                prepare(lane_model)

    @property
    def count(self) -> int:
        """How many lanes there are."""
        return len(self.models)

    def run(self, loads: Mapping[int, int], work: LaneWork[AnswerT]) -> dict[int, AnswerT]:
        """``work`` for every position of ``loads``, the positions split among the lanes
        (:func:`partition`); the answers of all lanes by position.

        With more than one lane in use, each lane runs on a worker thread with one torch
        thread, and the calling thread's torch threads are restored afterwards. An
        exception in a lane is raised here once every lane has finished.
        """
        parts = partition(loads, self.count)
        if len(parts) <= 1:
            return dict(work(self.models[0], parts[0] if parts else []))
        threads = torch.get_num_threads()
        try:
            with ThreadPoolExecutor(
                len(parts),
                thread_name_prefix="lane",
                initializer=torch.set_num_threads,
                initargs=(1,),
            ) as pool:
                futures = [
                    pool.submit(work, model, part)
                    for model, part in zip(self.models, parts, strict=False)
                ]
                answers: dict[int, AnswerT] = {}
                for future in futures:
                    answers.update(future.result())
        finally:
            torch.set_num_threads(threads)  # a lane's setting is also torch's default
        return answers

    @staticmethod
    def executor(executor: ClientExecutor, model: nn.Module) -> ClientExecutor:
        """``executor``'s client computing with ``model`` (``executor`` itself if it already
        does); executors hold no state but their client's data."""
        if executor.model is model:
            return executor
        return ClientExecutor(
            executor.data,
            model,
            sample_shape=executor.sample_shape,
            n_classes=executor.n_classes,
            device=executor.device,
        )
