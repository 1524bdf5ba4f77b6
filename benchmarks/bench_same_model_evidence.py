"""IFCA's and FAACL's same-model evidence at 1,000 to 20,000 agents: time, memory, state size.

Usage: python benchmarks/bench_same_model_evidence.py --agents 1000 5000 10000
       [--rounds 12] [--models 4] [--fraction 0.25] [--seed 0]

IFCA and FAACL keep, as the evidence of their clusters, the cosine of every two clients'
updates of the same model in the same round (``coordinator.strategies.evidence.
SameModelSimilarity``). Each round here, a seeded ``fraction`` of the agents answers, each
training one of ``models`` models (agent i trains model i mod ``models``) with a real
mixed-fault update perturbed per agent (``server_scale_updates.py``; generating them is not
timed). The comparer is the strategies' own under ``pairwise = "auto"``: sketches from
1,000 agents on.

Per N, in a fresh process on one core (one BLAS thread), the CPU seconds of recording a
round (mean and worst over the rounds), of building the evidence and assessing it after the
last round (``assess(evidence)``: what the coordinator's quality watch does after every
round), the process's peak RSS (``VmHWM``) and the bytes of the evidence in a saved state.
Numbers only, no pass/fail.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from process_memory import own_peak_rss_bytes, run_json_worker
from server_scale_updates import SyntheticFleet, recorded_updates

from coordinator.strategies.evidence import SameModelSimilarity
from coordinator.strategies.pairwise import comparer_for
from coordinator.strategies.quality import assess
from faultfleet.tasks import FitResult

MB = 1024 * 1024
CACHE = Path(tempfile.gettempdir()) / "faultfleet-bench" / "server-scale-updates.npz"


def worker(args: argparse.Namespace) -> None:
    """One fleet size: print a JSON line with the timings, peak RSS and state size."""
    recorded = recorded_updates(args.cache)
    n = args.worker_agents
    fleet = SyntheticFleet(recorded, n, seed=args.seed)
    ids = [f"a{i:05d}" for i in range(n)]
    comparer = comparer_for("auto", recorded.base.size, n, seed=args.seed)
    evidence = SameModelSimilarity(ids, comparer)
    rng = np.random.default_rng(args.seed)
    answering = max(2, round(args.fraction * n))
    records = []
    for server_round in range(1, args.rounds + 1):
        agents = np.sort(rng.choice(n, size=answering, replace=False))
        deltas = [fleet.delta(int(a)) for a in agents]
        results = [
            FitResult(ids[a], f"m{a % args.models}", d, d, 100, 0.5)
            for a, d in zip(agents, deltas, strict=True)
        ]
        started = time.process_time()
        evidence.record(server_round, results)
        records.append(time.process_time() - started)
        del results, deltas
    started = time.process_time()
    found = evidence.evidence([i % args.models for i in range(n)], merge_measure="n/a")
    built = time.process_time() - started
    started = time.process_time()
    assess(found)
    assessed = time.process_time() - started
    saved = evidence.arrays("same_model_")
    line = {
        "agents": n,
        "updates": answering,
        "record_seconds": records,
        "evidence_seconds": built,
        "assess_seconds": assessed,
        "peak_rss_mb": own_peak_rss_bytes() / MB,
        "state_mb": sum(a.nbytes for a in saved.values()) / MB,
    }
    print(json.dumps(line))


def run_worker(args: argparse.Namespace, agents: int) -> dict[str, object]:
    """Run one fleet size in a fresh process on one BLAS thread; its JSON line."""
    arguments = ["--worker-agents", str(agents), "--rounds", str(args.rounds)]
    arguments += ["--models", str(args.models), "--fraction", str(args.fraction)]
    arguments += ["--seed", str(args.seed), "--cache", str(args.cache)]
    return run_json_worker(__file__, arguments, 1, f"worker at {agents} agents")


def main() -> None:
    """Parse the command line; run every fleet size; print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--models", type=int, default=4)
    parser.add_argument("--fraction", type=float, default=0.25)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--worker-agents", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker_agents is not None:
        worker(args)
        return
    print("command: python " + " ".join(sys.argv), flush=True)
    print(f"{args.rounds} rounds, {args.models} models, fraction {args.fraction}", flush=True)
    print(
        f"{'agents':>7} {'updates':>7} {'record s':>9} {'worst':>7} {'evidence':>9} "
        f"{'assess':>7} {'RSS MB':>7} {'state MB':>9}",
        flush=True,
    )
    for agents in args.agents:
        row = run_worker(args, agents)
        records = [float(s) for s in row["record_seconds"]]  # type: ignore[attr-defined]
        print(
            f"{agents:>7} {row['updates']:>7} {np.mean(records):>9.3f} {max(records):>7.3f} "
            f"{row['evidence_seconds']:>9.3f} {row['assess_seconds']:>7.2f} "
            f"{row['peak_rss_mb']:>7.0f} {row['state_mb']:>9.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
