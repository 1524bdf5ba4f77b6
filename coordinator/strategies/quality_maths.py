"""Array maths of cluster quality: means over known pairs, the average-linkage split, merge
scores. Pure functions; the definitions are in :mod:`coordinator.strategies.quality`.

The similarity is an m × m matrix with NaN where a pair is unknown, or for large fleets the
known pairs alone (:class:`~coordinator.strategies.known_pairs.KnownPairs`); every function
gives the same figures for both forms, up to the order of float sums.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from coordinator.strategies.known_pairs import KnownPairs
from faultfleet.types import BoolArray, Float64Array, IntArray

Similarity = Float64Array | KnownPairs
"""A similarity matrix (NaN: unknown) or the known pairs of one."""

BLOCK_ROWS = 256
"""Rows of the similarity matrix :func:`row_totals` and :func:`block_sums` read at a time
(bounds their scratch memory to a few times ``BLOCK_ROWS`` × m values)."""


def _known_rows(
    similarity: Float64Array, order: IntArray
) -> Iterator[tuple[int, Float64Array, BoolArray]]:
    """``similarity`` with rows and columns in ``order``, ``BLOCK_ROWS`` rows at a time: the
    first row's position, the known values (0 elsewhere) and where they are known (the
    diagonal never)."""
    for begin in range(0, len(order), BLOCK_ROWS):
        rows = order[begin : begin + BLOCK_ROWS]
        block = similarity[rows][:, order]
        known = ~np.isnan(block)
        local = np.arange(len(rows))
        known[local, begin + local] = False
        yield begin, np.where(known, block, 0.0), known


WithinSums = dict[bytes, tuple[float, float]]
"""Sum and number of the known pairs among a group of clients, by the group's sorted indices
(:func:`merge_score` on known pairs fills and reads it)."""


def merge_score(
    similarity: Similarity,
    first: IntArray,
    second: IntArray,
    totals: tuple[Float64Array, Float64Array],
    within_sums: WithinSums | None = None,
) -> float | None:
    """Score in [0, 1] of merging the clients ``first`` and ``second``, every other client
    being the rest (:mod:`coordinator.strategies.quality` defines it).

    Parameters
    ----------
    similarity : array of shape (m, m), NaN where unknown, or KnownPairs
    first, second : arrays of client indices
        The two merged groups (disjoint).
    totals : pair of arrays of shape (m,)
        :func:`row_totals` of ``similarity``. The known pairs between the merged clients and
        the rest are each merged client's row total less the pairs among the merged clients,
        so the cost is O(j²) for j merged clients, not O(j·m) (for known pairs, the number
        of the j clients' known pairs): a round of FLACC at 10,000 clients scores hundreds
        of merges.
    within_sums : WithinSums, optional
        For known pairs: the pairs among groups already read. The pairs among the merged
        clients are those among each group and those across; the groups' are taken from
        here where present (a cluster grown by several merges in one round: each merge's
        group is the previous one's result) or read once, the merged clients' stored, and
        the pairs across are read from the smaller group's neighbours. Scoring the merges
        of a round in order with one mapping then reads each entity's pairs once, not once
        per merge that grows it.

    Returns
    -------
    float or None
        None when the merge cannot be judged: two single clients, or no known pair between
        the two groups or between them and the rest.
    """
    if len(first) < 2 and len(second) < 2:
        return None
    joined = np.concatenate([first, second])
    split = len(first)
    if isinstance(similarity, KnownPairs):
        known = {} if within_sums is None else within_sums
        between_sum, between_count = similarity.across(first, second)
        sums = [_pairs_among(similarity, group, known) for group in (first, second)]
        inner = (
            sums[0][0] + sums[1][0] + between_sum,
            sums[0][1] + sums[1][1] + between_count,
        )
        known[np.sort(joined).tobytes()] = inner
        twice = (2 * inner[0], 2 * inner[1])
    else:
        block = similarity[np.ix_(joined, joined)]
        known = ~np.isnan(block)
        np.fill_diagonal(known, False)
        upper = np.triu(known, k=1)
        block = np.where(known, block, 0.0)
        inner = (float(block[upper].sum()), float(upper.sum()))
        twice = (float(block.sum()), float(known.sum()))
        between_sum = float(block[:split, split:].sum())
        between_count = float(known[:split, split:].sum())
    row_sum, row_count = totals
    # the pairs from the merged clients to the rest: their row totals less the pairs among
    # them, each of which two of those rows hold
    reference = ratio(
        float(row_sum[joined].sum() - twice[0]), float(row_count[joined].sum() - twice[1])
    )
    between = ratio(between_sum, between_count)
    cohesion = ratio(*inner)
    if between is None or reference is None or cohesion is None:
        return None
    return share(between - reference, cohesion - reference)


def _pairs_among(pairs: KnownPairs, group: IntArray, known: WithinSums) -> tuple[float, float]:
    """Sum and number of the known pairs among ``group``, from ``known`` or read (and kept)."""
    if len(group) < 2:
        return 0.0, 0.0
    key = np.sort(group).tobytes()
    found = known.get(key)
    if found is None:
        _, _, values = pairs.within(group)
        found = known[key] = (float(values.sum()), float(len(values)))
    return found


def row_totals(similarity: Similarity) -> tuple[Float64Array, Float64Array]:
    """Per client, the sum and the number of its known similarities to the other clients."""
    if isinstance(similarity, KnownPairs):
        return similarity.row_totals()
    m = similarity.shape[0]
    sums, counts = np.zeros(m), np.zeros(m)
    for begin, values, known in _known_rows(similarity, np.arange(m)):
        sums[begin : begin + len(values)] = values.sum(axis=1)
        counts[begin : begin + len(values)] = known.sum(axis=1)
    return sums, counts


def sparse_split_limit(n: int) -> float:
    """The mean number of known partners per member up to which :func:`average_linkage_split`
    joins a cluster of ``n`` members on its known pairs rather than on a dense table.

    On the 2-core development machine a join on the table cost about 120 µs plus 0.05 µs
    per member whatever the pairs, a join on the pairs about 5–12 µs per known partner of
    the part it removes: FLACC's evidence (12 partners per member) split 3× faster on its
    pairs in clusters of 1,500 members and 4× in clusters of 3,000; IFCA's same-model
    evidence (79 partners) 2.5× faster on the table in clusters of 2,500. The limit is
    where the two estimates meet.
    """
    return 20.0 + n / 128.0


def average_linkage_split(
    similarity: Similarity, members: IntArray
) -> tuple[IntArray, IntArray] | None:
    """The two parts that average linkage on the known pairs of ``members`` joins last.

    Parts are merged greedily by the highest mean known similarity between them (UPGMA,
    unknown pairs left out), ties to the earliest pair in member order. Returns None for
    fewer than two members or when the known pairs do not connect the members.

    Known pairs few enough for the cluster's size (:func:`sparse_split_limit`) are joined
    on the pairs themselves (:func:`_split_on_pairs`), the others on a dense n × n table
    (:func:`_split_on_table`); both make the same joins, to the bit.
    """
    n = len(members)
    if n < 2:
        return None
    if isinstance(similarity, KnownPairs):
        a, b, values = similarity.within(members)
        if 2 * len(a) <= n * sparse_split_limit(n):
            parts = _split_on_pairs(n, a, b, values)
            if parts is None:
                return None
            first, second = (np.asarray(p, dtype=np.intp) for p in parts)
            return np.sort(members[first]), np.sort(members[second])
        block = np.full((n, n), np.nan)
        block[a, b] = block[b, a] = values
    else:
        block = similarity[np.ix_(members, members)]
    return _split_on_table(block, members)


def _split_on_pairs(
    n: int, a: IntArray, b: IntArray, values: Float64Array
) -> tuple[list[int], list[int]] | None:
    """Average linkage on the known pairs (a, b, value) of n members: the last two parts
    as member positions, or None.

    Each part keeps, per known neighbour, the sum and number of the pairs between them in
    a dict, and a heap holds every pair's mean with the pair (earlier part first), so that
    the largest mean pops first and ties go to the earliest pair, as in the dense table. A
    join moves the removed part's neighbours into the kept part's and pushes their new
    means; entries whose mean changed since are skipped when they pop. The sums are added in
    the table's order (kept part's first), so the means, and the joins, are the table's to
    the bit.
    """
    links: list[dict[int, tuple[float, float]]] = [{} for _ in range(n)]
    heap: list[tuple[float, int, int]] = []
    for i, j, value in zip(a.tolist(), b.tolist(), values.tolist(), strict=True):
        links[i][j] = links[j][i] = (value, 1.0)
        heap.append((-value, i, j) if i < j else (-value, j, i))
    heapq.heapify(heap)
    pop, push = heapq.heappop, heapq.heappush
    parts = [[i] for i in range(n)]
    alive = [True] * n
    for _ in range(n - 2):
        while True:
            if not heap:
                return None
            mean, keep, drop = pop(heap)
            link = links[keep].get(drop) if alive[keep] and alive[drop] else None
            if link is not None and -(link[0] / link[1]) == mean:
                break
        kept = links[keep]
        parts[keep].extend(parts[drop])
        alive[drop] = False
        del kept[drop]
        for other, moved in links[drop].items():
            if other == keep:
                continue
            old = kept.get(other)
            link = moved if old is None else (old[0] + moved[0], old[1] + moved[1])
            kept[other] = link
            theirs = links[other]
            theirs[keep] = link
            del theirs[drop]
            mean = -(link[0] / link[1])
            push(heap, (mean, keep, other) if keep < other else (mean, other, keep))
        links[drop] = {}
    first, second = (i for i in range(n) if alive[i])
    if second not in links[first]:
        return None
    return parts[first], parts[second]


def _split_on_table(block: Float64Array, members: IntArray) -> tuple[IntArray, IntArray] | None:
    """Average linkage on the dense ``block`` of ``members`` (NaN: unknown).

    Each part keeps its best partner among the later parts; a merge refreshes only the
    merged part's row, the column it changed, and the parts whose best partner it took
    part in. That is O(n) per merge in most cases and O(n²) in all, where rescanning the
    whole n × n table after every merge cost O(n³): over two minutes for the clusters of
    1,000-plus members that fleets of 10,000 clients form. The merges are the same, to the
    bit: every mean is the same quotient of the same sums. The table is symmetric, so a
    merge writes the merged row and copies it into the column (on the living parts' rows
    only: no other row is read again), and reads the column from the row (strided reads of
    a column cost more than the row's arithmetic at thousands of members); the counts are
    whole numbers, kept as int32.
    """
    n = len(members)
    known = ~np.isnan(block)
    np.fill_diagonal(known, False)
    sums = np.where(known, block, 0.0)
    # whole numbers: int32 (half float64's memory) holds the n(n − 1)/2 pairs below 65,536
    counts: npt.NDArray[np.signedinteger[Any]] = known.astype(np.int32 if n < 65_536 else np.int64)
    parts: list[list[int]] = [[i] for i in range(n)]
    alive = np.ones(n, dtype=bool)
    # each part's best later part (lowest index among equals; -1: none) and their mean
    partner = np.full(n, -1, dtype=np.intp)
    best = np.full(n, -np.inf)

    def refresh(i: int) -> None:
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(counts[i, i + 1 :] > 0, sums[i, i + 1 :] / counts[i, i + 1 :], -np.inf)
        mean[~alive[i + 1 :]] = -np.inf
        j = int(np.argmax(mean)) if mean.size else 0
        if mean.size and mean[j] > -np.inf:
            partner[i], best[i] = i + 1 + j, mean[j]
        else:
            partner[i], best[i] = -1, -np.inf

    for i in range(n):
        refresh(i)
    for _ in range(n - 2):
        keep = int(np.argmax(best))  # a part that is gone has best = -inf
        if best[keep] == -np.inf:
            return None
        drop = int(partner[keep])
        parts[keep].extend(parts[drop])
        alive[drop] = False
        living = np.flatnonzero(alive)
        for matrix in (sums, counts):  # symmetric, on the living parts' rows
            matrix[keep, :] += matrix[drop, :]
            matrix[keep, keep] = 0.0
            matrix[living, keep] = matrix[keep, living]
        best[drop], partner[drop] = -np.inf, -1
        stale = np.flatnonzero(alive & ((partner == keep) | (partner == drop)))
        earlier = living[: np.searchsorted(living, keep)]
        row_sums, row_counts = sums[keep, earlier], counts[keep, earlier]
        with np.errstate(invalid="ignore", divide="ignore"):
            column = np.where(row_counts > 0, row_sums / row_counts, -np.inf)
        better = (column > best[earlier]) | (
            (column == best[earlier]) & (column > -np.inf) & (keep < partner[earlier])
        )
        partner[earlier[better]], best[earlier[better]] = keep, column[better]
        for i in {keep, *stale.tolist()}:
            refresh(i)
    first, second = np.flatnonzero(alive)
    if counts[first, second] == 0:
        return None
    order = members
    return (
        np.sort(order[np.asarray(parts[first], dtype=np.intp)]),
        np.sort(order[np.asarray(parts[second], dtype=np.intp)]),
    )


def block_sums(
    similarity: Similarity, labels: IntArray, names: Sequence[int]
) -> tuple[Float64Array, Float64Array]:
    """Sums and counts of known similarities between every pair of clusters (k, k).

    Clients are ordered by cluster and the matrix is read ``BLOCK_ROWS`` rows at a time,
    each row's known values summed per cluster of columns (``np.add.reduceat``): O(m²)
    whatever the number of clusters k, where products with an m × k indicator matrix cost
    O(m²·k) — minutes at 10,000 clients in 1,000 clusters, the state of a large fleet
    early in FLACC's clustering phase.
    """
    names_array = np.asarray(names)
    k = len(names_array)
    position = np.searchsorted(names_array, labels)
    if isinstance(similarity, KnownPairs):
        return similarity.group_sums(position, k)
    order = np.argsort(position, kind="stable")
    sorted_position = position[order]
    starts = np.searchsorted(sorted_position, np.arange(k))
    sums = np.zeros((k, k))
    counts = np.zeros((k, k))
    for begin, values, known in _known_rows(similarity, order):
        clusters = sorted_position[begin : begin + len(values)]
        np.add.at(sums, clusters, np.add.reduceat(values, starts, axis=1))
        np.add.at(counts, clusters, np.add.reduceat(known.astype(np.float64), starts, axis=1))
    return sums, counts


def block_of(similarity: Similarity, rows: IntArray, columns: IntArray) -> Float64Array:
    """``similarity`` at ``rows`` × ``columns`` as a dense array, NaN where unknown."""
    if isinstance(similarity, KnownPairs):
        return similarity.block(rows, columns)
    return similarity[np.ix_(rows, columns)]


def mean_known(similarity: Similarity, a: IntArray, b: IntArray) -> float | None:
    block = block_of(similarity, a, b)
    known = block[~np.isnan(block)]
    return float(known.mean()) if known.size else None


def ratio(total: float, count: float) -> float | None:
    return float(total / count) if count > 0 else None


def share(part: float, whole: float) -> float:
    """clip(part / whole, 0, 1); 0 when the whole is not positive."""
    if whole <= 0:
        return 0.0
    return float(np.clip(part / whole, 0.0, 1.0))
