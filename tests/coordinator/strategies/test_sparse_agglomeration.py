"""The sparse merging takes Algorithm 1's decisions exactly as the dense implementation."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from coordinator.strategies import sparse_agglomeration
from coordinator.strategies.agglomeration import Agglomeration, agglomerate
from coordinator.strategies.pair_memory import PairMemory
from coordinator.strategies.sparse_agglomeration import agglomerate_pairs


def grouped_memory(seed: int, m: int, groups: int, known: float) -> PairMemory:
    """Cosines of clients in ``groups`` groups (within ~0.5, across ~0), a share ``known``
    of the pairs remembered."""
    rng = np.random.default_rng(seed)
    group = rng.integers(0, groups, size=m)
    first, second = np.triu_indices(m, k=1)
    keep = rng.random(len(first)) < known
    first, second = first[keep], second[keep]
    same = group[first] == group[second]
    value = np.where(same, 0.5, 0.0) + rng.normal(0.0, 0.15, size=len(first))
    memory = PairMemory.empty(m)
    memory.record(3, first, second, np.clip(value, -1.0, 1.0))
    return memory


def random_entities(seed: int, m: int, pieces: int) -> list[tuple[int, ...]]:
    rng = np.random.default_rng(seed + 1000)
    label = rng.integers(0, pieces, size=m)
    entities = [tuple(int(i) for i in np.flatnonzero(label == p)) for p in range(pieces)]
    return sorted((e for e in entities if e), key=lambda e: e[0])


def same(dense: Agglomeration, sparse: Agglomeration) -> None:
    assert sparse.entities == dense.entities
    assert sparse.passed_over == dense.passed_over
    assert len(sparse.decisions) == len(dense.decisions)
    for got, want in zip(sparse.decisions, dense.decisions, strict=True):
        assert (got.first, got.second, got.merge) == (want.first, want.second, want.merge)
        assert got.alpha_min_cross == pytest.approx(want.alpha_min_cross)
        assert got.alpha_max_cross == pytest.approx(want.alpha_max_cross)
        assert (got.alpha_min_within is None) == (want.alpha_min_within is None)
        assert (got.cohesion is None) == (want.cohesion is None)
        if got.cohesion is not None and want.cohesion is not None:
            assert got.cohesion.passed == want.cohesion.passed
            assert got.cohesion.cross_mean == pytest.approx(want.cohesion.cross_mean)
            assert got.cohesion.reference == pytest.approx(want.cohesion.reference)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize(
    ("rule", "next_pair", "n_merge"),
    [("cohesion", False, 1), ("cohesion", False, 200), ("paper", False, 200), ("paper", True, 200)],
)
def test_sparse_merging_equals_the_dense_one(
    seed: int, rule: str, next_pair: bool, n_merge: int
) -> None:
    # Prepare: 40 clients in 4 groups, 60 % of pairs known, singletons or random pieces
    memory = grouped_memory(seed, 40, 4, 0.6)
    entities = [(i,) for i in range(40)] if seed % 2 else random_entities(seed, 40, 12)
    share = 0.7 if rule == "cohesion" else None
    options = {"alpha0": 0.0, "n_merge": n_merge, "next_pair": next_pair, "cohesion_share": share}

    # Execute
    dense = agglomerate(memory.dense(), entities, **options)  # type: ignore[arg-type]
    sparse = agglomerate_pairs(memory, entities, **options)  # type: ignore[arg-type]

    # Assert
    same(dense, sparse)


def test_no_known_cross_pair_merges_nothing_and_decides_nothing() -> None:
    memory = PairMemory.empty(4)
    memory.record(1, np.array([0, 2]), np.array([1, 3]), np.array([0.9, 0.9]))
    entities = [(0, 1), (2, 3)]

    outcome = agglomerate_pairs(memory, entities, alpha0=0.0, n_merge=5)

    assert outcome.entities == entities
    assert outcome.decisions == ()


def test_merging_runs_with_the_collector_off_and_leaves_it_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Prepare: record the collector's state at every merge
    states: list[bool] = []
    merge = sparse_agglomeration._Graph.merge

    def recording(graph: sparse_agglomeration._Graph, row: int) -> None:
        states.append(gc.isenabled())
        merge(graph, row)

    monkeypatch.setattr(sparse_agglomeration._Graph, "merge", recording)
    gc.enable()
    memory = grouped_memory(0, 40, 4, 0.6)

    # Execute
    outcome = agglomerate_pairs(memory, [(i,) for i in range(40)], alpha0=0.0, n_merge=200)

    # Assert
    assert len(states) == 40 - len(outcome.entities) > 0
    assert not any(states)
    assert gc.isenabled()
