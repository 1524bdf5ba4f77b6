"""The peer benchmark's workload on disk, and the two runners that need no Flower.

``bench_peers.py`` builds the federation once with faultfleet's scenario builder and writes
it here (:func:`save_workload`): every client's train, validation and test windows, the
initial global weights, and the clients each round samples with their training seeds (the
draws faultfleet's FedAvg makes for the run's seed). Every runner reads the same files, so
all three train the same clients on the same windows from the same weights:

* :func:`run_faultfleet`: ``faultfleet_apps.simulation.runner.run_simulation`` with FedAvg,
  the whole run as ``faultfleet sim`` does it (thread policy and training path included);
* :func:`run_bare`: a plain PyTorch loop, written as anyone would without a framework
  (:func:`train_plain`, :func:`accuracy_plain`, :func:`average_states`); the Flower
  client (``peers_flower.py``) calls the same functions.

Each runner returns the same record: start-up seconds (process start to the first round),
seconds of every round, seconds of the final evaluation and the final accuracy, the mean
over clients of each client's test accuracy (FLACC §V-B).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from faultfleet.models.weights import load_weights
from faultfleet.models.zoo import build_model
from faultfleet.tasks import TrainConfig
from faultfleet.types import FloatArray, IntArray
from faultfleet_apps.simulation.config import SimConfig
from faultfleet_apps.simulation.runner import RoundRecord, run_simulation
from signal_pipeline.federation import ClientData, Dataset, Federation

Record = dict[str, Any]
SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class Workload:
    """What every runner does: the settings, the clients and the sampling of each round."""

    model: str
    rounds: int
    fraction: float
    epochs: int
    batch_size: int
    learning_rate: float
    seed: int
    sample_shape: tuple[int, ...]
    n_classes: int
    class_names: tuple[str, ...]
    clients: tuple[tuple[str, int], ...]
    """(client id, true group) in the federation's order."""
    schedule: tuple[tuple[tuple[int, int], ...], ...]
    """Per round, (client index, training seed) of every sampled client."""

    def train_config(self) -> TrainConfig:
        return TrainConfig("adam", self.learning_rate, self.epochs, self.batch_size)


def save_workload(
    folder: Path, federation: Federation, workload: Workload, init: FloatArray
) -> None:
    """Write ``federation``'s splits, ``workload`` and the initial weights under ``folder``."""
    (folder / "clients").mkdir(parents=True, exist_ok=True)
    for index, client in enumerate(federation.clients):
        arrays: dict[str, Any] = {}
        for split in SPLITS:
            data: Dataset = getattr(client, split)
            arrays[f"{split}_x"], arrays[f"{split}_y"] = data.x, data.y
        np.savez(folder / "clients" / f"{index}.npz", **arrays)
    np.save(folder / "initial.npy", init)
    (folder / "workload.json").write_text(json.dumps(asdict(workload)), encoding="utf-8")


def load_workload(folder: Path) -> Workload:
    """The settings :func:`save_workload` wrote."""
    data = json.loads((folder / "workload.json").read_text(encoding="utf-8"))
    return Workload(
        **{
            **data,
            "sample_shape": tuple(data["sample_shape"]),
            "class_names": tuple(data["class_names"]),
            "clients": tuple((c, int(g)) for c, g in data["clients"]),
            "schedule": tuple(tuple((int(i), int(s)) for i, s in r) for r in data["schedule"]),
        }
    )


def load_client(folder: Path, workload: Workload, index: int) -> ClientData:
    """Client ``index``'s three splits."""
    with np.load(folder / "clients" / f"{index}.npz") as arrays:
        splits = {s: Dataset(arrays[f"{s}_x"], arrays[f"{s}_y"]) for s in SPLITS}
    client_id, group = workload.clients[index]
    return ClientData(client_id, group, **splits)


def load_federation(folder: Path, workload: Workload) -> Federation:
    """The federation every runner trains."""
    clients = tuple(load_client(folder, workload, i) for i in range(len(workload.clients)))
    return Federation("mixed-fault", clients, workload.n_classes, workload.class_names)


def initial_model(folder: Path, workload: Workload) -> nn.Module:
    """The zoo model holding the run's initial global weights."""
    model = build_model(workload.model, workload.sample_shape, workload.n_classes)
    load_weights(model, np.load(folder / "initial.npy"))
    return model


def train_plain(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, workload: Workload, seed: int
) -> float:
    """E epochs of Adam on (x, y) in shuffled mini-batches; the last epoch's mean loss."""
    optimizer = torch.optim.Adam(model.parameters(), lr=workload.learning_rate)
    rng = np.random.default_rng(seed)
    model.train()
    total = 0.0
    for _ in range(workload.epochs):
        order = torch.from_numpy(rng.permutation(len(y)))
        total = 0.0
        for start in range(0, len(y), workload.batch_size):
            batch = order[start : start + workload.batch_size]
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            total += float(loss.detach()) * len(batch)
    return total / len(y)


def accuracy_plain(model: nn.Module, x: FloatArray, y: IntArray) -> float:
    """Share of the windows whose most probable class is their label."""
    model.eval()
    with torch.no_grad():
        predicted = model(torch.from_numpy(x)).argmax(dim=1).numpy()
    return float((predicted == y).mean())


def average_states(
    states: Sequence[dict[str, torch.Tensor]], counts: Sequence[int]
) -> dict[str, torch.Tensor]:
    """FedAvg: the sample-weighted mean of every tensor."""
    weights = torch.tensor(counts, dtype=torch.float64) / sum(counts)
    return {
        key: sum(
            (w * s[key].double() for w, s in zip(weights, states, strict=True)),
            start=torch.zeros_like(states[0][key], dtype=torch.float64),
        ).to(states[0][key].dtype)
        for key in states[0]
    }


def run_bare(folder: Path, started: float) -> Record:
    """The workload as a plain PyTorch loop; ``started`` is the process's start (epoch s)."""
    workload = load_workload(folder)
    clients = [load_client(folder, workload, i) for i in range(len(workload.clients))]
    tensors = [(torch.from_numpy(c.train.x), torch.from_numpy(c.train.y)) for c in clients]
    model = initial_model(folder, workload)
    global_state = {k: v.clone() for k, v in model.state_dict().items()}
    first = time.time()
    round_seconds = []
    for sampled in workload.schedule:
        began = time.perf_counter()
        states, counts = [], []
        for index, seed in sampled:
            model.load_state_dict(global_state)
            train_plain(model, *tensors[index], workload, seed)
            states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
            counts.append(len(clients[index].train))
        global_state = average_states(states, counts)
        round_seconds.append(time.perf_counter() - began)
    began = time.perf_counter()
    model.load_state_dict(global_state)
    accuracy = float(np.mean([accuracy_plain(model, c.test.x, c.test.y) for c in clients]))
    return {
        "startup_s": first - started,
        "round_s": round_seconds,
        "eval_s": time.perf_counter() - began,
        "final_accuracy": accuracy,
    }


def run_faultfleet(folder: Path, started: float) -> Record:
    """The workload run by faultfleet's simulator (FedAvg, as ``faultfleet sim`` runs it)."""
    workload = load_workload(folder)
    federation = load_federation(folder, workload)
    config = SimConfig(
        strategy="fedavg",
        seed=workload.seed,
        rounds=workload.rounds,
        fraction=workload.fraction,
        model=workload.model,
        train=workload.train_config(),
        eval_every=workload.rounds,
        device="cpu",
    )
    ends: list[float] = []
    records: list[RoundRecord] = []

    def on_round(record: RoundRecord) -> None:
        ends.append(time.time())
        records.append(record)

    result = run_simulation(config, federation=federation, on_round=on_round)
    first = ends[0] - records[0].seconds
    accuracy = float(result.final()["accuracy"])
    return {
        "startup_s": first - started,
        # the last round's record includes the final evaluation; it is reported apart
        "round_s": [r.seconds for r in records],
        "eval_s": 0.0,
        "final_accuracy": accuracy,
    }
