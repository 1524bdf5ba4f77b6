"""Condensed distance matrices (scipy's ``pdist`` layout) made without a k × k temporary.

A hierarchical clustering of k clients reads the k(k − 1)/2 distances of the pairs
``i < j``, row after row (:func:`scipy.spatial.distance.squareform`'s condensed form). The
functions here write that vector directly from the clients' rows, ``block`` rows at a time
(one matrix product per block), so that the largest array besides the result is a block of
the Gram matrix, not the k × k matrix and its upper-triangle indices: FL+HC's linkage
(:mod:`.flhc_tree`) and CFL's bipartition (:mod:`.bipartition`, on the float32 negated
cosines of :func:`negated_cosines`) on sketches of thousands of updates, both linked in
place (:mod:`.nn_chain`). :func:`top_split` reads the two clusters of a linkage's last
merge.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from faultfleet.types import Float64Array, IntArray


def _condensed(
    rows: npt.NDArray[np.floating],
    block: int,
    fill: Callable[[int, npt.NDArray[np.floating], npt.NDArray[np.floating]], None],
    dtype: npt.DTypeLike = np.float64,
) -> npt.NDArray[np.floating]:
    """The condensed vector of k rows: for each row ``i``, ``fill(i, dots, out)`` turns
    ``dots`` (row i's products with the rows after it) into ``out`` (its distances)."""
    k = len(rows)
    condensed: npt.NDArray[np.floating] = np.empty(k * (k - 1) // 2, dtype=dtype)
    start = 0
    for first in range(0, k, block):
        gram = rows[first : first + block] @ rows[first:].T
        for i in range(gram.shape[0]):
            tail = gram[i, i + 1 :]
            fill(first + i, tail, condensed[start : start + len(tail)])
            start += len(tail)
    return condensed


def gram_distances(
    rows: Float64Array, block: int = 512, dtype: npt.DTypeLike = np.float64
) -> npt.NDArray[np.floating]:
    """Condensed Euclidean distances between the rows of a (k, d) array, as ``pdist``.

    Taken ``block`` rows at a time, so that no k × k temporary is made: memory k²/2
    distances, as ``pdist``'s result. Computed in float64 and stored in ``dtype``:
    ``float32`` rounds each distance once and halves the memory.
    """
    squared = np.einsum("ij,ij->i", rows, rows)

    def fill(row: int, dots: npt.NDArray[np.floating], out: npt.NDArray[np.floating]) -> None:
        out[:] = np.sqrt(np.maximum(squared[row] + squared[row + 1 :] - 2.0 * dots, 0.0))

    return _condensed(rows, block, fill, dtype=dtype)


def cosine_distances(unit_rows: npt.NDArray[np.floating], block: int = 512) -> Float64Array:
    """Condensed cosine distances 1 − uᵢ·uⱼ, clipped to [0, 2], of unit rows (k, d).

    The products are taken in the rows' dtype (float32 sketches: single-precision products,
    within about 10⁻⁷ of the double ones), the distances stored in float64, as scipy's
    linkage reads them. A zero row has distance 1 to every other, as a zero update has
    cosine 0 (:func:`~.sketch.sketch_cosine_matrix`).
    """

    def fill(row: int, dots: npt.NDArray[np.floating], out: npt.NDArray[np.floating]) -> None:
        out[:] = dots

    condensed = np.asarray(_condensed(unit_rows, block, fill), dtype=np.float64)
    np.subtract(1.0, condensed, out=condensed)
    distances: Float64Array = np.clip(condensed, 0.0, 2.0, out=condensed)
    return distances


def negated_cosines(
    unit_rows: npt.NDArray[np.floating], block: int = 512
) -> npt.NDArray[np.floating]:
    """Condensed −uᵢ·uⱼ, the products clipped to [−1, 1], of unit rows (k, d), in their dtype.

    Ordered as :func:`cosine_distances` (1 − uᵢ·uⱼ) and joined by complete linkage into
    the same tree (its heights shifted by −1), but stored in the rows' dtype, exactly as
    the products came: a float32 vector for float32 sketches, half of float64 distances,
    and no rounding of 1 − uᵢ·uⱼ that could tie two cosines near 0 that differ.
    """

    def fill(row: int, dots: npt.NDArray[np.floating], out: npt.NDArray[np.floating]) -> None:
        np.negative(dots, out=out)

    condensed = _condensed(unit_rows, block, fill, dtype=unit_rows.dtype)
    return np.clip(condensed, -1.0, 1.0, out=condensed)


def top_split(tree: Float64Array, n: int) -> IntArray:
    """The two clusters that a linkage matrix ``tree`` of ``n`` ≥ 2 points joins last.

    Parameters
    ----------
    tree : array of shape (n − 1, 4)
        scipy's linkage matrix (:func:`scipy.cluster.hierarchy.linkage`): its last row is
        the root, its children the two clusters.
    n : int

    Returns
    -------
    array of shape (n,), int64
        0 or 1 per point; the first point is always in cluster 0. The same partition as
        cutting the tree into two clusters (scikit-learn's ``AgglomerativeClustering(
        n_clusters=2)`` on the same distances).
    """
    labels = np.ones(n, dtype=np.int64)
    stack = [int(tree[-1, 0])]
    while stack:
        node = stack.pop()
        if node < n:
            labels[node] = 0
        else:
            stack.extend(int(child) for child in tree[node - n, :2])
    result: IntArray = labels if labels[0] == 0 else 1 - labels
    return result
