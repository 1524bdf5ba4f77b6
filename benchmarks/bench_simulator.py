"""Simulator speed as a multiple of real time on one core.

Usage: python benchmarks/bench_simulator.py [--repeats 7] [--seconds 10]

For each sampling rate and a spread of conditions, simulates ``--seconds`` of signal
``--repeats`` times on one thread and prints the median wall time and the real-time factor
(signal seconds per wall-clock second). The target is >= 50x at 12 kHz.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

# One core: keep numpy/scipy's BLAS and FFT threads from using the others.
for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(variable, "1")

import numpy as np  # noqa: E402

from signal_pipeline.conditions import Condition  # noqa: E402
from signal_pipeline.machine import MachineProfile  # noqa: E402
from signal_pipeline.simulator import simulate  # noqa: E402

LABELS = (0, 5, 10, 16)


def main() -> None:
    """Run the benchmark and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args()
    rows = []
    machine = MachineProfile.sample(np.random.default_rng(0))
    print(f"median of {args.repeats} runs of {args.seconds:g} s of signal, one thread")
    print(f"{'fs_hz':>8} {'label':>6} {'condition':<24} {'wall_ms':>9} {'x_realtime':>11}")
    for fs_hz in (12_000.0, 25_600.0, 48_000.0):
        for label in LABELS:
            condition = Condition.from_label(label)
            simulate(condition, machine, 1.0, np.random.default_rng(0), fs_hz=fs_hz)  # warm-up
            times = []
            for repeat in range(args.repeats):
                start = time.perf_counter()
                simulate(
                    condition, machine, args.seconds, np.random.default_rng(repeat), fs_hz=fs_hz
                )
                times.append(time.perf_counter() - start)
            wall = statistics.median(times)
            print(
                f"{fs_hz:>8.0f} {label:>6} {condition.name:<24} {wall * 1e3:>9.1f} "
                f"{args.seconds / wall:>10.0f}x"
            )
            rows.append(
                {
                    "fs_hz": fs_hz,
                    "label": label,
                    "signal_s": args.seconds,
                    "wall_s": wall,
                    "x_realtime": args.seconds / wall,
                }
            )
    if args.json is not None:
        args.json.write_text(json.dumps({"benchmark": "simulator", "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
