"""Updates for ``bench_server_scale.py``: real mixed-fault updates, perturbed per agent.

:func:`recorded_updates` trains the mixed-fault federation of ``faultfleet sim``'s paper
profile (48 machines in 6 fault groups, compact model) for a few FedAvg rounds with every
machine taking part, and keeps the last round's 48 updates Δθ with each machine's group:
8 real updates per group, with the within-group and cross-group cosines real training
gives. The result is cached in a ``.npz`` file (the training takes a minute or two).

:class:`SyntheticFleet` turns them into any number of agents: agent i belongs to group
``i mod 6`` and sends a mix of that group's 8 recorded updates (seeded Dirichlet(1)
weights, as a machine between the recorded ones would) plus its own perturbation, a vector
of norm ``noise`` × the mix's norm taken from a seeded pool of random directions, rolled by
a seeded per-agent shift (so no two agents share a perturbation, and no agent's
perturbation costs a fresh draw of 60,432 normals). Mixing spreads the within-group
cosines continuously, as real machines do; agents built on one recorded update each would
form tight sub-groups that FLACC's eq. 14 never joins.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from faultfleet.types import FloatArray, IntArray

POOL = 64
"""Random directions the perturbations are rolled from."""


@dataclass(frozen=True)
class Recorded:
    """The recorded updates: ``deltas`` of shape (u, n_params), their ``groups`` (u,) and the
    global model they were trained from, ``base`` (n_params,)."""

    deltas: FloatArray
    groups: IntArray
    base: FloatArray


def recorded_updates(cache: Path, seed: int = 0, rounds: int = 3) -> Recorded:
    """The last round's updates of ``rounds`` FedAvg rounds on mixed-fault, from ``cache``
    when it holds them (written there otherwise)."""
    if cache.is_file():
        saved = np.load(cache)
        return Recorded(saved["deltas"], saved["groups"], saved["base"])
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # Only to record: the measured worker processes never load torch and the simulator.
    import torch  # noqa: PLC0415

    from faultfleet.tasks import TrainConfig  # noqa: PLC0415
    from faultfleet_apps.simulation.config import profile  # noqa: PLC0415
    from faultfleet_apps.simulation.runner import build_federation, make_engine  # noqa: PLC0415

    torch.set_num_threads(1)
    train = TrainConfig(optimizer="adam", learning_rate=5e-4, epochs=1, batch_size=32)
    config = profile(
        "paper", strategy="fedavg", seed=seed, rounds=rounds, fraction=1.0, train=train
    )
    federation = build_federation(config)
    engine = make_engine(config, federation)
    captured: list[object] = []
    aggregate = engine.strategy.aggregate_round

    def keep(server_round: int, results: object, failures: object) -> None:
        captured[:] = list(results)  # type: ignore[call-overload]
        aggregate(server_round, results, failures)  # type: ignore[arg-type]

    engine.strategy.aggregate_round = keep  # type: ignore[method-assign]
    for _ in range(rounds):
        engine.run_round()
    group_of = {c.client_id: c.group for c in federation.clients}
    results = sorted(captured, key=lambda r: r.client_id)  # type: ignore[attr-defined]
    deltas = np.stack([r.delta for r in results]).astype(np.float32)  # type: ignore[attr-defined]
    groups = np.array([group_of[r.client_id] for r in results])  # type: ignore[attr-defined]
    base = (results[0].weights - results[0].delta).astype(np.float32)  # type: ignore[attr-defined]
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, deltas=deltas, groups=groups, base=base)
    return Recorded(deltas, groups, base)


class SyntheticFleet:
    """Any number of agents whose updates are recorded ones, perturbed per agent.

    Parameters
    ----------
    recorded : Recorded
    n_agents : int
    noise : float
        Norm of each perturbation relative to its recorded update.
    seed : int
    """

    def __init__(self, recorded: Recorded, n_agents: int, *, noise: float = 0.5, seed: int = 0):
        self.recorded = recorded
        self.n_agents = n_agents
        self.noise = noise
        group_ids = sorted(set(recorded.groups.tolist()))
        self.members = [np.flatnonzero(recorded.groups == g) for g in group_ids]
        rng = np.random.default_rng(seed)
        n_params = recorded.deltas.shape[1]
        pool = rng.standard_normal((POOL, n_params)).astype(np.float32)
        self.pool = pool / np.linalg.norm(pool, axis=1, keepdims=True)
        self.shifts = rng.integers(0, n_params, size=n_agents)
        self.mixes = [
            rng.dirichlet(np.ones(len(self.members[self.group(i)]))) for i in range(n_agents)
        ]

    def group(self, agent: int) -> int:
        """The true group of ``agent``."""
        return agent % len(self.members)

    def groups(self) -> list[int]:
        """The true group of every agent."""
        return [self.group(i) for i in range(self.n_agents)]

    def delta(self, agent: int) -> FloatArray:
        """Agent ``agent``'s update, shape (n_params,), float32."""
        members = self.members[self.group(agent)]
        mix = (self.mixes[agent].astype(np.float32) @ self.recorded.deltas[members]).astype(
            np.float32
        )
        direction = np.roll(self.pool[agent % POOL], int(self.shifts[agent]))
        scale = np.float32(self.noise * float(np.linalg.norm(mix)))
        update: FloatArray = mix + scale * direction
        return update
