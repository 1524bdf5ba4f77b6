"""CFL's split: the optimal bipartition of a cluster's members and how far apart its halves are.

Sattler, Müller & Samek, "Clustered federated learning: model-agnostic distributed multitask
optimization under privacy constraints", IEEE TNNLS 32(8), 2021, Algorithm 1; the
bipartition minimising the largest cross-similarity is FLACC's §III, Remark 3. Pure
functions used by :class:`coordinator.strategies.cfl.CFL`.
"""

from __future__ import annotations

import numpy as np
from sklearn.cluster import AgglomerativeClustering

from faultfleet.types import Float64Array, IntArray


def optimal_bipartition(similarity: Float64Array) -> IntArray:
    """Split clients in two so that the largest cross-similarity is smallest (FLACC Remark 3).

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
    if similarity.shape[0] < 2:
        raise ValueError(f"a bipartition needs at least 2 clients, got {similarity.shape[0]}")
    # (d + dᵀ) / 2 clipped at 0, d = 1 − α: in place, one m × m array (numpy buffers the
    # overlapping transpose), the same values as the expression
    distance = 1.0 - similarity
    distance += distance.T
    distance /= 2.0
    np.maximum(distance, 0.0, out=distance)
    np.fill_diagonal(distance, 0.0)
    linkage = AgglomerativeClustering(n_clusters=2, metric="precomputed", linkage="complete")
    labels = np.asarray(linkage.fit_predict(distance), dtype=np.int64)
    return labels if labels[0] == 0 else 1 - labels


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
