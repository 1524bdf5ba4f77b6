"""Local training of one federated round: a loop of clients vs one vectorised computation.

Usage: python benchmarks/bench_round_training.py [--repeats 3] [--threads 2] [--clients 12]
       [--model compact] [--max-group N] [--device cpu|cuda]

Builds ``--clients`` clients holding 200–450 random windows of shape (1, 1024) with 12
classes, and trains each from the same ``compact`` zoo model for E = 5 epochs, B = 32 with
Adam at 5e-4 (FLACC §VI), on the CPU with ``--threads`` torch threads (with ``--device
cuda``: on the GPU with deterministic kernels, as agents and the simulator train there, and
on the CPU too, so that the printed GPU / CPU ratios come from one run):

* sequential: :func:`edge_agent.training.local_update` once per client (``torch.optim``);
* batched: :func:`faultfleet_apps.simulation.batched_training.batched_local_update`;
* on the CPU with ``--threads`` above 1, both again in that many lanes of one torch thread
  each (:mod:`faultfleet_apps.simulation.lanes`, what the simulator does on the CPU).

Prints the median wall time of ``--repeats`` runs of each, the training throughput in
samples per second (samples × epochs / seconds), the ratio batched / sequential, each
path's speed-up in lanes, and the largest difference between the two paths' weights.
Random labels give near-zero gradients whose rounding Adam's normalisation can amplify, so
that difference is informative only; the equality tests use a learnable problem.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from edge_agent.batching import select_device
from edge_agent.training import LocalUpdate, local_update
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.tasks import TrainConfig
from faultfleet_apps.simulation.batched_training import batched_local_update
from faultfleet_apps.simulation.lanes import Lanes
from faultfleet_apps.simulation.stacked_forward import stacked_step_function
from signal_pipeline.federation import Dataset

SAMPLE_SHAPE = (1, 1024)
N_CLASSES = 12
SAMPLES_PER_CLIENT = (200, 450)


def median_seconds(
    run: Callable[[], list[LocalUpdate]], repeats: int
) -> tuple[float, float, list[LocalUpdate]]:
    """Median wall and process-CPU seconds of ``repeats`` calls of ``run``, and a result.

    CPU seconds (all threads together) say more than wall time on a shared machine.
    """
    walls, cpus, result = [], [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        result = run()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), result


def main() -> None:
    """Run the benchmark and print its numbers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--model", default="compact")
    parser.add_argument("--max-group", type=int, default=None)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here (CPU build or no GPU)")
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    sizes = rng.integers(SAMPLES_PER_CLIENT[0], SAMPLES_PER_CLIENT[1] + 1, args.clients)
    datasets = [
        Dataset(
            rng.standard_normal((n, *SAMPLE_SHAPE)).astype(np.float32),
            rng.integers(0, N_CLASSES, n).astype(np.int64),
        )
        for n in sizes
    ]
    model = build_model(args.model, SAMPLE_SHAPE, N_CLASSES, seed=0)
    weights = [flatten_weights(model)] * args.clients
    seeds = list(range(args.clients))
    config = TrainConfig("adam", 5e-4, epochs=5, batch_size=32)
    samples = int(sizes.sum()) * config.epochs
    print(
        f"model {args.model}, {args.clients} clients, {int(sizes.sum())} windows of "
        f"{SAMPLE_SHAPE}, E={config.epochs}, B={config.batch_size}, Adam {config.learning_rate:g}"
    )

    def measure(device: torch.device) -> tuple[float, float]:
        """Print one device's rows; return its sequential and batched wall seconds."""

        def sequential() -> list[LocalUpdate]:
            return [
                local_update(model, w, d, config, s, device)
                for w, d, s in zip(weights, datasets, seeds, strict=True)
            ]

        def batched() -> list[LocalUpdate]:
            return batched_local_update(
                model, weights, datasets, config, seeds, device, args.max_group
            )

        warm_up = TrainConfig("adam", 5e-4, epochs=1, batch_size=32)
        local_update(model, weights[0], datasets[0], warm_up, 0, device)
        batched_local_update(model, weights[:2], datasets[:2], warm_up, seeds[:2], device)
        lanes = Lanes(model, args.threads, prepare=stacked_step_function)
        loads = {i: len(d) for i, d in enumerate(datasets)}

        def in_lanes(
            path: Callable[[nn.Module, list[int]], list[LocalUpdate]],
        ) -> list[LocalUpdate]:
            answers = lanes.run(loads, lambda m, part: dict(zip(part, path(m, part), strict=True)))
            return [answers[i] for i in range(len(datasets))]

        def sequential_lanes() -> list[LocalUpdate]:
            return in_lanes(
                lambda m, part: [
                    local_update(m, weights[i], datasets[i], config, seeds[i], device) for i in part
                ]
            )

        def batched_lanes() -> list[LocalUpdate]:
            return in_lanes(
                lambda m, part: batched_local_update(
                    m,
                    [weights[i] for i in part],
                    [datasets[i] for i in part],
                    config,
                    [seeds[i] for i in part],
                    device,
                    args.max_group,
                )
            )

        where = "cuda" if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
        print(f"\n{where}, median of {args.repeats} runs")
        rows = [("sequential", sequential), ("batched", batched)]
        if device.type == "cpu" and args.threads > 1:
            rows += [("seq lanes", sequential_lanes), ("bat lanes", batched_lanes)]
        print(f"{'path':<12}{'wall_s':>9}{'cpu_s':>9}{'samples/s':>12}")
        timed = {}
        for name, run in rows:
            wall, cpu, updates = median_seconds(run, args.repeats)
            timed[name] = (wall, cpu, updates)
            print(f"{name:<12}{wall:>9.2f}{cpu:>9.2f}{samples / wall:>12.0f}")
        (seq_seconds, seq_cpu, seq_updates), (bat_seconds, bat_cpu, bat_updates) = (
            timed["sequential"],
            timed["batched"],
        )
        print(
            f"throughput ratio batched / sequential: {seq_seconds / bat_seconds:.2f}x wall, "
            f"{seq_cpu / bat_cpu:.2f}x cpu"
        )
        if "seq lanes" in timed:
            print(
                f"speed-up in {lanes.count} lanes: sequential "
                f"{seq_seconds / timed['seq lanes'][0]:.2f}x, batched "
                f"{bat_seconds / timed['bat lanes'][0]:.2f}x"
            )
        difference = max(
            float(np.abs(a.weights - b.weights).max())
            for a, b in zip(seq_updates, bat_updates, strict=True)
        )
        print(f"largest |weight difference| between the paths: {difference:.2e}")
        return seq_seconds, bat_seconds

    # The CPU first: selecting CUDA switches on deterministic kernels for the whole process.
    cpu_seq, cpu_bat = measure(torch.device("cpu"))
    if args.device == "cuda":
        gpu_seq, gpu_bat = measure(select_device("cuda"))
        print(
            f"\nthroughput ratio cuda / cpu: sequential {cpu_seq / gpu_seq:.2f}x, "
            f"batched {cpu_bat / gpu_bat:.2f}x"
        )


if __name__ == "__main__":
    main()
