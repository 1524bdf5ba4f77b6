"""``quality_maths``: block sums against a pair-by-pair count, the average-linkage split —
on a dense table and on the known pairs — against the rescanning implementation it
replaced (ties and unknown pairs included)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.strategies import quality_maths
from coordinator.strategies.known_pairs import KnownPairs
from coordinator.strategies.quality_maths import (
    _split_on_pairs,
    average_linkage_split,
    block_sums,
    merge_score,
    row_totals,
)


def pair_by_pair(
    similarity: np.ndarray, labels: np.ndarray, names: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """The definition: every known off-diagonal S_ij added to its clusters' cell."""
    position = {name: i for i, name in enumerate(names)}
    sums = np.zeros((len(names), len(names)))
    counts = np.zeros((len(names), len(names)))
    for i in range(len(labels)):
        for j in range(len(labels)):
            if i != j and not np.isnan(similarity[i, j]):
                a, b = position[int(labels[i])], position[int(labels[j])]
                sums[a, b] += similarity[i, j]
                counts[a, b] += 1
    return sums, counts


@settings(max_examples=60, deadline=None)
@given(
    m=st.integers(1, 23),
    clusters=st.integers(1, 23),
    unknown=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_block_sums_are_the_pairwise_sums_of_known_values(
    m: int, clusters: int, unknown: float, seed: int
) -> None:
    # Prepare: a symmetric matrix with a share of unknown pairs, labels in any order with
    # gaps between the names (as strategies number their clusters)
    rng = np.random.default_rng(seed)
    values = rng.uniform(-1, 1, (m, m))
    values = (values + values.T) / 2
    hidden = np.triu(rng.random((m, m)) < unknown, 1)
    values[hidden | hidden.T] = np.nan
    np.fill_diagonal(values, np.nan if seed % 2 else 1.0)  # the diagonal never counts
    labels = 3 * rng.integers(0, clusters, m)
    names = sorted(set(labels.tolist()))

    # Execute
    sums, counts = block_sums(values, labels, names)

    # Assert
    expected_sums, expected_counts = pair_by_pair(values, labels, names)
    np.testing.assert_allclose(sums, expected_sums, atol=1e-12)
    np.testing.assert_array_equal(counts, expected_counts)


@pytest.mark.parametrize("rows", [1, 2, 5, 256])
def test_block_sums_do_not_depend_on_the_rows_read_at_a_time(
    rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: 13 clients in 4 clusters, every pair known
    rng = np.random.default_rng(7)
    values = rng.uniform(-1, 1, (13, 13))
    values = (values + values.T) / 2
    labels = rng.integers(0, 4, 13)
    names = sorted(set(labels.tolist()))
    monkeypatch.setattr(quality_maths, "BLOCK_ROWS", rows)

    # Execute
    sums, counts = block_sums(values, labels, names)

    # Assert
    expected_sums, expected_counts = pair_by_pair(values, labels, names)
    np.testing.assert_allclose(sums, expected_sums, atol=1e-12)
    np.testing.assert_array_equal(counts, expected_counts)


def rescanning_split(
    similarity: np.ndarray, members: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """UPGMA on the known pairs as first written: the whole table rescanned every merge."""
    n = len(members)
    if n < 2:
        return None
    block = similarity[np.ix_(members, members)]
    known = ~np.isnan(block)
    np.fill_diagonal(known, False)
    sums = np.where(known, block, 0.0)
    counts = known.astype(np.float64)
    parts: list[list[int]] = [[i] for i in range(n)]
    alive = np.ones(n, dtype=bool)
    for _ in range(n - 2):
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(counts > 0, sums / counts, -np.inf)
        open_pairs = np.triu(alive[:, None] & alive[None, :] & (counts > 0), k=1)
        if not open_pairs.any():
            return None
        keep, drop = divmod(int(np.argmax(np.where(open_pairs, mean, -np.inf))), n)
        parts[keep].extend(parts[drop])
        for matrix in (sums, counts):
            matrix[keep, :] += matrix[drop, :]
            matrix[:, keep] += matrix[:, drop]
            matrix[keep, keep] = 0.0
        alive[drop] = False
    first, second = np.flatnonzero(alive)
    if counts[first, second] == 0:
        return None
    return (
        np.sort(members[np.asarray(parts[first], dtype=np.intp)]),
        np.sort(members[np.asarray(parts[second], dtype=np.intp)]),
    )


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(0, 30),
    unknown=st.floats(0.0, 0.95),
    levels=st.integers(2, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_split_is_the_one_rescanning_the_table_finds(
    n: int, unknown: float, levels: int, seed: int
) -> None:
    # Prepare: few distinct values, so that ties are common; a share of unknown pairs
    rng = np.random.default_rng(seed)
    values = rng.integers(0, levels, (n + 3, n + 3)) / levels
    values = np.minimum(values, values.T)
    hidden = np.triu(rng.random(values.shape) < unknown, 1)
    values[hidden | hidden.T] = np.nan
    members = np.sort(rng.choice(n + 3, size=n, replace=False)).astype(np.intp)

    first, second = np.nonzero(np.triu(~np.isnan(values), 1))
    pairs = KnownPairs.from_arrays(n + 3, first, second, values[first, second])
    a, b, within = pairs.within(members)

    # Execute: the matrix, the known pairs (on pairs or a table by their number), and the
    # join on pairs whatever their number
    splits = [average_linkage_split(values, members), average_linkage_split(pairs, members)]
    on_pairs = _split_on_pairs(n, a, b, within) if n >= 2 else None
    if on_pairs is not None:
        left, right = (members[np.asarray(p, dtype=np.intp)] for p in on_pairs)
        splits.append((np.sort(left), np.sort(right)))
    elif n >= 2:
        splits.append(None)

    # Assert
    expected = rescanning_split(values, members)
    for split in splits:
        if expected is None:
            assert split is None
        else:
            assert split is not None
            np.testing.assert_array_equal(split[0], expected[0])
            np.testing.assert_array_equal(split[1], expected[1])


def merge_score_against_groups(
    similarity: np.ndarray, groups: list[np.ndarray], first: int, second: int
) -> float | None:
    """The merge score as first written: every mean taken over its own block of pairs."""

    def mean(rows: np.ndarray, cols: np.ndarray, upper: bool = False) -> float | None:
        block = similarity[np.ix_(rows, cols)]
        if upper:
            block = block[np.triu_indices(len(rows), k=1)]
        known = block[~np.isnan(block)]
        return float(known.mean()) if known.size else None

    a, b = groups[first], groups[second]
    if len(a) < 2 and len(b) < 2:
        return None
    joined = np.concatenate([a, b])
    others = [g for i, g in enumerate(groups) if i not in (first, second)]
    rest = np.concatenate(others) if others else np.zeros(0, dtype=np.intp)
    between, reference = mean(a, b), mean(joined, rest)
    cohesion = mean(joined, joined, upper=True)
    if between is None or reference is None or cohesion is None:
        return None
    whole = cohesion - reference
    return 0.0 if whole <= 0 else float(np.clip((between - reference) / whole, 0.0, 1.0))


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(2, 25),
    groups=st.integers(2, 6),
    unknown=st.floats(0.0, 0.9),
    symmetric=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_merge_scored_from_row_totals_scores_as_against_the_groups(
    n: int, groups: int, unknown: float, symmetric: bool, seed: int
) -> None:
    # Prepare: clients in groups; the first two groups merge, the others are the rest
    rng = np.random.default_rng(seed)
    values = rng.uniform(-1, 1, (n, n))
    if symmetric:
        values = (values + values.T) / 2
    values[rng.random((n, n)) < unknown] = np.nan
    labels = rng.integers(0, groups, n)
    members = [np.flatnonzero(labels == g) for g in range(groups)]
    if not len(members[0]) or not len(members[1]):
        return

    # Execute
    fast = merge_score(values, members[0], members[1], row_totals(values))

    # Assert
    expected = merge_score_against_groups(values, [m for m in members if len(m)], 0, 1)
    if expected is None:
        assert fast is None
    else:
        assert fast == pytest.approx(expected, abs=1e-9)
