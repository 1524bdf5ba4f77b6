"""Shared pieces of the FedAC tests: a hand-made federation of two groups, rounds by hand.

The hand-made federation has two groups of three clients: group a sits at +3·e₀, group b at
−3·e₀, each client a little off its group's point along another axis, so the groups are 36
apart (squared) and members at most 0.08 from their group's mean.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from coordinator.strategies.fedac import FedAC
from faultfleet.tasks import FitResult
from faultfleet.types import FloatArray

DIM = 6
A, B = ("a0", "a1", "a2"), ("b0", "b1", "b2")
CLIENTS = A + B


def point(sign: float, offset: int) -> FloatArray:
    """A group's point ±3·e₀ shifted by 0.2 along axis 1 + offset % 3 (offset 0: no shift)."""
    w = np.zeros(DIM, dtype=np.float32)
    w[0] = 3.0 * sign
    if offset:
        w[1 + offset % 3] = 0.2
    return w


GROUPED: dict[str, FloatArray] = {
    **{c: point(1.0, i) for i, c in enumerate(A)},
    **{c: point(-1.0, i) for i, c in enumerate(B)},
}


def factory(j: int) -> FloatArray:
    return np.full(DIM, 0.01 * (j + 1), dtype=np.float32)


def make(**options: object) -> FedAC:
    settings: dict[str, object] = {
        "fraction": 1.0,
        "components": 4,
        "buffer_size": 12,
        "warmup": 1,
        "tune_every": 1,
        **options,
    }
    strategy = FedAC(**settings)  # type: ignore[arg-type]
    strategy.initialize(list(CLIENTS), factory)
    return strategy


def answer(
    strategy: FedAC,
    server_round: int,
    models: Mapping[str, FloatArray],
    samples: Mapping[str, int] | None = None,
) -> None:
    """Configure a round among ``models``' clients; each answers with its given model."""
    instructions = strategy.configure_round(
        server_round, list(models), np.random.default_rng(server_round)
    )
    results = []
    for ins in instructions:
        (key,) = ins.model_keys
        w = models[ins.client_id]
        start = strategy.models[key]
        n = 10 if samples is None else samples[ins.client_id]
        results.append(FitResult(ins.client_id, key, w.copy(), w - start, n, 0.1))
    strategy.aggregate_round(server_round, results, ())


def groups_of(strategy: FedAC) -> set[frozenset[str]]:
    found: dict[int, set[str]] = {}
    for c, label in strategy.cluster_labels().items():
        found.setdefault(label, set()).add(c)
    return {frozenset(members) for members in found.values()}
