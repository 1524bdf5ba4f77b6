"""FL+HC's dendrogram: building it, cutting it, and where to cut when the data choose.

:func:`hierarchical_clusters` (:func:`linkage_tree` then :func:`flat_labels`) is the
agglomerative clustering of the clients' updates that :class:`~.flhc.FLHC` runs once; the
notes of :mod:`.flhc` say how heights are measured.

Briggs, Fan & Andras (IJCNN 2020) cut the dendrogram of the clients' updates at a distance
the user sets, and FLACC (§II-C) names that cutoff as FL+HC's weak point: its right value
depends on the model, the optimiser and the epochs (``docs/federated.md`` measures it).
:func:`largest_gap_cut` reads it from the dendrogram instead: merges inside a group of
alike clients happen at small heights, merges of different groups at large ones, and the
cut goes in the middle of the largest jump between consecutive heights — the classic
"largest gap" stopping rule of hierarchical clustering (Everitt, Landau, Leese & Stahl,
*Cluster Analysis*, 5th ed., 2011, §4.4.4). Heights are compared on a log scale, so that
the jump is a ratio and does not depend on the units of the distance.

:func:`weakest_heights` gives, per flat cluster, the height of the last merge that built it
(FL+HC's weakest merge, reported by :mod:`coordinator.strategies.quality`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, cast

import numpy as np
import numpy.typing as npt
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import pdist

from coordinator.strategies import nn_chain
from coordinator.strategies.aggregate import unit_rows
from coordinator.strategies.condensed import cosine_distances, gram_distances
from faultfleet.types import Float64Array, FloatArray, IntArray

LinkageName = Literal["ward", "average", "complete", "single"]
MetricName = Literal["euclidean", "cosine"]
LINKAGES: tuple[str, ...] = ("average", "complete", "single", "ward")
METRICS: tuple[str, ...] = ("cosine", "euclidean")


def hierarchical_clusters(
    updates: Sequence[FloatArray],
    distance_threshold: float,
    *,
    linkage_name: str = "ward",
    metric: str = "euclidean",
) -> tuple[IntArray, Float64Array]:
    """Agglomerative clustering of weight updates, cut at a distance.

    Parameters
    ----------
    updates : sequence of m >= 1 arrays of shape (n_params,)
        The clients' weight updates Δθ_i.
    distance_threshold : float
        Clients joined at a height ≤ this share a cluster.
    linkage_name : {"ward", "average", "complete", "single"}
    metric : {"euclidean", "cosine"}
        ``"cosine"`` is 1 − cosine similarity; ward needs ``"euclidean"``.

    Returns
    -------
    labels : array of shape (m,), int64
        Cluster of each update, numbered 0, 1, … in order of first appearance.
    heights : array of shape (m - 1,), float64
        Merge heights of the dendrogram, ascending (empty for one update).
    """
    tree = linkage_tree(updates, linkage_name=linkage_name, metric=metric)
    return flat_labels(tree, distance_threshold, len(updates)), np.asarray(tree[:, 2])


def linkage_tree(
    updates: Sequence[FloatArray] | Float64Array,
    *,
    linkage_name: str = "ward",
    metric: str = "euclidean",
    gram: bool = False,
) -> Float64Array:
    """scipy's linkage matrix, shape (m − 1, 4), of the updates (:func:`hierarchical_clusters`).

    ``updates`` may be sketches of the updates (FL+HC's streamed rounds).
    ``gram=True`` takes Euclidean distances from the Gram matrix,
    √(‖a‖² + ‖b‖² − 2⟨a, b⟩), one matrix product instead of scipy's ``pdist`` loop (tens
    of times faster for thousands of rows, equal up to rounding): FL+HC uses it on
    sketches, whose distances are estimates anyway, and keeps ``pdist`` on exact updates.
    The average, complete and Ward linkages of 2,048 or more clients run in place on that
    condensed vector (:func:`.nn_chain.linkage`: scipy's tree without scipy's float64 copy
    of the k²/2 distances); single linkage is scipy's (a minimum spanning tree). There the
    Gram distances are stored in float32 (each rounded once, to 6·10⁻⁸ of itself, far
    below the sketches' error), half the memory, and the linkage's updates are rounded to
    float32 as they are stored: the tree of the float64 distances up to that rounding.
    """
    if linkage_name not in LINKAGES or metric not in METRICS:
        raise ValueError(
            f"unknown linkage {linkage_name!r} or metric {metric!r}; linkage must be one of "
            f"{', '.join(LINKAGES)} and metric one of {', '.join(METRICS)}"
        )
    if linkage_name == "ward" and metric != "euclidean":
        raise ValueError(f"linkage='ward' needs metric='euclidean', got metric={metric!r}")
    m = len(updates)
    if m == 0:
        raise ValueError("hierarchical_clusters needs at least one update")
    if m == 1:
        return np.zeros((0, 4))
    condensed: npt.NDArray[np.floating]
    if metric == "cosine":
        condensed = cosine_distances(unit_rows(updates))
    elif gram:
        # estimates on sketches: rounded to float32 where the linkage then runs in place
        single_precision = m >= nn_chain.IN_PLACE_FROM and linkage_name != "single"
        condensed = gram_distances(
            _rows(updates), dtype=np.float32 if single_precision else np.float64
        )
    else:
        condensed = pdist(_rows(updates))
    if linkage_name == "single":
        return np.asarray(linkage(condensed, method="single"), dtype=np.float64)
    # the vector is ours: from 2,048 clients linked in place, without scipy's float64 copy
    return nn_chain.linkage(condensed, m, cast(nn_chain.ChainMethod, linkage_name))


def _rows(updates: Sequence[FloatArray] | Float64Array) -> Float64Array:
    """The updates as one (m, n) float64 array (not copied when they already are one)."""
    if isinstance(updates, np.ndarray):
        return np.asarray(updates, dtype=np.float64)
    return np.stack([np.asarray(u, dtype=np.float64) for u in updates])


def flat_labels(tree: Float64Array, distance_threshold: float, m: int) -> IntArray:
    """Clusters of a cut at ``distance_threshold``, numbered in order of first appearance."""
    if m == 1:
        return np.zeros(1, dtype=np.int64)
    flat = fcluster(tree, t=distance_threshold, criterion="distance")
    order: dict[int, int] = {}
    return np.array([order.setdefault(int(f), len(order)) for f in flat], dtype=np.int64)


def largest_gap_cut(heights: Float64Array, *, min_clusters: int, max_clusters: int | None) -> float:
    """The cut height in the middle of the largest log-height gap.

    Parameters
    ----------
    heights : array of shape (n - 1,), float64
        Merge heights of a dendrogram of n clients, ascending (scipy's ``linkage[:, 2]``).
    min_clusters, max_clusters : int
        Bounds on the number of clusters the cut leaves (``max_clusters`` None: n − 1).
        Cutting between the j-th and (j+1)-th heights leaves n − j clusters; the bounds are
        clipped to what n clients allow.

    Returns
    -------
    float
        A height strictly between the two heights of the chosen gap (their geometric mean,
        or their arithmetic mean where the lower one is 0), to be used with scipy's
        ``fcluster(criterion="distance")``. With fewer than three clients, or when the
        bounds leave only one cluster count, the cut that gives that count (above every
        height for one cluster).
    """
    h = np.sort(np.asarray(heights, dtype=np.float64))
    n = len(h) + 1
    low = max(1, min(min_clusters, n))
    high = n if max_clusters is None else max(low, min(max_clusters, n))
    # cutting after j merges (0 <= j <= n - 1) leaves n - j clusters; gaps exist for
    # 1 <= j <= n - 2 (between the j-th and the (j+1)-th height)
    candidates = [j for j in range(1, n - 1) if low <= n - j <= high]
    if not candidates:
        merges = n - high if n - high >= 1 else 0
        return _between(h, merges)
    logs = np.log(np.maximum(h, np.finfo(np.float64).tiny))
    gaps = np.array([logs[j] - logs[j - 1] for j in candidates])
    return _between(h, candidates[int(np.argmax(gaps))])


def _between(h: Float64Array, merges: int) -> float:
    """A height that keeps the first ``merges`` merges and refuses the others."""
    if merges <= 0:
        return float(h[0]) / 2.0 if len(h) and h[0] > 0 else -1.0
    if merges >= len(h):
        return float(h[-1]) * 2.0 + 1.0
    lower, upper = float(h[merges - 1]), float(h[merges])
    if lower > 0:
        return float(np.sqrt(lower * upper))
    return (lower + upper) / 2.0


def weakest_heights(tree: Float64Array, labels: IntArray) -> dict[int, float]:
    """Per flat cluster of ``labels``, the height of the highest merge inside it.

    Parameters
    ----------
    tree : array of shape (n - 1, 4)
        scipy linkage matrix of the n clients.
    labels : array of shape (n,)
        Flat cluster of each client (a cut of ``tree``).

    Returns
    -------
    dict of int to float
        Clusters of one client are absent (no merge built them).
    """
    n = len(labels)
    members: list[list[int]] = [[i] for i in range(n)]
    weakest: dict[int, float] = {}
    for left, right, height, _ in tree:
        joined = members[int(left)] + members[int(right)]
        members.append(joined)
        found = {int(labels[i]) for i in joined}
        if len(found) == 1:
            label = found.pop()
            weakest[label] = max(weakest.get(label, -np.inf), float(height))
    return weakest
