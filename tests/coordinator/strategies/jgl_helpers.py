"""Shared pieces of the JGL tests: three clusters of constant models, probes by hand.

Four clients (``a0``, ``a1``, ``b0``, ``b1``) and K = 3 cluster models of dimension 3,
initialisation k having every weight equal to k; :func:`answer` builds a device's probe
answer from its losses and gradients, :func:`probe` runs one probe step on a strategy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from coordinator.strategies.jgl import JointGradientLoss
from faultfleet.tasks import Failure, GradientInstruction, GradientResult
from faultfleet.types import FloatArray

CLIENTS = ("a0", "a1", "b0", "b1")
KEYS = ("cluster-0", "cluster-1", "cluster-2")
DIM = 3
ZERO = [0.0, 0.0, 0.0]
UPDATES = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
"""Last updates Δw_k along the three axes, one per cluster."""


def factory(k: int) -> FloatArray:
    """Initialisation k: every weight equals k."""
    return np.full(DIM, float(k), dtype=np.float32)


def make_jgl(**options: object) -> JointGradientLoss:
    settings: dict[str, object] = {"fraction": 1.0, "n_clusters": 3, "batch_size": 4}
    settings.update(options)
    strategy = JointGradientLoss(**settings)  # type: ignore[arg-type]
    strategy.initialize(CLIENTS, factory)
    return strategy


def answer(
    client: str, losses: Sequence[float], gradients: Sequence[Sequence[float]]
) -> GradientResult:
    return GradientResult(
        client,
        {k: float(v) for k, v in zip(KEYS, losses, strict=True)},
        {k: np.asarray(g, dtype=np.float32) for k, g in zip(KEYS, gradients, strict=True)},
        4,
    )


def probe(
    strategy: JointGradientLoss,
    server_round: int,
    answers: Sequence[GradientResult],
    failures: Sequence[Failure] = (),
) -> list[GradientInstruction]:
    request = strategy.configure_probe(server_round, 0, CLIENTS, np.random.default_rng(0))
    assert request is not None
    strategy.aggregate_probe(server_round, 0, answers, failures)
    return [i for i in request if isinstance(i, GradientInstruction)]


def with_updates(strategy: JointGradientLoss, updates: Sequence[Sequence[float]]) -> None:
    """Pretend every cluster has a last update Δw_k."""
    strategy.last_update_ = np.asarray(updates, dtype=np.float32)
    strategy.has_update_ = np.ones(len(updates), dtype=bool)
