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
scipy's there (CFL's use). Each step reads one
cluster's k distances from the vector (a gather of its column, a slice of its row) in numpy,
so the time is about scipy's. Tested equal to scipy's matrix, with many ties, for every
method.
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


def chain_linkage(condensed: npt.NDArray[np.floating], n: int, method: ChainMethod) -> Float64Array:
    """:func:`linkage` computed in place whatever n (tests compare it with scipy's on small
    vectors)."""
    _check(condensed, n, method)
    chain = _Chain(condensed, n, method)
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

    def __init__(self, condensed: npt.NDArray[np.floating], n: int, method: ChainMethod) -> None:
        self.distances, self.n, self.method = condensed, n, method
        index = np.arange(n, dtype=np.int64)
        # the pair (i, j), i < j, sits at offsets[i] + j
        self.offsets = index * n - index * (index + 1) // 2 - index - 1
        self.positions = np.empty(n, dtype=np.int64)
        self.row = np.empty(n, dtype=condensed.dtype)
        self.other = np.empty(n, dtype=condensed.dtype)
        # 0 for a live cluster, +inf once merged into another: added to every row read
        self.gone = np.zeros(n, dtype=condensed.dtype)
        self.sizes = np.ones(n, dtype=np.int64)
        self.links: list[int] = []
        self.last = 0

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
        (lower index first) with their distance. ``self.row`` then holds the row of the one
        that ended the chain (``self.last``)."""
        links = self.links
        if not links:
            links.append(int(np.flatnonzero(self.sizes)[0]))
        while True:
            last = links[-1]
            self.read(last, self.row)
            nearest = int(np.argmin(self.row))
            if len(links) > 1:
                previous = links[-2]
                if not self.row[nearest] < self.row[previous]:
                    del links[-2:]
                    self.last = last
                    height = float(self.row[previous])
                    return (previous, last, height) if previous < last else (last, previous, height)
            links.append(nearest)

    def merge(self, first: int, second: int, height: float) -> None:
        """Merge ``first`` into ``second`` (first < second), at distance ``height``, and
        store the merged cluster's distances."""
        if self.last == first:
            row_first, row_second = self.row, self.other
            self.read(second, row_second)
        else:
            row_first, row_second = self.other, self.row
            self.read(first, row_first)
        merged = self._merged(row_first, row_second, height, first, second)
        self.write(second, merged)
        self.sizes[first], self.sizes[second] = 0, self.sizes[first] + self.sizes[second]
        self.gone[first] = np.inf

    def _merged(
        self,
        row_first: npt.NDArray[np.floating],
        row_second: npt.NDArray[np.floating],
        height: float,
        first: int,
        second: int,
    ) -> npt.NDArray[np.floating]:
        """The merged cluster's distance to each cluster i: scipy's Lance–Williams update
        of d(i, first), d(i, second), d(first, second) and the sizes, term by term in its
        order (merged and self entries come out inf or nan and are never read)."""
        if self.method == "complete":
            larger: npt.NDArray[np.floating] = np.maximum(row_first, row_second, out=row_second)
            return larger
        if self.method == "weighted":
            halfway: npt.NDArray[np.floating] = 0.5 * (row_first + row_second)
            return halfway
        size_first, size_second = int(self.sizes[first]), int(self.sizes[second])
        if self.method == "average":
            mean: npt.NDArray[np.floating] = size_first * row_first + size_second * row_second
            mean /= size_first + size_second
            return mean
        sizes = self.sizes
        with np.errstate(invalid="ignore"):
            share = 1.0 / (size_first + size_second + sizes)
            squares = (sizes + size_first) * share * row_first * row_first
            squares += (sizes + size_second) * share * row_second * row_second
            squares -= sizes * share * height * height
            ward: npt.NDArray[np.floating] = np.sqrt(squares)
            return ward


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
