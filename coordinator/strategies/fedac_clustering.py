"""The clustering maths of FedAC: low-rank cosine similarity, EM steps, cluster-number tuning.

Zhang, Chen, Lin, Chen & Zhao, "FedAC: an adaptive clustered federated learning framework
for heterogeneous data" (2024). Small pure functions on numpy arrays, used by
:class:`coordinator.strategies.fedac.FedAC`:

* :func:`principal_directions` — UpdateMap of Algorithm 2, the PCA map M (D × n_params);
* :func:`low_rank_scores` and :func:`cosine_matrix` — LrCos of Algorithm 2 on the centred
  reduced models M(ω − c);
* :func:`assign_most_similar` — the E-step, eq. 4 read as the *most* similar centre, on
  similarities from :func:`leave_one_out_similarity`;
* :func:`cluster_means` — the M-step, eq. 5;
* :func:`granularity` — G_c = Dist_intra / Dist_inter of Algorithm 3, lines 2–4;
* :func:`plan_tuning` — which merge or split Algorithm 3, lines 5–9, asks for;
* :func:`farthest_first` — deterministic seeding of the initial centres;
* :func:`bisect` — the two halves of a cluster that splits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from faultfleet.types import Float64Array, IntArray

ArrayLike = npt.ArrayLike


def principal_directions(rows: ArrayLike, n_components: int, *, rtol: float = 1e-6) -> Float64Array:
    """The PCA map M of Algorithm 2 (UpdateMap): top principal directions of ``rows``.

    Parameters
    ----------
    rows : array of shape (n, n_params)
        Model vectors (FedAC accumulates per-round deviations of client models).
    n_components : int
        D, the most directions kept.
    rtol : float
        Directions whose singular value is at most ``rtol`` times the largest are dropped:
        they carry no variance, only rounding.

    Returns
    -------
    array of shape (D', n_params), float64
        Orthonormal rows, D' = min(D, rank of the centred rows) <= n − 1.
    """
    data = np.asarray(rows, dtype=np.float64)
    if data.ndim != 2:
        raise ValueError(f"rows must be a 2-D array (n, n_params), got shape {data.shape}")
    if n_components < 1:
        raise ValueError(f"n_components must be >= 1, got {n_components}")
    if data.shape[0] < 2:
        return np.zeros((0, data.shape[1]))
    centred = data - data.mean(axis=0)
    _, singular, vt = np.linalg.svd(centred, full_matrices=False)
    if singular[0] <= 0.0:
        return np.zeros((0, data.shape[1]))
    rank = int(np.count_nonzero(singular > rtol * singular[0]))
    return np.ascontiguousarray(vt[: min(n_components, rank)])


def low_rank_scores(models: ArrayLike, directions: ArrayLike, centre: ArrayLike) -> Float64Array:
    """Reduced models M(ω − c), shape (n, D'), for models of shape (n, n_params)."""
    stacked = np.atleast_2d(np.asarray(models, dtype=np.float64))
    offset = stacked - np.asarray(centre, dtype=np.float64)
    return offset @ np.asarray(directions, dtype=np.float64).T


def cosine_matrix(a: ArrayLike, b: ArrayLike) -> Float64Array:
    """Cosine similarity of every row of ``a`` (n, d) with every row of ``b`` (k, d).

    A zero row has similarity 0 with everything, so it never looks like any centre.
    """
    left = np.atleast_2d(np.asarray(a, dtype=np.float64))
    right = np.atleast_2d(np.asarray(b, dtype=np.float64))

    def unit(x: Float64Array) -> Float64Array:
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        return x / np.where(norms > 0.0, norms, 1.0)

    return np.clip(unit(left) @ unit(right).T, -1.0, 1.0)


def assign_most_similar(similarity: ArrayLike, current: ArrayLike | None = None) -> IntArray:
    """E-step (eq. 4): every row goes to the column of highest similarity.

    Eq. 4 prints an argmin of a similarity; the intent is the most similar centre. Ties
    keep a row's ``current`` column (−1 for none), then go to the lowest column index.

    Parameters
    ----------
    similarity : array of shape (m, K)
    current : int array of shape (m,), optional

    Returns
    -------
    int64 array of shape (m,)
    """
    sim = np.atleast_2d(np.asarray(similarity, dtype=np.float64))
    best: IntArray = np.argmax(sim, axis=1).astype(np.int64)
    if current is None:
        return best
    now = np.asarray(current, dtype=np.int64)
    rows = np.arange(sim.shape[0])
    valid = (now >= 0) & (now < sim.shape[1])
    safe = np.where(valid, now, 0)
    keep = valid & (sim[rows, safe] >= sim[rows, best])
    labels: IntArray = np.where(keep, now, best)
    return labels


def cluster_means(models: ArrayLike, labels: ArrayLike, n_clusters: int) -> Float64Array:
    """M-step (eq. 5): the plain mean of each cluster's models, shape (K, n_params).

    Raises
    ------
    ValueError
        If a cluster has no member (drop empty clusters first).
    """
    stacked = np.atleast_2d(np.asarray(models, dtype=np.float64))
    assigned = np.asarray(labels, dtype=np.int64)
    counts = np.bincount(assigned, minlength=n_clusters)
    if counts.shape[0] != n_clusters or np.any(counts == 0):
        raise ValueError(f"every one of {n_clusters} clusters needs a member, got sizes {counts}")
    sums = np.zeros((n_clusters, stacked.shape[1]))
    np.add.at(sums, assigned, stacked)
    means: Float64Array = sums / counts[:, None]
    return means


@dataclass(frozen=True)
class Granularity:
    """Algorithm 3, lines 2–4, per cluster: arrays of shape (K,)."""

    intra: Float64Array
    """Dist_intra^k: mean squared distance of the members to their centre."""
    inter: Float64Array
    """Dist_inter^k: mean squared distance of the centre to the K − 1 other centres (nan
    when K = 1)."""
    ratio: Float64Array
    """G_c^k = intra / inter; +inf for a lone cluster with spread-out members (K = 1 gives
    no inter distance, and one cluster is then as coarse as a clustering gets), 0 for a
    cluster whose members coincide with its centre."""


def granularity(points: ArrayLike, labels: ArrayLike, centres: ArrayLike) -> Granularity:
    """G_c of every cluster (Algorithm 3, lines 2–4), squared Euclidean distances.

    Parameters
    ----------
    points : array of shape (n, d)
    labels : int array of shape (n,), values in [0, K)
    centres : array of shape (K, d)
    """
    x = np.atleast_2d(np.asarray(points, dtype=np.float64))
    c = np.atleast_2d(np.asarray(centres, dtype=np.float64))
    assigned = np.asarray(labels, dtype=np.int64)
    k = c.shape[0]
    counts = np.bincount(assigned, minlength=k).astype(np.float64)
    spread = np.sum((x - c[assigned]) ** 2, axis=1)
    intra = np.bincount(assigned, weights=spread, minlength=k) / np.maximum(counts, 1.0)
    distances = squared_distances(c)
    inter = distances.sum(axis=1) / (k - 1) if k > 1 else np.full(k, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(intra > 0.0, intra / inter, 0.0)
    if k == 1:
        ratio = np.where(intra > 0.0, np.inf, 0.0)
    return Granularity(intra=intra, inter=inter, ratio=np.asarray(ratio, dtype=np.float64))


def squared_distances(centres: ArrayLike) -> Float64Array:
    """Pairwise squared Euclidean distances of the rows of ``centres``, shape (K, K)."""
    c = np.atleast_2d(np.asarray(centres, dtype=np.float64))
    gram = c @ c.T
    norms = np.diag(gram)
    distances = np.maximum(norms[:, None] + norms[None, :] - 2.0 * gram, 0.0)
    np.fill_diagonal(distances, 0.0)
    return distances


@dataclass(frozen=True)
class TuningStep:
    """One change Algorithm 3 asks for: merge ``cluster`` into ``into``, or split it."""

    kind: Literal["merge", "split"]
    cluster: int
    into: int = -1
    """The closest other cluster (merges only)."""


def plan_tuning(
    gc: Sequence[float] | Float64Array,
    centre_distances: ArrayLike,
    splittable: Sequence[bool] | npt.NDArray[np.bool_],
    gc_low: float,
    gc_high: float,
) -> TuningStep | None:
    """The one change a tuning step makes (Algorithm 3, lines 5–9), or None.

    Merges come first: the cluster of smallest G_c below ``gc_low`` merges into the cluster
    whose centre is closest (``centre_distances``, shape (K, K), any dissimilarity).
    Otherwise the cluster of largest G_c above ``gc_high`` among the ``splittable`` ones (at
    least two distinct members) splits. Ties go to the lower index.
    """
    ratio = np.asarray(gc, dtype=np.float64)
    k = ratio.shape[0]
    if k > 1:
        low = np.flatnonzero(ratio < gc_low)
        if low.size:
            cluster = int(low[np.argmin(ratio[low])])
            distances = np.array(centre_distances, dtype=np.float64)
            distances[cluster, cluster] = np.inf
            return TuningStep("merge", cluster, int(np.argmin(distances[cluster])))
    high = np.flatnonzero((ratio > gc_high) & np.asarray(splittable, dtype=np.bool_))
    if high.size:
        return TuningStep("split", int(high[np.argmax(ratio[high])]))
    return None


def farthest_first(similarity: ArrayLike, k: int) -> list[int]:
    """Pick ``k`` mutually dissimilar rows of a square similarity matrix (k-means++'s
    deterministic cousin, farthest-first traversal).

    The first pick is the row of lowest mean similarity to the others; each next pick is
    the row whose highest similarity to the picks so far is lowest. Ties go to the lower
    index. Returns at most ``len(similarity)`` indices.
    """
    sim = np.atleast_2d(np.asarray(similarity, dtype=np.float64))
    n = sim.shape[0]
    if n == 0 or k < 1:
        return []
    first = int(np.argmin(sim.mean(axis=1)))
    picks = [first]
    closest = sim[:, first].copy()
    while len(picks) < min(k, n):
        closest[picks] = np.inf
        nxt = int(np.argmin(closest))
        picks.append(nxt)
        closest = np.maximum(closest, sim[:, nxt])
    return picks


def leave_one_out_similarity(
    scores: ArrayLike, centre_scores: ArrayLike, labels: ArrayLike, sizes: ArrayLike
) -> Float64Array:
    """Cosine of every reduced model with every reduced centre, a member's own centre
    taken without it.

    A centre is the mean of its members, so a member always looks like it; compared with
    the mean of the *other* members, a client that was put in the wrong cluster can leave.
    Reduction is affine, so the reduced leave-one-out centre is (n·s_k − s_i) / (n − 1).
    A lone member keeps its own centre (similarity 1): merging it is the tuning's job.

    Parameters
    ----------
    scores : array of shape (m, d)
        Reduced models M(ω_i − c).
    centre_scores : array of shape (K, d)
        Reduced centres, each the mean of its members' reduced models.
    labels : int array of shape (m,)
        Each row's cluster, or −1 for a row that is not a member of any mean.
    sizes : int array of shape (K,)
        Members in each centre's mean.

    Returns
    -------
    array of shape (m, K)
    """
    s = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    centres = np.atleast_2d(np.asarray(centre_scores, dtype=np.float64))
    own = np.asarray(labels, dtype=np.int64)
    counts = np.asarray(sizes, dtype=np.float64)
    similarity = cosine_matrix(s, centres)
    rows = np.flatnonzero(own >= 0)
    rows = rows[counts[own[rows]] >= 2]
    if rows.size:
        n = counts[own[rows]][:, None]
        others = (n * centres[own[rows]] - s[rows]) / (n - 1.0)
        similarity[rows, own[rows]] = _row_cosines(s[rows], others)
    return similarity


def _row_cosines(a: Float64Array, b: Float64Array) -> Float64Array:
    """Cosine of each row of ``a`` with the same row of ``b``; 0 where either is zero."""
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    dots = np.sum(a * b, axis=1)
    cosines: Float64Array = np.clip(dots / np.where(norms > 0.0, norms, 1.0), -1.0, 1.0)
    return cosines


def bisect(points: ArrayLike) -> npt.NDArray[np.bool_]:
    """Split points (n, d) in two by the sign of their projection on their first principal
    direction (principal direction divisive partitioning); True marks the side of row 0.

    Points that do not spread (fewer than two distinct rows) all stay on row 0's side.
    """
    x = np.atleast_2d(np.asarray(points, dtype=np.float64))
    centred = x - x.mean(axis=0)
    if x.shape[0] < 2 or not np.any(centred):
        return np.ones(x.shape[0], dtype=np.bool_)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    side = centred @ vt[0] > 0.0
    same: npt.NDArray[np.bool_] = side == side[0]
    return same
