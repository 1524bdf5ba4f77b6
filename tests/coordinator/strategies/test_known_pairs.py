"""``KnownPairs``: the evidence of large fleets as a list of pairs gives the figures of the
m × m matrix it stands for, and FLACC under sketches hands it to the quality watch."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.strategies.evidence import ClusterEvidence, Merge
from coordinator.strategies.flacc import FLACC
from coordinator.strategies.known_pairs import KnownPairs
from coordinator.strategies.quality import assess
from coordinator.strategies.quality_maths import block_sums, row_totals
from tests.coordinator.strategies.test_pairwise_strategies import run


def random_pairs(m: int, share: float, seed: int) -> KnownPairs:
    """A share of the m(m − 1)/2 pairs, in random order and random orientation."""
    rng = np.random.default_rng(seed)
    first, second = np.triu_indices(m, k=1)
    chosen = rng.permutation(np.flatnonzero(rng.random(len(first)) < share))
    flip = rng.random(len(chosen)) < 0.5
    a = np.where(flip, second[chosen], first[chosen])
    b = np.where(flip, first[chosen], second[chosen])
    # few distinct values, so that the average-linkage split meets ties
    values = rng.integers(-4, 5, len(chosen)) / 4
    return KnownPairs.from_arrays(m, a, b, values)


@settings(max_examples=80, deadline=None)
@given(m=st.integers(2, 25), share=st.floats(0.0, 1.0), seed=st.integers(0, 2**32 - 1))
def test_blocks_and_totals_are_those_of_the_dense_matrix(m: int, share: float, seed: int) -> None:
    # Prepare
    pairs = random_pairs(m, share, seed)
    dense = pairs.dense()
    rng = np.random.default_rng(seed + 1)
    rows = rng.permutation(m)[: rng.integers(1, m + 1)]
    columns = rng.permutation(m)[: rng.integers(1, m + 1)]
    labels = 2 * rng.integers(0, 4, m)
    names = sorted(set(labels.tolist()))

    # Execute
    block = pairs.block(rows, columns)
    a, b, within = pairs.within(rows)

    # Assert
    assert dense.shape == pairs.shape == (m, m)
    assert np.isnan(np.diag(dense)).all()
    assert int((~np.isnan(dense)).sum()) == 2 * len(pairs)
    np.testing.assert_array_equal(block, dense[np.ix_(rows, columns)])
    upper = np.triu(~np.isnan(dense[np.ix_(rows, rows)]), k=1)
    assert np.all(a < b)
    assert len(within) == int(upper.sum())
    np.testing.assert_array_equal(within, dense[np.ix_(rows, rows)][a, b])
    for sparse, full in zip(row_totals(pairs), row_totals(dense), strict=True):
        np.testing.assert_allclose(sparse, full, atol=1e-12)
    for sparse, full in zip(
        block_sums(pairs, labels, names), block_sums(dense, labels, names), strict=True
    ):
        np.testing.assert_allclose(sparse, full, atol=1e-12)


def assert_close(found: object, expected: object) -> None:
    """Equal JSON structures, floats within 1e-9 (the order of float sums differs)."""
    if isinstance(expected, dict):
        assert isinstance(found, dict)
        assert found.keys() == expected.keys()
        for key, value in expected.items():
            assert_close(found[key], value)
    elif isinstance(expected, list):
        assert isinstance(found, list)
        assert len(found) == len(expected)
        for one, other in zip(found, expected, strict=True):
            assert_close(one, other)
    elif isinstance(expected, float) and not isinstance(expected, bool):
        assert found == pytest.approx(expected, abs=1e-9)
    else:
        assert found == expected


def merges_of(labels: np.ndarray, ids: tuple[str, ...]) -> tuple[Merge, ...]:
    """For each cluster, in round 3, its first third merged with its second, and the two
    with the rest (a cluster of two: one merge): a merge whose group the previous made."""
    found = []
    for k in sorted(set(labels.tolist())):
        members = tuple(ids[i] for i in np.flatnonzero(labels == k))
        third = max(len(members) // 3, 1)
        if len(members) >= 3:
            found.append(Merge(3, members[:third], members[third : 2 * third], 0.5, 0.0))
            found.append(Merge(3, members[: 2 * third], members[2 * third :], 0.4, 0.0))
        elif len(members) == 2:
            found.append(Merge(3, members[:1], members[1:], 0.5, 0.0))
    return tuple(found)


@settings(max_examples=60, deadline=None)
@given(
    m=st.integers(1, 30),
    clusters=st.integers(1, 6),
    share=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_assessment_of_known_pairs_is_that_of_their_matrix(
    m: int, clusters: int, share: float, seed: int
) -> None:
    # Prepare: the same evidence in both forms, with merges to score
    pairs = random_pairs(m, share, seed)
    labels = np.random.default_rng(seed).integers(0, clusters, m)
    ids = tuple(f"c{i}" for i in range(m))
    merges = merges_of(labels, ids)

    def evidence(similarity: np.ndarray | KnownPairs) -> ClusterEvidence:
        return ClusterEvidence(ids, tuple(labels.tolist()), similarity, "cosine", merges=merges)

    # Execute
    sparse = assess(evidence(pairs), 3).to_json()
    dense = assess(evidence(pairs.dense()), 3)

    # Assert: every figure, up to the order of float sums
    assert_close(sparse, dense.to_json())
    assert len(sparse["merges"]) == len(merges)


@pytest.mark.parametrize(
    ("first", "second", "value", "message"),
    [
        ([0, 1], [1], [0.5, 0.5], "as many second clients"),
        ([0], [4], [0.5], "outside 0..3"),
        ([-1], [2], [0.5], "outside 0..3"),
        ([2], [2], [0.5], "with itself"),
        ([0], [1], [np.nan], "not finite"),
    ],
)
def test_malformed_pairs_are_refused_with_what_is_wrong(
    first: list[int], second: list[int], value: list[float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        KnownPairs.from_arrays(4, first, second, value)


def test_flacc_under_sketches_gives_its_remembered_pairs_not_a_matrix() -> None:
    # Prepare: FLACC comparing sketches on a seeded fleet of three groups
    strategy = FLACC(fraction=0.5, pairwise="sketch", sketch_epsilon=0.25, n_merge=3)
    run(strategy, 4)

    # Execute
    evidence = strategy.cluster_evidence()

    # Assert: the pairs of the memory with a known cosine, and the matrix they stand for
    assert isinstance(evidence.similarity, KnownPairs)
    memory = strategy.sketched_
    assert memory is not None
    remembered = memory.memory.dense()
    expected = np.where(remembered > -1.0, remembered, np.nan)
    matrix = evidence.similarity_matrix()
    assert matrix is not None
    np.testing.assert_array_equal(matrix, expected)
    assert len(evidence.similarity) == int(np.triu(~np.isnan(expected), 1).sum()) > 0
    figures = assess(evidence).to_json()
    assert figures["confidence"] is not None
