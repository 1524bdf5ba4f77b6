"""Who gains from pooling clean and poor sensors? The premise of FAACL's A1 on our rig.

Usage: python benchmarks/bench_sensor_quality.py [--noise-db 6 12 16] [--bits 3]
       [--seeds 0 1] [--clients-per-group 4] [--epochs 10] [--threads 1]

FAACL's data-quality case (A1) rests on an asymmetry: devices with noisy data gain from the
clean devices' data, the clean devices lose from the noisy data, and the clean model works
on noisy data (so the clean cluster *supports* the noisy one). This builds ``quality-skew``
(:func:`signal_pipeline.asymmetric.quality_skew`) for each sensor degradation and, in every
fault group, trains the 1-D CNN of ``bench_difficulty.py`` on the clean machines alone, on
the noisy ones alone and on all of them pooled. Printed per setting, mean test accuracy
over the groups and seeds:

* clean machines: their own model, the pooled model (pooling hurts them if lower);
* noisy machines: their own model, the pooled model (pooling helps them if higher), and
  the clean model (FAACL's support test asks whether this is within ε of their own);
* the noisy model on the clean machines (the reverse support).

The accuracy of two-class groups is 0.5 by chance.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from bench_difficulty import accuracy, train

from signal_pipeline.asymmetric import quality_skew
from signal_pipeline.federation import ClientData

COLUMNS = (
    "clean: own",
    "clean: pooled",
    "noisy: own",
    "noisy: pooled",
    "noisy: clean model",
    "clean: noisy model",
)


def measure(noise_db: float, bits: int, seed: int, args: argparse.Namespace) -> list[float]:
    """The six accuracies of :data:`COLUMNS`, averaged over the fault groups."""
    federation = quality_skew(
        seed,
        clients_per_group=args.clients_per_group,
        windows_per_client=(150, 250),
        noise_db=noise_db,
        bits=bits,
    )
    listed = federation.metadata["low_quality"]
    assert isinstance(listed, list)
    low = {str(c) for c in listed}
    scale = float(np.concatenate([c.train.x.ravel() for c in federation.clients]).std())

    def fit(clients: list[ClientData]) -> torch.nn.Module:
        x = np.concatenate([c.train.x for c in clients])
        y = np.concatenate([c.train.y for c in clients])
        return train(x, y, args.epochs, scale, seed)

    def score(model: torch.nn.Module, clients: list[ClientData]) -> float:
        return statistics.fmean(accuracy(model, c.test, scale) for c in clients)

    rows = []
    for group in sorted(set(federation.groups.tolist())):
        members = [c for c in federation.clients if c.group == group]
        clean = [c for c in members if c.client_id not in low]
        noisy = [c for c in members if c.client_id in low]
        clean_model, noisy_model, pooled = fit(clean), fit(noisy), fit(members)
        rows.append(
            [
                score(clean_model, clean),
                score(pooled, clean),
                score(noisy_model, noisy),
                score(pooled, noisy),
                score(clean_model, noisy),
                score(noisy_model, clean),
            ]
        )
    return [float(v) for v in np.mean(rows, axis=0)]


def main() -> None:
    """Print one table row per sensor setting."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise-db", type=float, nargs="+", default=[6.0, 12.0, 16.0])
    parser.add_argument("--bits", type=int, nargs="+", default=[3])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--clients-per-group", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"| noise (dB) | bits | {' | '.join(COLUMNS)} | seconds |")
    print("|---|---|" + "---|" * (len(COLUMNS) + 1))
    for noise_db in args.noise_db:
        for bits in args.bits:
            start = time.perf_counter()
            runs = [measure(noise_db, bits, seed, args) for seed in args.seeds]
            means = np.mean(runs, axis=0)
            cells = " | ".join(f"{v:.3f}" for v in means)
            print(f"| {noise_db:g} | {bits} | {cells} | {time.perf_counter() - start:.0f} |")


if __name__ == "__main__":
    main()
