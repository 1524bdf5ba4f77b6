"""Throughput of ``sliding_windows`` against numpy's ``sliding_window_view`` baseline.

Run as ``python benchmarks/bench_windowing.py [--repeats N]``. For each signal length,
window length and stride, both implementations cut the same float32 signal (their outputs
are checked to be equal), each is timed ``--repeats`` times with ``time.perf_counter``, and
the median is reported as windows per second and MB per second of output written. The
ratio is ours / baseline throughput: higher is better, and the target is >= 0.8.

This is a benchmark, not a test: it prints numbers and never fails on a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from faultfleet.types import FloatArray
from signal_pipeline.windowing import sliding_windows

FS_HZ = 12_000
DURATIONS_S = (10, 60, 600)
WINDOW_LENGTHS = (1024, 2048)

Windower = Callable[[FloatArray, int, int], FloatArray]


def baseline(signal: FloatArray, window_length: int, stride: int) -> FloatArray:
    """numpy's sliding_window_view, every ``stride``-th row, copied."""
    return sliding_window_view(signal, window_length)[::stride].copy()


def median_seconds(
    windowers: tuple[Windower, Windower],
    signal: FloatArray,
    window_length: int,
    stride: int,
    repeats: int,
) -> tuple[float, float]:
    """Median wall time, in seconds, of ``repeats`` calls of each of two windowers.

    Calls are interleaved, the first of each pair alternating, after one warm-up call
    each, so allocator state and clock drift affect both alike.
    """
    times: tuple[list[float], list[float]] = ([], [])
    for windower in windowers:
        windower(signal, window_length, stride)
    for repeat in range(repeats):
        order = (0, 1) if repeat % 2 == 0 else (1, 0)
        for which in order:
            start = time.perf_counter()
            windowers[which](signal, window_length, stride)
            times[which].append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, run every configuration and print the table."""
    parser = argparse.ArgumentParser(
        description="Throughput of sliding_windows vs sliding_window_view."
    )
    parser.add_argument("--repeats", type=int, default=7, help="timings per measurement")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    rows = []
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")

    rng = np.random.default_rng(0)
    header = (
        f"{'signal_s':>8} {'L':>5} {'stride':>6} {'windows':>8} "
        f"{'ours_win/s':>11} {'ours_MB/s':>10} {'base_win/s':>11} {'base_MB/s':>10} "
        f"{'ratio':>6}"
    )
    print(f"median of {args.repeats} runs, fs = {FS_HZ} Hz, float32, MB = 1e6 bytes written")
    print(header)
    print("-" * len(header))
    for duration_s in DURATIONS_S:
        signal = rng.standard_normal(duration_s * FS_HZ).astype(np.float32)
        for window_length in WINDOW_LENGTHS:
            for stride in (window_length, window_length // 2):
                ours = sliding_windows(signal, window_length, stride)
                if not np.array_equal(ours, baseline(signal, window_length, stride)):
                    raise AssertionError(f"outputs differ for L={window_length}, {stride=}")
                n_windows = ours.shape[0]
                megabytes = ours.nbytes / 1e6
                del ours
                t_ours, t_base = median_seconds(
                    (sliding_windows, baseline), signal, window_length, stride, args.repeats
                )
                print(
                    f"{duration_s:>8} {window_length:>5} {stride:>6} {n_windows:>8} "
                    f"{n_windows / t_ours:>11.3g} {megabytes / t_ours:>10.0f} "
                    f"{n_windows / t_base:>11.3g} {megabytes / t_base:>10.0f} "
                    f"{t_base / t_ours:>6.2f}"
                )
                rows.append(
                    {
                        "signal_s": duration_s,
                        "window_length": window_length,
                        "stride": stride,
                        "ours_windows_per_s": n_windows / t_ours,
                        "baseline_windows_per_s": n_windows / t_base,
                        "ratio": t_base / t_ours,
                    }
                )
    if args.json is not None:
        args.json.write_text(json.dumps({"benchmark": "windowing", "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
