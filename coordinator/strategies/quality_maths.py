"""Array maths of cluster quality: means over known pairs, the average-linkage split, merge
scores. Pure functions; the definitions are in :mod:`coordinator.strategies.quality`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from faultfleet.types import Float64Array, IntArray


def merge_score(
    similarity: Float64Array, groups: Sequence[Sequence[int]], first: int, second: int
) -> float | None:
    """Score in [0, 1] of merging ``groups[first]`` and ``groups[second]``
    (:mod:`coordinator.strategies.quality` defines it).

    Parameters
    ----------
    similarity : array of shape (m, m), NaN where unknown
    groups : sequence of sequences of client indices
        Every group before the merge (disjoint).
    first, second : int
        Positions of the two merged groups.

    Returns
    -------
    float or None
        None when the merge cannot be judged: two single clients, or no known pair between
        the two groups or between them and the other groups.
    """
    a = np.asarray(groups[first], dtype=np.intp)
    b = np.asarray(groups[second], dtype=np.intp)
    if len(a) < 2 and len(b) < 2:
        return None
    joined = np.concatenate([a, b])
    others = [
        np.asarray(g, dtype=np.intp) for i, g in enumerate(groups) if i not in (first, second)
    ]
    rest = np.concatenate(others) if others else np.zeros(0, dtype=np.intp)
    between = mean_known(similarity, a, b)
    reference = mean_known(similarity, joined, rest)
    cohesion = within_mean(similarity, joined)
    if between is None or reference is None or cohesion is None:
        return None
    return share(between - reference, cohesion - reference)


def average_linkage_split(
    similarity: Float64Array, members: IntArray
) -> tuple[IntArray, IntArray] | None:
    """The two parts that average linkage on the known pairs of ``members`` joins last.

    Parts are merged greedily by the highest mean known similarity between them (UPGMA,
    unknown pairs left out), ties to the earliest pair in member order. Returns None for
    fewer than two members or when the known pairs do not connect the members.
    """
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
        flat = int(np.argmax(np.where(open_pairs, mean, -np.inf)))
        keep, drop = divmod(flat, n)
        parts[keep].extend(parts[drop])
        for matrix in (sums, counts):
            matrix[keep, :] += matrix[drop, :]
            matrix[:, keep] += matrix[:, drop]
            matrix[keep, keep] = 0.0
        alive[drop] = False
    first, second = np.flatnonzero(alive)
    if counts[first, second] == 0:
        return None
    order = members
    return (
        np.sort(order[np.asarray(parts[first], dtype=np.intp)]),
        np.sort(order[np.asarray(parts[second], dtype=np.intp)]),
    )


def block_sums(
    similarity: Float64Array, labels: IntArray, names: Sequence[int]
) -> tuple[Float64Array, Float64Array]:
    """Sums and counts of known similarities between every pair of clusters (k, k)."""
    known = ~np.isnan(similarity)
    np.fill_diagonal(known, False)
    values = np.where(known, similarity, 0.0)
    onehot = (labels[:, None] == np.asarray(names)[None, :]).astype(np.float64)
    return onehot.T @ values @ onehot, onehot.T @ known.astype(np.float64) @ onehot


def mean_known(similarity: Float64Array, a: IntArray, b: IntArray) -> float | None:
    block = similarity[np.ix_(a, b)]
    known = block[~np.isnan(block)]
    return float(known.mean()) if known.size else None


def within_mean(similarity: Float64Array, rows: IntArray) -> float | None:
    return pooled_within(similarity, [rows])


def pooled_within(similarity: Float64Array, groups: Sequence[IntArray]) -> float | None:
    """Mean of the known pairs inside each group, pooled over the groups."""
    total, count = 0.0, 0
    for rows in groups:
        block = similarity[np.ix_(rows, rows)]
        upper = block[np.triu_indices(len(rows), k=1)]
        known = upper[~np.isnan(upper)]
        total += float(known.sum())
        count += known.size
    return total / count if count else None


def ratio(total: float, count: float) -> float | None:
    return float(total / count) if count > 0 else None


def share(part: float, whole: float) -> float:
    """clip(part / whole, 0, 1); 0 when the whole is not positive."""
    if whole <= 0:
        return 0.0
    return float(np.clip(part / whole, 0.0, 1.0))
