"""What robust and differentially private averaging cost in accuracy, on simulated federations.

Usage: python benchmarks/bench_robust_aggregation.py --out bench-out/robust
       [--seeds 0 1 2 3 4] [--methods fedavg flacc] [--policies off default trim]
       [--profile quick] [--clip-norm 1.0] [--eval-every 40]

Runs every method (a strategy name, or a table method such as ``ifca-6``) under every
averaging policy on the same federation per seed, each cell a ``faultfleet sim`` run whose
``results.json`` lands in ``OUT/<policy>/<method>/seed<k>/`` (an interrupted benchmark
resumes). Policies (:mod:`coordinator.strategies.robust`):

* ``off``: the plain sample-weighted mean (every rule off);
* ``default``: the default policy (``DEFAULT_POLICY``: weight cap and adaptive clipping);
* ``trim``: the default with the coordinate-wise trimmed mean, β = 0.1;
* ``dp-S``: DP-FedAvg with noise multiplier S and clip norm ``--clip-norm``, no other rule.

Prints, per policy and method, the final accuracy (mean ± std over seeds, %), its paired
difference to ``off`` seed by seed (mean and worst), the ARI, the updates clipped and capped
per run, and ε for the private policies. Numbers only, no pass/fail.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from coordinator.strategies.robust import DEFAULT_POLICY, AggregationPolicy
from faultfleet_apps.simulation.runner import build_federation
from faultfleet_apps.simulation.table import mean_std, method_config, run_cell


def policy(name: str, clip_norm: float) -> AggregationPolicy:
    """The policy a benchmark name stands for."""
    if name == "off":
        return AggregationPolicy()
    if name == "default":
        return DEFAULT_POLICY
    if name == "trim":
        return replace(DEFAULT_POLICY, trim_fraction=0.1)
    if name.startswith("dp-"):
        return AggregationPolicy(noise_multiplier=float(name[3:]), clip_norm=clip_norm)
    raise SystemExit(f"unknown policy {name!r}: off, default, trim or dp-<sigma>")


def progress(name: str) -> Callable[[str], None]:
    """Progress lines of the cells of policy ``name``, on stderr."""

    def report(line: str) -> None:
        print(f"{name:>8} {line}", file=sys.stderr, flush=True)

    return report


def row(
    name: str, method: str, documents: list[dict[str, Any]], baseline: list[dict[str, Any]]
) -> str:
    """One markdown row: accuracy, paired difference to ``off``, ARI, clipping, ε."""
    accuracy = [100 * d["final"]["accuracy"] for d in documents]
    paired = [
        100 * (d["final"]["accuracy"] - b["final"]["accuracy"])
        for d, b in zip(documents, baseline, strict=True)
    ]
    clipped = statistics.fmean(d["aggregation"]["norm_clipped"] for d in documents)
    capped = statistics.fmean(d["aggregation"]["weight_capped"] for d in documents)
    epsilons = [d["privacy"]["epsilon"] for d in documents if d.get("privacy")]
    epsilon = f"{epsilons[0]:.3g}" if epsilons else "—"
    return (
        f"| {name} | {method} | {mean_std(accuracy)} | {statistics.fmean(paired):+.2f} "
        f"(worst {min(paired):+.2f}) | {mean_std([d['final']['ari'] for d in documents])} | "
        f"{clipped:.1f} / {capped:.1f} | {epsilon} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--methods", nargs="+", default=["fedavg", "flacc"])
    parser.add_argument("--policies", nargs="+", default=["off", "default", "trim"])
    parser.add_argument("--profile", choices=("paper", "quick"), default="quick")
    parser.add_argument("--scenario", default="mixed-fault")
    parser.add_argument(
        "--clip-norm",
        type=float,
        default=1.0,
        help="C of the dp-S policies (default 1.0: the median update norm of quick mixed-fault, "
        "seed 0, rounds 1-40)",
    )
    parser.add_argument(
        "--eval-every", type=int, default=40, help="evaluate every N rounds (and after the last)"
    )
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    names = ["off", *[p for p in args.policies if p != "off"]]
    documents: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for seed in args.seeds:
        federation = None
        for method in args.methods:
            for name in names:
                base = method_config(
                    method, profile_name=args.profile, scenario=args.scenario, seed=seed
                )
                config = replace(
                    base, aggregation=policy(name, args.clip_norm), eval_every=args.eval_every
                )
                if federation is None:
                    federation = build_federation(config)
                document = run_cell(
                    method,
                    config,
                    args.out / name,
                    federation=federation,
                    report=progress(name),
                )
                documents.setdefault((name, method), []).append(document)
    print(f"{args.scenario}, profile {args.profile}, seeds {args.seeds}")
    print(
        "| policy | method | accuracy % | vs off, paired (pts) | ARI | clipped / capped "
        "per run | ε |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in names:
        for method in args.methods:
            print(row(name, method, documents[name, method], documents["off", method]))


if __name__ == "__main__":
    main()
