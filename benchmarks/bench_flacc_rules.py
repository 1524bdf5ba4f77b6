"""CPU time of FLACC's server step under each merge rule, on recordings of its clustering phase.

Usage: python benchmarks/bench_flacc_rules.py REC.json [REC.json ...] [--repeats 3]

Replays each recording written by ``record_flacc_similarity.py`` (per round, the clients
that answered and the cosines of their updates) through ``FLACC.cluster_step`` with
``rule=cohesion`` (the default) and ``rule=paper`` (Algorithm 1), the paper profile's
α0 = 0, T = 10 and N_sep = 10, until separation, and prints the CPU seconds
(``time.process_time``, so a busy machine does not inflate them) that the steps took in
all, the best of ``--repeats``. A run's wall time is the clients' training plus this step,
so the difference between the two rules bounds what the rule adds to a run. Numbers only.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from quality_separation import clustering_rounds

from coordinator.strategies.flacc import FLACC
from coordinator.strategies.flacc_parameters import RULES


def step_seconds(document: dict[str, Any], rule: str) -> tuple[int, float]:
    """Rounds replayed before separation and the CPU seconds of their ``cluster_step``."""
    strategy = FLACC(alpha0=0.0, n_sep=10, memory=10, rule=rule)
    seconds, rounds = 0.0, 0
    for server_round, answered, cosine in clustering_rounds(strategy, document):
        start = time.process_time()
        strategy.cluster_step(server_round, answered, cosine)
        seconds += time.process_time() - start
        rounds += 1
    return rounds, seconds


def main() -> None:
    """Parse the command line and print one line per recording and rule."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recordings", nargs="+", type=Path, help="record_flacc_similarity output")
    parser.add_argument("--repeats", type=int, default=3, help="replays per rule; the best kept")
    args = parser.parse_args()
    print(f"{'recording':<28} {'rule':<9} {'rounds':>6} {'cpu_ms':>8}")
    for path in args.recordings:
        document = json.loads(path.read_text(encoding="utf-8"))
        for rule in RULES:
            runs = [step_seconds(document, rule) for _ in range(args.repeats)]
            rounds = runs[0][0]
            best = min(seconds for _, seconds in runs)
            print(f"{path.name:<28} {rule:<9} {rounds:>6} {best * 1000:>8.1f}")


if __name__ == "__main__":
    main()
