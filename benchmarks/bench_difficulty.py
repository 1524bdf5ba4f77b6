"""How hard is the simulated mixed-fault task? Local versus per-group training of a 1-D CNN.

Usage: python benchmarks/bench_difficulty.py [--snr-db -6] [--seed 0] [--machine-spread 0.25]

Builds the ``mixed-fault`` federation, then trains a small 1-D CNN (a wide strided first
kernel, as in WDCNN) on every fourth machine alone ("local", 30 epochs) and on each true
group of machines pooled ("per group", 10 epochs: the upper bound of clustered FL), and prints
mean test accuracies. Inputs are scaled by one constant fitted on all training windows, so
amplitude information (the 1× level) is kept.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch import nn

from faultfleet.types import FloatArray, IntArray
from signal_pipeline.federation import Dataset
from signal_pipeline.scenarios import VibrationSettings, mixed_fault
from signal_pipeline.simulator import DEFAULT_SNR_DB


def small_cnn(n_classes: int = 12) -> nn.Module:
    """A compact 1-D CNN for 1024-sample windows."""
    layers: list[nn.Module] = [nn.Conv1d(1, 16, 64, stride=8, padding=28)]
    layers += [nn.BatchNorm1d(16), nn.ReLU(), nn.MaxPool1d(2)]
    for c_in, c_out in ((16, 32), (32, 64), (64, 64)):
        layers += [nn.Conv1d(c_in, c_out, 3, padding=1), nn.BatchNorm1d(c_out), nn.ReLU()]
        layers.append(nn.MaxPool1d(2) if c_in != 64 else nn.AdaptiveAvgPool1d(1))
    layers += [nn.Flatten(), nn.Linear(64, n_classes)]
    return nn.Sequential(*layers)


def train(x: FloatArray, y: IntArray, epochs: int, scale: float, seed: int) -> nn.Module:
    """Adam, learning rate 1e-3, batch 64."""
    torch.manual_seed(seed)
    model = small_cnn()
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-3)
    inputs, targets = torch.from_numpy(x / scale), torch.from_numpy(y)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(targets), generator=generator)
        for start in range(0, len(targets), 64):
            batch = order[start : start + 64]
            if len(batch) < 2:
                continue
            optimiser.zero_grad()
            loss = nn.functional.cross_entropy(model(inputs[batch]), targets[batch])
            loss.backward()  # type: ignore[no-untyped-call]
            optimiser.step()
    model.eval()
    return model


def accuracy(model: nn.Module, data: Dataset, scale: float) -> float:
    """Fraction of correctly classified windows."""
    with torch.no_grad():
        predicted = model(torch.from_numpy(data.x / scale)).argmax(dim=1).numpy()
    return float(np.mean(predicted == data.y))


def main() -> None:
    """Run and print the two accuracies."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snr-db", type=float, default=DEFAULT_SNR_DB)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--machine-spread", type=float, default=VibrationSettings.machine_spread)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    settings = VibrationSettings(snr_db=args.snr_db, machine_spread=args.machine_spread)
    federation = mixed_fault(args.seed, settings=settings)
    scale = float(np.concatenate([c.train.x.ravel() for c in federation.clients]).std())
    local = [
        accuracy(train(c.train.x, c.train.y, 30, scale, args.seed), c.test, scale)
        for c in federation.clients[::4]
    ]
    per_group = []
    for group in sorted(set(federation.groups.tolist())):
        members = [c for c in federation.clients if c.group == group]
        x = np.concatenate([c.train.x for c in members])
        y = np.concatenate([c.train.y for c in members])
        model = train(x, y, 10, scale, args.seed)
        per_group.append(float(np.mean([accuracy(model, c.test, scale) for c in members])))
    print(
        f"mixed-fault seed={args.seed} snr_db={args.snr_db:g} spread={args.machine_spread:g}: "
        f"local {np.mean(local):.3f} ({len(local)} machines), "
        f"per true group {np.mean(per_group):.3f} ({len(per_group)} groups), "
        f"{time.perf_counter() - start:.0f} s"
    )


if __name__ == "__main__":
    main()
