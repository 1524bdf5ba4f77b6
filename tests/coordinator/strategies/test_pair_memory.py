"""FLACC's pair list: sampled pairs, the latest cosine per pair, eq. 18, grouping by entity."""

from __future__ import annotations

import numpy as np
import pytest

from coordinator.strategies.agglomeration import forget_stale
from coordinator.strategies.pair_memory import PairMemory, entity_table, sample_pairs


def test_small_rounds_measure_every_pair() -> None:
    a, b = sample_pairs(5, partners=4, seed=0)

    assert list(zip(a.tolist(), b.tolist(), strict=True)) == [
        (i, j) for i in range(5) for j in range(i + 1, 5)
    ]


@pytest.mark.parametrize(("k", "partners"), [(40, 8), (41, 8), (1000, 32), (7, 5)])
def test_large_rounds_give_every_update_the_same_number_of_distinct_partners(
    k: int, partners: int
) -> None:
    a, b = sample_pairs(k, partners, seed=[3, 1])

    degree = np.bincount(np.r_[a, b], minlength=k)
    assert np.all(a < b)
    assert len(set(zip(a.tolist(), b.tolist(), strict=True))) == len(a)
    assert np.all(degree == 2 * (partners // 2))


def test_pairs_are_drawn_from_the_seed() -> None:
    first = sample_pairs(100, 10, seed=[1, 2])
    again = sample_pairs(100, 10, seed=[1, 2])
    other = sample_pairs(100, 10, seed=[1, 3])

    assert all(np.array_equal(x, y) for x, y in zip(first, again, strict=True))
    assert not np.array_equal(first[1], other[1])


def test_the_latest_cosine_wins_and_eq_18_forgets_as_the_dense_alpha_does() -> None:
    # Prepare: the same measurements in the list and in a dense α with its τ
    memory = PairMemory.empty(4)
    alpha, tau = np.full((4, 4), -1.0), np.zeros((4, 4), dtype=np.int64)
    for server_round, pairs in [(1, [(0, 1, 0.1), (2, 3, 0.2)]), (3, [(0, 1, 0.5), (1, 2, 0.3)])]:
        first, second, value = (np.array(column) for column in zip(*pairs, strict=True))
        memory.record(server_round, first, second, value)
        alpha[first, second] = alpha[second, first] = value
        tau[first, second] = tau[second, first] = server_round

    # Execute
    memory.forget(12, memory=10)
    dense = forget_stale(alpha, tau, 12, 10)

    # Assert: (2, 3) was last seen in round 1, more than T = 10 rounds ago
    np.testing.assert_allclose(memory.dense(), dense)
    assert len(memory) == 2
    assert memory.dense()[0, 1] == pytest.approx(0.5)


def test_the_entity_table_holds_the_extremes_sums_and_counts_of_known_pairs() -> None:
    rng = np.random.default_rng(5)
    m = 12
    memory = PairMemory.empty(m)
    first, second = np.triu_indices(m, k=1)
    keep = rng.random(len(first)) < 0.5
    memory.record(1, first[keep], second[keep], rng.uniform(-1, 1, size=int(keep.sum())))
    labels = rng.integers(0, 4, size=m)
    alpha = memory.dense()

    table = entity_table(memory, labels, 4)

    for row in range(len(table.a)):
        a, b = int(table.a[row]), int(table.b[row])
        block = alpha[np.ix_(labels == a, labels == b)]
        known = block[block > -1]
        assert a < b
        assert (table.lowest[row], table.highest[row]) == pytest.approx((known.min(), known.max()))
        assert (table.total[row], table.count[row]) == pytest.approx((known.sum(), known.size))
    for e in range(4):
        rows = np.flatnonzero(labels == e)
        inside = alpha[np.ix_(rows, rows)][np.triu_indices(len(rows), k=1)]
        known = inside[inside > -1]
        assert table.within_count[e] == known.size
        assert table.within_total[e] == pytest.approx(known.sum())


def test_clients_joining_grow_the_memory_and_leaving_renumbers_its_pairs() -> None:
    # Prepare: pairs (0, 1), (0, 3) and (2, 3) of four clients
    memory = PairMemory.empty(4)
    memory.record(5, np.array([0, 0, 2]), np.array([1, 3, 3]), np.array([0.1, 0.2, 0.3]))

    # Execute: a fifth client joins, then clients 1 and 2 leave, kept in the order 4, 0, 3
    memory.grow(5)
    memory.record(6, np.array([3]), np.array([4]), np.array([0.4]))
    memory.keep([4, 0, 3])

    # Assert: (0, 3) is now (1, 2), (3, 4) is (0, 2); the pairs of 1 and 2 are gone
    pairs = sorted(
        zip(memory.first.tolist(), memory.second.tolist(), memory.value.tolist(), strict=True)
    )
    assert memory.n_clients == 3
    assert [(a, b) for a, b, _ in pairs] == [(0, 2), (1, 2)]
    assert [round(v, 3) for _, _, v in pairs] == [0.4, 0.2]
    with pytest.raises(ValueError, match="cannot grow"):
        memory.grow(2)
