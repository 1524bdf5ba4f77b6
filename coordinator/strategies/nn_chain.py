"""Hierarchical clustering by the nearest-neighbour chain, in place on a condensed vector.

:func:`scipy.cluster.hierarchy.linkage` converts its condensed distances to float64 and
works on a copy: for k clients two k(k − 1)/2-entry float64 arrays, 3.2 GB at 20,000
clients, where CFL's bipartition on float32 sketches (:mod:`.bipartition`) needs its
distances only once and only in float32, and FL+HC's dendrogram (:mod:`.flhc_tree`) only
once. :func:`linkage` runs scipy's algorithm for the complete, average, weighted and Ward
methods (the nearest-neighbour chain, Murtagh 1983; Müllner, "Modern hierarchical,
agglomerative clustering algorithms", arXiv:1109.2378, 2011, §3.4) on the vector it is
given, in its dtype, overwriting it: memory one condensed vector, half of scipy's for
float64 and a quarter for float32. Below :data:`IN_PLACE_FROM` points (a vector of at most
16 MB) it calls scipy, whose compiled loop is faster there.

It returns scipy's linkage matrix exactly, ties included: the chain starts at the lowest
live cluster, a nearest neighbour is the lowest index at the smallest distance unless the
chain's previous cluster is as near (the chain then closes), a merged cluster's distances
follow the Lance–Williams formulas in scipy's order of operations, and the merges are
sorted by height (stable) and renumbered as scipy does. Complete linkage only compares and
takes maxima, so in float32 it is scipy's tree of the same values too; the other methods'
updates are rounded to a float32 vector's precision, so only complete linkage is exactly
scipy's there (CFL's use). Tested equal to scipy's matrix, with many ties, for every method.

A step reads a cluster's k distances from the vector (a gather of its column, a slice of
its row) in numpy, and the gather's scattered reads are most of the time. So the rows of
the chain's latest clusters and of the merged cluster are kept between steps (at most
:data:`CACHED_ROWS` of them) and patched after each merge, which changes two entries of
every other row: linking 10,000 points read 39,548 rows without them and 19,701 with
them, and 20,000 points link in less time than scipy's loop takes.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy.cluster import hierarchy

from faultfleet.types import Float64Array

ChainMethod = Literal["complete", "average", "weighted", "ward"]
CHAIN_METHODS: tuple[ChainMethod, ...] = ("complete", "average", "weighted", "ward")
IN_PLACE_FROM = 2048
"""Points from which :func:`linkage` works in place; scipy (a float64 copy) below."""
CACHED_ROWS = 32
"""Rows of the chain's latest clusters kept between steps (each n numbers)."""


def linkage(condensed: npt.NDArray[np.floating], n: int, method: ChainMethod) -> Float64Array:
    """scipy's ``linkage(condensed, method)``; in place from :data:`IN_PLACE_FROM` points.

    Parameters
    ----------
    condensed : array of shape (n(n − 1)/2,), float32 or float64, finite
        Distances of the pairs i < j, row after row (scipy's condensed form). Overwritten
        when n ≥ :data:`IN_PLACE_FROM`: its values are unspecified afterwards.
    n : int
        Number of points, ≥ 2.
    method : {"complete", "average", "weighted", "ward"}

    Returns
    -------
    array of shape (n − 1, 4), float64
        scipy's linkage matrix: the two clusters merged (points 0…n − 1, merge k is
        cluster n + k), the height and the merged size, by height ascending.

    Raises
    ------
    ValueError
        ``condensed`` is not a one-dimensional vector of n(n − 1)/2 finite entries, n < 2,
        or an unknown method.
    """
    if n >= IN_PLACE_FROM:
        return chain_linkage(condensed, n, method)
    _check(condensed, n, method)
    return np.asarray(hierarchy.linkage(np.asarray(condensed, dtype=np.float64), method=method))


def chain_linkage(
    condensed: npt.NDArray[np.floating],
    n: int,
    method: ChainMethod,
    *,
    cached_rows: int = CACHED_ROWS,
) -> Float64Array:
    """:func:`linkage` computed in place whatever n, keeping the rows of the chain's
    ``cached_rows`` (≥ 1) latest clusters (tests compare it with scipy's on small vectors)."""
    if cached_rows < 1:
        raise ValueError(f"cached_rows must be >= 1, got {cached_rows}")
    _check(condensed, n, method)
    chain = _Chain(condensed, n, method, cached_rows)
    merges = np.empty((n - 1, 4))
    for step in range(n - 1):
        first, second, height = chain.closest_pair()
        chain.merge(first, second, height)
        merges[step] = (first, second, height, 0)
    return _scipy_order(merges, n)


def _check(condensed: npt.NDArray[np.floating], n: int, method: str) -> None:
    pairs = n * (n - 1) // 2
    if n < 2 or condensed.ndim != 1 or condensed.shape[0] != pairs:
        raise ValueError(
            f"a linkage needs n >= 2 points and their n(n - 1)/2 = {pairs} condensed "
            f"distances, got n = {n} and an array of shape {condensed.shape}"
        )
    if method not in CHAIN_METHODS:
        raise ValueError(f"unknown linkage method {method!r}; one of {', '.join(CHAIN_METHODS)}")
    # min and max carry a NaN or an infinity through, without a mask the vector's size
    if not (np.isfinite(condensed.min()) and np.isfinite(condensed.max())):
        raise ValueError(
            "the condensed distances must be finite, as scipy's linkage requires; a NaN or "
            "an infinity came from the rows they were computed from"
        )


class _Chain:
    """The condensed vector, who is still a cluster, and the nearest-neighbour chain."""

    def __init__(
        self, condensed: npt.NDArray[np.floating], n: int, method: ChainMethod, cached_rows: int
    ) -> None:
        self.distances, self.n, self.method = condensed, n, method
        self.cached_rows = cached_rows
        index = np.arange(n, dtype=np.int64)
        # the pair (i, j), i < j, sits at offsets[i] + j
        self.offsets = index * n - index * (index + 1) // 2 - index - 1
        self.positions = np.empty(n, dtype=np.int64)
        # 0 for a live cluster, +inf once merged into another: added to every row read
        self.gone = np.zeros(n, dtype=condensed.dtype)
        self.sizes = np.ones(n, dtype=np.int64)
        self.links: list[int] = []
        # rows read (or made by a merge) and kept up to date, about cached_rows of them
        self.rows: dict[int, npt.NDArray[np.floating]] = {}
        self.spare: list[npt.NDArray[np.floating]] = []

    def row_of(self, cluster: int) -> npt.NDArray[np.floating]:
        """The cluster's row as :meth:`read` gives it, from the kept rows if there."""
        row = self.rows.get(cluster)
        if row is None:
            row = self.spare.pop() if self.spare else np.empty(self.n, self.distances.dtype)
            self.read(cluster, row)
            self.rows[cluster] = row
        return row

    def read(self, cluster: int, out: npt.NDArray[np.floating]) -> None:
        """``out[i]`` = the distance of ``cluster`` to live cluster i, +inf for itself and
        for merged clusters."""
        column = self.positions[:cluster]
        np.add(self.offsets[:cluster], cluster, out=column)
        np.take(self.distances, column, out=out[:cluster])
        start = int(self.offsets[cluster]) + cluster + 1
        out[cluster + 1 :] = self.distances[start : start + self.n - cluster - 1]
        out[cluster] = np.inf
        np.add(out, self.gone, out=out)

    def write(self, cluster: int, values: npt.NDArray[np.floating]) -> None:
        """Store ``values[i]`` as the distance of ``cluster`` to i (i ≠ cluster)."""
        column = self.positions[:cluster]
        np.add(self.offsets[:cluster], cluster, out=column)
        self.distances[column] = values[:cluster]
        start = int(self.offsets[cluster]) + cluster + 1
        self.distances[start : start + self.n - cluster - 1] = values[cluster + 1 :]

    def closest_pair(self) -> tuple[int, int, float]:
        """Grow the chain until its last two clusters are each other's nearest; pop them
        (lower index first) with their distance."""
        links = self.links
        if not links:
            links.append(int(np.flatnonzero(self.sizes)[0]))
        while True:
            last = links[-1]
            row = self.row_of(last)
            nearest = int(np.argmin(row))
            if len(links) > 1:
                previous = links[-2]
                if not row[nearest] < row[previous]:
                    del links[-2:]
                    height = float(row[previous])
                    return (previous, last, height) if previous < last else (last, previous, height)
            links.append(nearest)
            if len(self.rows) > self.cached_rows:
                recent = set(links[-self.cached_rows :])
                for cluster in [c for c in self.rows if c not in recent]:
                    self.spare.append(self.rows.pop(cluster))

    def merge(self, first: int, second: int, height: float) -> None:
        """Merge ``first`` into ``second`` (first < second), at distance ``height``, and
        store the merged cluster's distances. The kept rows of other clusters change in two
        entries (``first`` is gone, ``second`` is the merged cluster); the merged row, +inf
        for ``first`` and itself, is what reading ``second`` would give, and is kept."""
        row_first, row_second = self.row_of(first), self.row_of(second)
        merged = self.spare.pop() if self.spare else np.empty(self.n, self.distances.dtype)
        self._merged(row_first, row_second, height, first, second, merged)
        merged[first] = merged[second] = np.inf
        self.write(second, merged)
        self.spare += [self.rows.pop(first), self.rows.pop(second)]
        for cluster, row in self.rows.items():
            row[first], row[second] = np.inf, merged[cluster]
        self.rows[second] = merged
        self.sizes[first], self.sizes[second] = 0, self.sizes[first] + self.sizes[second]
        self.gone[first] = np.inf

    def _merged(
        self,
        row_first: npt.NDArray[np.floating],
        row_second: npt.NDArray[np.floating],
        height: float,
        first: int,
        second: int,
        out: npt.NDArray[np.floating],
    ) -> None:
        """``out[i]``: the merged cluster's distance to cluster i, scipy's Lance–Williams
        update of d(i, first), d(i, second), d(first, second) and the sizes, term by term in
        its order, stored in the vector's dtype (+inf for merged clusters, whose rows hold
        +inf)."""
        if self.method == "complete":
            np.maximum(row_first, row_second, out=out)
        elif self.method == "weighted":
            out[:] = 0.5 * (row_first + row_second)
        elif self.method == "average":
            size_first, size_second = int(self.sizes[first]), int(self.sizes[second])
            out[:] = (size_first * row_first + size_second * row_second) / (
                size_first + size_second
            )
        else:
            size_first, size_second = int(self.sizes[first]), int(self.sizes[second])
            sizes = self.sizes
            share = 1.0 / (size_first + size_second + sizes)
            squares = (sizes + size_first) * share * row_first * row_first
            squares += (sizes + size_second) * share * row_second * row_second
            squares -= sizes * share * height * height
            out[:] = np.sqrt(squares)


def _scipy_order(merges: Float64Array, n: int) -> Float64Array:
    """The merges by height (stable), each cluster named and counted as scipy's ``label``
    does: a merged cluster takes the number n + its row, the smaller name first, and its
    size is the sum of its parts' in that order (where rounding makes Ward's heights
    decrease, a merge can sort before the merges it depends on; scipy then renames and
    counts it as this does)."""
    ordered = merges[np.argsort(merges[:, 2], kind="mergesort")]
    parent = list(range(n))
    name = list(range(n))
    size = [1] * n
    for step in range(n - 1):
        first, second = (_root(parent, int(point)) for point in ordered[step, :2])
        ordered[step, 0], ordered[step, 1] = sorted((name[first], name[second]))
        ordered[step, 3] = size[first] + size[second]
        parent[first] = second
        name[second], size[second] = n + step, size[first] + size[second]
    return ordered


def _root(parent: list[int], point: int) -> int:
    while parent[point] != point:
        parent[point] = parent[parent[point]]
        point = parent[point]
    return point
