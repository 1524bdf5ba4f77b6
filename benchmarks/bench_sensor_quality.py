"""Who gains from pooling clean and poor sensors? The premise of FAACL's A1 on our rig.

Usage: python benchmarks/bench_sensor_quality.py [--noise-db 6 12 16] [--bits 3]
       [--seeds 0 1] [--clients-per-group 4] [--epochs 10] [--paired] [--threads 1]

FAACL's data-quality case (A1) rests on an asymmetry: devices with noisy data gain from the
clean devices' data, the clean devices lose from the noisy data, and the clean model works
on noisy data (so the clean cluster *supports* the noisy one). This builds ``quality-skew``
(:func:`signal_pipeline.asymmetric.quality_skew`) for each sensor degradation and, in every
fault group, trains the 1-D CNN of ``bench_difficulty.py`` on the clean machines alone, on
the noisy ones alone and on all of them pooled. Printed per setting, mean test accuracy
over the groups and seeds:

* clean machines: their own model for ``--epochs``, their own model for as many optimiser
  steps as the pooled one (epochs scaled by pooled / own windows, so that more data is not
  confused with more training), and the pooled model (pooling hurts them if it is below
  the second);
* noisy machines: the same three (pooling helps them if the pooled model is above their
  own at the same steps), and the clean model (FAACL's support test asks whether this is
  within ε of their own);
* the noisy model on the clean machines (the reverse support).

The two cross columns use the own models trained for the pooled model's steps.

``--paired`` follows FAACL's appendix B to the letter: every noisy machine holds copies of
a clean machine's splits (the group's clean machines in turn) seen through the poor sensor,
so the noisy data carry no window the clean machines lack.

The accuracy of two-class groups is 0.5 by chance.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import torch
from bench_difficulty import accuracy, train

from signal_pipeline.asymmetric import low_quality_sensor, quality_skew
from signal_pipeline.federation import ClientData, Dataset

PAIRED_STREAM = 0xA1C0

COLUMNS = (
    "clean: own",
    "clean: own, pooled steps",
    "clean: pooled",
    "noisy: own",
    "noisy: own, pooled steps",
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
    clients = list(federation.clients)
    if args.paired:
        clients = paired(clients, low, federation.metadata, seed)
    scale = float(np.concatenate([c.train.x.ravel() for c in clients]).std())

    def windows(clients: list[ClientData]) -> int:
        return sum(len(c.train.y) for c in clients)

    def fit(clients: list[ClientData], epochs: int = args.epochs) -> torch.nn.Module:
        x = np.concatenate([c.train.x for c in clients])
        y = np.concatenate([c.train.y for c in clients])
        return train(x, y, epochs, scale, seed)

    def score(model: torch.nn.Module, clients: list[ClientData]) -> float:
        return statistics.fmean(accuracy(model, c.test, scale) for c in clients)

    def same_steps(own: list[ClientData], pooled: list[ClientData]) -> int:
        return round(int(args.epochs) * windows(pooled) / windows(own))

    rows = []
    for group in sorted(set(federation.groups.tolist())):
        members = [c for c in clients if c.group == group]
        clean = [c for c in members if c.client_id not in low]
        noisy = [c for c in members if c.client_id in low]
        pooled = fit(members)
        clean_long = fit(clean, same_steps(clean, members))
        noisy_long = fit(noisy, same_steps(noisy, members))
        rows.append(
            [
                score(fit(clean), clean),
                score(clean_long, clean),
                score(pooled, clean),
                score(fit(noisy), noisy),
                score(noisy_long, noisy),
                score(pooled, noisy),
                score(clean_long, noisy),
                score(noisy_long, clean),
            ]
        )
    return [float(v) for v in np.mean(rows, axis=0)]


def paired(
    clients: list[ClientData], low: set[str], metadata: Mapping[str, object], seed: int
) -> list[ClientData]:
    """FAACL's A1 as written: each noisy machine gets a clean group mate's splits, degraded."""
    extra_std, bits = metadata["extra_noise_std"], metadata["bits"]
    assert isinstance(extra_std, float)
    assert isinstance(bits, int)
    sensor = low_quality_sensor(extra_std, bits)
    rng = np.random.default_rng([seed, PAIRED_STREAM])

    def degrade(data: Dataset) -> Dataset:
        return replace(data, x=sensor(data.x, rng))

    out = list(clients)
    for group in sorted({c.group for c in clients}):
        clean = [c for c in clients if c.group == group and c.client_id not in low]
        noisy = [i for i, c in enumerate(clients) if c.group == group and c.client_id in low]
        for k, i in enumerate(noisy):
            twin = clean[k % len(clean)]
            train, val = degrade(twin.train), degrade(twin.val)
            out[i] = replace(clients[i], train=train, val=val, test=degrade(twin.test))
    return out


def main() -> None:
    """Print one table row per sensor setting."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise-db", type=float, nargs="+", default=[6.0, 12.0, 16.0])
    parser.add_argument("--bits", type=int, nargs="+", default=[3])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--clients-per-group", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument(
        "--paired", action="store_true", help="noisy machines hold degraded copies of clean ones"
    )
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    machines = "paired (degraded copies of clean ones)" if args.paired else "independent"
    print(f"noisy machines: {machines}; seeds {' '.join(map(str, args.seeds))}")
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
