"""Cluster quality without ground truth: cohesion, margins, weakest merges, a run confidence.

Pure functions on a :class:`~coordinator.strategies.evidence.ClusterEvidence`: a clustering
of m clients and a similarity matrix S in the strategy's own measure (higher: more alike;
NaN: never measured, left out of every mean). For a cluster c with members C:

* **cohesion** w(c): the mean of S_ij over the known pairs i < j of C;
* **cross similarity** s(c, d): the mean of S_ij over the known pairs i ∈ C, j ∈ D; the
  **nearest** cluster is the d of highest s(c, d), x(c) = s(c, nearest);
* **margin** m(c) = w(c) − x(c): the cluster-level b − a of Rousseeuw's silhouette
  (J. Comput. Appl. Math. 20, 1987, 53–65) read with the distance 1 − S: how much more
  alike the members are than they are like the nearest other cluster;
* **weakest link** ℓ(c): the members clustered by average linkage (UPGMA; Sokal & Michener,
  1958) on their known pairs, ℓ is the mean similarity of the two parts joined last — the
  analogue of the weakest merge for every strategy (for a pair, ℓ = w);
* **contrast** k(c) = w(c) − (mean of S_ij over the known pairs i ∈ C, j ∉ C): how much
  the cluster stands out from the rest of the fleet pooled;
* **score** q(c) = min(link share, margin share), clipped to [0, 1], where the *link
  share* (ℓ − x) / (w − x) places the weakest link between the nearest other cluster (0)
  and the cluster's own cohesion (1), and the *margin share* m / k is the part of the
  contrast left towards the nearest cluster (0 when w <= x or k <= 0). A cluster that joins
  two groups has a weakest link at the level of unrelated clients (link share near 0); a
  group split in two leaves each half as alike to the other half as to itself (margin
  share near 0); a clean cluster has both near 1. The score and the confidence depend
  neither on the unit or offset of S (a positive affine map) nor on the order of clients;
* **borderline**: q(c) < :data:`BORDERLINE`.

A cluster with no known pair towards any other (a single cluster) is measured against the
similarity of unrelated clients instead of a nearest cluster, where the measure has one
(0 for cosines of updates of one shared model; ``ClusterEvidence.unrelated``).

The run's **confidence** is the lowest score of its clusters (single clients and clusters
without a known pair have none; they count through their neighbours' margins): one
doubtful cluster makes the run doubtful. A merge of groups A and B is judged by the link
share of the merged group, with the two groups as its split and all other groups pooled
as the reference: (s(A, B) − s(A ∪ B, rest)) / (w(A ∪ B) − s(A ∪ B, rest))
(:func:`~coordinator.strategies.quality_maths.merge_score`). While a strategy still
merges, pieces of one true group stand apart, so the nearest would be one of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from coordinator.strategies.evidence import ClusterEvidence, Merge
from coordinator.strategies.quality_maths import (
    Similarity,
    WithinSums,
    average_linkage_split,
    block_sums,
    mean_known,
    merge_score,
    ratio,
    row_totals,
    share,
)
from faultfleet.gc_pause import collector_paused
from faultfleet.types import Float64Array, IntArray

BORDERLINE = 0.5
"""A cluster or merge whose score is below this is borderline."""


@dataclass(frozen=True)
class ClusterQuality:
    """The figures of one cluster (module docstring); None where not defined."""

    label: int
    members: tuple[str, ...]
    cohesion: float | None
    nearest: int | None
    nearest_similarity: float | None
    margin: float | None
    contrast: float | None
    weakest_link: float | None
    score: float | None
    weakest_merge: float | None

    @property
    def size(self) -> int:
        """Number of members."""
        return len(self.members)

    @property
    def borderline(self) -> bool:
        """Whether the score is below :data:`BORDERLINE`."""
        return self.score is not None and self.score < BORDERLINE

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        return {
            "cluster": self.label,
            "size": self.size,
            "members": list(self.members),
            "cohesion": self.cohesion,
            "nearest": self.nearest,
            "nearest_similarity": self.nearest_similarity,
            "margin": self.margin,
            "contrast": self.contrast,
            "weakest_link": self.weakest_link,
            "score": self.score,
            "weakest_merge": self.weakest_merge,
            "borderline": self.borderline,
        }


@dataclass(frozen=True)
class MergeQuality:
    """A merge and its score (:func:`merge_score`; None where it cannot be judged)."""

    merge: Merge
    score: float | None

    @property
    def borderline(self) -> bool:
        """Whether the score is below :data:`BORDERLINE`."""
        return self.score is not None and self.score < BORDERLINE

    def to_json(self, listed: int | None = None) -> dict[str, Any]:
        """A JSON-ready copy: each group's size, and its client ids (the first ``listed``
        of them when given)."""
        m = self.merge
        return {
            "round": m.round,
            "first": list(m.first[:listed]),
            "second": list(m.second[:listed]),
            "first_size": len(m.first),
            "second_size": len(m.second),
            "similarity": m.similarity,
            "threshold": m.threshold,
            "score": self.score,
            "borderline": self.borderline,
        }


@dataclass(frozen=True)
class RunQuality:
    """The figures of a whole clustering.

    Attributes
    ----------
    basis : {"learned", "given", "none"}
        ``given``: the clusters are not learned (confidence 1); ``none``: the strategy
        exposes no similarity (no figures).
    confidence : float or None
        Lowest cluster score, in [0, 1]; 1 for given clusters; None when no cluster has a
        score.
    """

    basis: str
    measure: str
    merge_measure: str
    settled: bool
    confidence: float | None
    clusters: tuple[ClusterQuality, ...]
    merges: tuple[MergeQuality, ...]
    """The merges of the round :func:`assess` was asked about, scored."""

    @property
    def min_margin(self) -> float | None:
        """Smallest margin over the clusters that have one."""
        margins = [c.margin for c in self.clusters if c.margin is not None]
        return min(margins) if margins else None

    @property
    def borderline_clusters(self) -> int:
        """How many clusters are borderline."""
        return sum(c.borderline for c in self.clusters)

    @property
    def borderline_merges(self) -> tuple[MergeQuality, ...]:
        """The scored merges whose score is below :data:`BORDERLINE`."""
        return tuple(m for m in self.merges if m.borderline)

    def to_json(self, listed: int | None = None) -> dict[str, Any]:
        """A JSON-ready copy (``results.json``, ``summary.json``); with ``listed``, each
        merge names the first ``listed`` clients of a group (its size is always given)."""
        return {
            "basis": self.basis,
            "measure": self.measure,
            "merge_measure": self.merge_measure,
            "settled": self.settled,
            "confidence": self.confidence,
            "min_margin": self.min_margin,
            "borderline_clusters": self.borderline_clusters,
            "clusters": [c.to_json() for c in self.clusters],
            "merges": [r.to_json(listed) for r in self.merges],
        }


def assess(evidence: ClusterEvidence, server_round: int | None = None) -> RunQuality:
    """Every figure of the module docstring for ``evidence``.

    Parameters
    ----------
    server_round : int, optional
        Score the merges made in this round (judged on the similarities and clusters the
        evidence holds now, which are those the merges of its last round saw); none when
        omitted.

    The cyclic garbage collector is off meanwhile (:func:`~faultfleet.gc_pause.
    collector_paused`): the splits of large clusters build heaps and dicts of short-lived
    containers, which set off full collections of the coordinator's heap.
    """
    with collector_paused():
        return _assess(evidence, server_round)


def _assess(evidence: ClusterEvidence, server_round: int | None) -> RunQuality:
    labels = np.asarray(evidence.labels, dtype=np.int64)
    names = sorted(set(evidence.labels))
    members = [np.flatnonzero(labels == k) for k in names]
    similarity = evidence.similarity
    recent = [m for m in evidence.merges if m.round == server_round]
    if similarity is None:
        clusters = tuple(_bare(k, rows, evidence) for k, rows in zip(names, members, strict=True))
        return RunQuality(
            "none" if evidence.learned else "given",
            evidence.measure,
            evidence.merge_measure,
            evidence.settled,
            None if evidence.learned else 1.0,
            clusters,
            tuple(MergeQuality(m, None) for m in recent),
        )
    sums, counts = block_sums(similarity, labels, names)
    clusters = tuple(
        _cluster(position, names, rows, similarity, sums, counts, evidence)
        for position, rows in enumerate(members)
    )
    scores = [c.score for c in clusters if c.score is not None]
    merges: tuple[MergeQuality, ...] = ()
    if recent:
        index = {c: i for i, c in enumerate(evidence.client_ids)}
        totals = row_totals(similarity)
        within: WithinSums = {}  # one entity's pairs read once for all merges growing it
        merges = tuple(
            MergeQuality(m, _score_merge(m, similarity, index, totals, within)) for m in recent
        )
    return RunQuality(
        "learned" if evidence.learned else "given",
        evidence.measure,
        evidence.merge_measure,
        evidence.settled,
        (min(scores) if scores else None) if evidence.learned else 1.0,
        clusters,
        merges,
    )


def _score_merge(
    merge: Merge,
    similarity: Similarity,
    index: dict[str, int],
    totals: tuple[Float64Array, Float64Array],
    within: WithinSums,
) -> float | None:
    """:func:`merge_score` of ``merge`` against today's clusters less its two groups."""
    first = np.asarray([index[c] for c in merge.first if c in index], dtype=np.intp)
    second = np.asarray([index[c] for c in merge.second if c in index], dtype=np.intp)
    if not len(first) or not len(second):
        return None
    return merge_score(similarity, first, second, totals, within)


# -- helpers ---------------------------------------------------------------------------------


def _bare(label: int, rows: IntArray, evidence: ClusterEvidence) -> ClusterQuality:
    ids = tuple(evidence.client_ids[int(i)] for i in rows)
    weakest = evidence.weakest_merges.get(label)
    return ClusterQuality(label, ids, None, None, None, None, None, None, None, weakest)


def _cluster(
    position: int,
    names: Sequence[int],
    rows: IntArray,
    similarity: Similarity,
    sums: Float64Array,
    counts: Float64Array,
    evidence: ClusterEvidence,
) -> ClusterQuality:
    label = names[position]
    bare = _bare(label, rows, evidence)
    cohesion = ratio(sums[position, position], counts[position, position])
    with np.errstate(invalid="ignore", divide="ignore"):
        cross = np.where(counts[position] > 0, sums[position] / counts[position], -np.inf)
    cross[position] = -np.inf
    nearest = int(np.argmax(cross)) if np.isfinite(cross).any() else None
    x = evidence.unrelated if nearest is None else float(cross[nearest])
    margin = None if cohesion is None or x is None else cohesion - x
    outside = counts[position].sum() - counts[position, position]
    rest = ratio(sums[position].sum() - sums[position, position], outside)
    if rest is None:
        rest = evidence.unrelated
    contrast = None if cohesion is None or rest is None else cohesion - rest
    split = average_linkage_split(similarity, rows) if len(rows) >= 2 else None
    link = None if split is None else mean_known(similarity, *split)
    score = None
    if margin is not None and contrast is not None and x is not None:
        score = share(margin, contrast)
        if link is not None:
            score = min(score, share(link - x, margin))
    return ClusterQuality(
        label,
        bare.members,
        cohesion,
        None if nearest is None else names[nearest],
        x,
        margin,
        contrast,
        link,
        score,
        bare.weakest_merge,
    )
