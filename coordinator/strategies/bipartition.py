"""CFL's split: the optimal bipartition of a cluster's members and how far apart its halves are.

Sattler, Müller & Samek, "Clustered federated learning: model-agnostic distributed multitask
optimization under privacy constraints", IEEE TNNLS 32(8), 2021, Algorithm 1; the
bipartition minimising the largest cross-similarity is FLACC's §III, Remark 3. Pure
functions used by :class:`coordinator.strategies.cfl.CFL`: on the members' cosine matrix
(exact comparisons), or on their unit sketches (one row per member), which never makes the
m × m matrix: the bipartition links the m(m − 1)/2 negated cosines of a float32 condensed
vector in place (:func:`~.condensed.negated_cosines`, :func:`~.nn_chain.linkage`),
and the share comes from the sums of the halves' sketches.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy.spatial.distance import squareform

from coordinator.strategies.condensed import negated_cosines, top_split
from coordinator.strategies.nn_chain import linkage
from faultfleet.types import Float64Array, IntArray


def optimal_bipartition(similarity: Float64Array) -> IntArray:
    """Split clients in two so that the largest cross-similarity is smallest (FLACC Remark 3).

    Complete linkage on the distances 1 − α (made symmetric, clipped at 0), cut into two
    clusters: the halves scikit-learn's ``AgglomerativeClustering(n_clusters=2,
    linkage="complete")`` gives, through one condensed vector instead of the matrix's
    upper-triangle indices.

    Parameters
    ----------
    similarity : array of shape (m, m), m >= 2
        Pairwise cosine similarities of the clients' updates.

    Returns
    -------
    array of shape (m,), int64
        0 or 1 per client; the first client is always in half 0.
    """
    if similarity.ndim != 2 or similarity.shape[0] != similarity.shape[1]:
        raise ValueError(f"similarity must be a square matrix, got shape {similarity.shape}")
    _check_size(similarity.shape[0])
    # (d + dᵀ) / 2 clipped at 0, d = 1 − α: in place, one m × m array (numpy buffers the
    # overlapping transpose), the same values as the expression
    distance = 1.0 - similarity
    distance += distance.T
    distance /= 2.0
    np.maximum(distance, 0.0, out=distance)
    condensed = squareform(distance, checks=False)
    del distance
    return top_split(linkage(condensed, similarity.shape[0], "complete"), similarity.shape[0])


def sketch_bipartition(unit_sketches: npt.NDArray[np.floating]) -> IntArray:
    """:func:`optimal_bipartition` of the cosines of unit sketches (rows), without their
    m × m matrix: complete linkage on the negated cosines −uᵢ·uⱼ (the same tree as on
    1 − uᵢ·uⱼ), one condensed vector of m(m − 1)/2 products in the sketches' dtype
    (:func:`~.condensed.negated_cosines`), linked in place
    (:func:`~.nn_chain.linkage`): 0.8 GB for 20,000 float32 sketches, where scipy's linkage
    would hold two float64 copies.

    Parameters
    ----------
    unit_sketches : array of shape (m, d), m >= 2
        One unit sketch (or zero row) per client.

    Returns
    -------
    array of shape (m,), int64
        0 or 1 per client; the first client is always in half 0.
    """
    if unit_sketches.ndim != 2:
        raise ValueError(f"unit sketches must be an (m, d) array, got shape {unit_sketches.shape}")
    m = unit_sketches.shape[0]
    _check_size(m)
    return top_split(linkage(negated_cosines(unit_sketches), m, "complete"), m)


def bipartition_share(similarity: Float64Array, halves: IntArray) -> float:
    """Mean similarity across a bipartition over the mean similarity inside its halves.

    Parameters
    ----------
    similarity : array of shape (m, m)
        Cosine similarity of the members' updates.
    halves : array of shape (m,)
        0 or 1 per member (:func:`optimal_bipartition`).

    Returns
    -------
    float
        ``mean across / mean inside``; 1.0 (never split) when the halves hold no pair or
        their members are not alike at all (mean inside <= 0).
    """
    first, second = np.flatnonzero(halves == 0), np.flatnonzero(halves == 1)
    inside = np.concatenate(
        [similarity[np.ix_(h, h)][np.triu_indices(len(h), k=1)] for h in (first, second)]
    )
    if inside.size == 0 or inside.mean() <= 0:
        return 1.0
    return float(similarity[np.ix_(first, second)].mean() / inside.mean())


def sketch_bipartition_share(unit_sketches: npt.NDArray[np.floating], halves: IntArray) -> float:
    """:func:`bipartition_share` of the cosines of unit sketches, from the halves' sums.

    Dot products are bilinear: the cosines across the halves sum to ``s₀ · s₁`` and those
    of the pairs inside half h to ``(‖s_h‖² − Σ_{i∈h} ‖uᵢ‖²) / 2``, ``s_h`` the sum of the
    half's unit sketches ``uᵢ``. Equal to the matrix's share up to rounding (sums in
    float64), in O(m·d) instead of O(m²·d).
    """
    inside, n_inside, sums = 0.0, 0, []
    for half in (0, 1):
        members = unit_sketches[halves == half]
        total = members.sum(axis=0, dtype=np.float64)
        squares = float(np.einsum("ij,ij->", members, members, dtype=np.float64))
        sums.append(total)
        inside += (float(total @ total) - squares) / 2.0
        n_inside += len(members) * (len(members) - 1) // 2
    n_across = int(np.count_nonzero(halves == 0)) * int(np.count_nonzero(halves == 1))
    if n_inside == 0 or inside <= 0 or n_across == 0:
        return 1.0
    return (float(sums[0] @ sums[1]) / n_across) / (inside / n_inside)


def _check_size(m: int) -> None:
    if m < 2:
        raise ValueError(f"a bipartition needs at least 2 clients, got {m}")
