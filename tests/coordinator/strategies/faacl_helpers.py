"""Shared helpers of the FAACL strategy tests: a small strategy, hand-crafted probes.

Most FAACL tests drive the strategy by hand with crafted per-sample losses: :func:`probe`
answers a probe step with ``BASE + offset(device, key)`` per sample, so a test says how much
worse each model is on each device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from coordinator.strategies.faacl import FAACL
from faultfleet.tasks import Failure, FitResult, LossesResult
from faultfleet.types import FloatArray

BASE = np.linspace(0.5, 1.5, 20)
"""Per-sample validation losses of a device's own model (20 samples, no ties)."""
OWN = BASE.astype(np.float32)
JITTER = 0.01 * np.sin(np.arange(20.0))
"""Keeps the differences between two models from being all equal."""

Offset = Callable[[str, str], float]


def zeros(index: int) -> FloatArray:
    return np.zeros(3, dtype=np.float32)


def make(n: int = 4, **options: Any) -> FAACL:
    defaults: dict[str, Any] = {"fraction": 1.0, "hierarchical": False, "init_rounds": 0}
    strategy = FAACL(**{**defaults, **options})
    strategy.initialize([f"c{i}" for i in range(n)], zeros)
    return strategy


def train_all(strategy: FAACL, server_round: int, value: float = 1.0, n: int = 10) -> None:
    """Every client trains every model it is asked to; weights become ``value``."""
    instructions = strategy.configure_round(
        server_round, strategy.client_ids_, np.random.default_rng(0)
    )
    results = [
        FitResult(
            i.client_id,
            i.model_keys[0],
            np.full(3, value, np.float32),
            np.zeros(3, np.float32),
            n,
            0,
        )
        for i in instructions
    ]
    strategy.aggregate_round(server_round, results, ())


def probe(
    strategy: FAACL,
    server_round: int,
    offset: Offset,
    *,
    available: Sequence[str] | None = None,
    silent: Sequence[str] = (),
    seed: int = 0,
) -> list[str]:
    """Run probe step 0; ``silent`` devices fail. Returns the devices asked.

    A device's own model has losses ``BASE``; a candidate ``key`` has
    ``BASE + offset(device, key)`` (plus a small jitter).
    """
    online = strategy.client_ids_ if available is None else available
    rng = np.random.default_rng(seed)
    instructions = strategy.configure_probe(server_round, 0, online, rng) or []
    results, failures = [], []
    for i in instructions:
        if i.client_id in silent:
            failures.append(Failure(i.client_id, "offline"))
            continue
        own, *candidates = i.model_keys
        losses = {own: OWN}
        for k in candidates:
            losses[k] = (BASE + offset(i.client_id, k) + JITTER).astype(np.float32)
        results.append(LossesResult(i.client_id, losses, len(BASE)))
    if instructions:
        strategy.aggregate_probe(server_round, 0, results, failures)
    assert strategy.configure_probe(server_round, 1, online, rng) is None
    return [i.client_id for i in instructions]


def by_group(groups: dict[str, int], strategy: FAACL, worse: float = 5.0) -> Offset:
    """Models of a device's own group cost nothing extra; others cost ``worse`` nats."""

    def offset(device: str, key: str) -> float:
        owners = {groups[m] for m in strategy.clusters_[key].members}
        return 0.0 if owners == {groups[device]} else worse

    return offset


def members(strategy: FAACL) -> list[list[str]]:
    return sorted(sorted(c.members) for c in strategy.clusters_.values())
