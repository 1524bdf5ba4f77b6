"""The coordinator's cluster series, in the metrics package :mod:`coordinator.adapters.metrics`.

The set of clusters changes while the coordinator runs, so the per-cluster series (agents,
accuracy and serving model version by ``cluster``) are replaced as a whole: clusters that
no longer exist stop being reported, and a scrape in between never sees an empty set.
Cluster quality (:mod:`coordinator.strategies.quality`) is reported as run-level summaries
without labels, so its cardinality does not grow with the fleet; NaN reads "no figure".

:class:`ClusterMetrics` is not built on its own: :class:`~coordinator.adapters.metrics.
CoordinatorMetrics`, the one metrics class of the coordinator process, derives from it and
registers these families on its registry (:meth:`ClusterMetrics._add_clusters`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from faultfleet.wire.topics import check_name


class ClusterMetrics:
    """The cluster families of :class:`~coordinator.adapters.metrics.CoordinatorMetrics`
    and the methods that set them."""

    def _add_clusters(self, reg: CollectorRegistry) -> None:
        """Register the cluster families on ``reg``; quality reads NaN until reported."""
        self.clusters = Gauge(
            "faultfleet_clusters", "Clusters (models) the strategy holds.", registry=reg
        )
        self.cluster_size_agents = Gauge(
            "faultfleet_cluster_size_agents",
            "Agents assigned to each cluster.",
            ["cluster"],
            registry=reg,
        )
        self.cluster_accuracy_ratio = Gauge(
            "faultfleet_cluster_accuracy_ratio",
            "Mean test accuracy (0 to 1) of each cluster's agents at the last evaluation.",
            ["cluster"],
            registry=reg,
        )
        self.cluster_model_version = Gauge(
            "faultfleet_cluster_model_version",
            "Model version that serves each cluster.",
            ["cluster"],
            registry=reg,
        )
        self.cluster_confidence_ratio = Gauge(
            "faultfleet_cluster_confidence_ratio",
            "Confidence in the clustering without ground truth (0 to 1): the lowest cluster "
            "score; NaN while no cluster can be scored.",
            registry=reg,
        )
        self.cluster_min_margin = Gauge(
            "faultfleet_cluster_min_margin",
            "Smallest margin of a cluster to its nearest cluster, in the strategy's similarity "
            "(cohesion minus the nearest cross similarity); NaN while none is known.",
            registry=reg,
        )
        self.clusters_borderline = Gauge(
            "faultfleet_clusters_borderline",
            "Clusters whose score is below the borderline bar (0.5).",
            registry=reg,
        )
        self.merges_borderline = Counter(
            "faultfleet_merges_borderline_total",
            "Merges of two clusters whose score was below the borderline bar (0.5).",
            registry=reg,
        )
        self.cluster_confidence_ratio.set(math.nan)
        self.cluster_min_margin.set(math.nan)
        self._size_clusters: set[str] = set()
        self._accuracy_clusters: set[str] = set()
        self._version_clusters: set[str] = set()

    def set_clusters(self, sizes: Mapping[str, int]) -> None:
        """Replace the cluster set: its size and the number of agents in each cluster.

        Parameters
        ----------
        sizes : Mapping[str, int]
            Agents per cluster id, for every cluster that exists now; clusters reported
            before and missing here are removed from ``faultfleet_cluster_size_agents``.
        """
        for cluster, size in sizes.items():
            check_name("cluster id", cluster)
            if size < 0:
                raise ValueError(f"cluster {cluster!r} has size {size}; sizes must be >= 0")
        self._size_clusters = _replace(self.cluster_size_agents, self._size_clusters, sizes)
        self.clusters.set(len(sizes))

    def set_cluster_accuracy(self, accuracy: Mapping[str, float]) -> None:
        """Replace the per-cluster accuracies (ratios from 0 to 1, not percentages).

        Clusters reported before and missing here are removed from
        ``faultfleet_cluster_accuracy_ratio``.
        """
        for cluster, value in accuracy.items():
            check_name("cluster id", cluster)
            if not 0.0 <= value <= 1.0:
                raise ValueError(
                    f"accuracy {value!r} of cluster {cluster!r} must be a ratio from 0 to 1"
                )
        self._accuracy_clusters = _replace(
            self.cluster_accuracy_ratio, self._accuracy_clusters, accuracy
        )

    def set_cluster_quality(
        self,
        confidence: float | None,
        min_margin: float | None,
        borderline_clusters: int,
        borderline_merges: int = 0,
    ) -> None:
        """Report the run's cluster quality; None is reported as NaN ("no figure").

        Parameters
        ----------
        confidence : float or None
            Ratio from 0 to 1.
        min_margin : float or None
            Smallest cluster margin, in the strategy's similarity.
        borderline_clusters : int
            Borderline clusters now (>= 0).
        borderline_merges : int
            Borderline merges made since the last report (>= 0), added to the counter.
        """
        if confidence is not None and not 0.0 <= confidence <= 1.0:
            raise ValueError(f"confidence {confidence!r} must be a ratio from 0 to 1")
        if borderline_clusters < 0 or borderline_merges < 0:
            raise ValueError(
                f"borderline counts must be >= 0 (got clusters={borderline_clusters}, "
                f"merges={borderline_merges})"
            )
        self.cluster_confidence_ratio.set(math.nan if confidence is None else confidence)
        self.cluster_min_margin.set(math.nan if min_margin is None else min_margin)
        self.clusters_borderline.set(borderline_clusters)
        self.merges_borderline.inc(borderline_merges)

    def set_serving_versions(self, versions: Mapping[str, int]) -> None:
        """Replace the serving model version of every cluster."""
        for cluster in versions:
            check_name("cluster id", cluster)
        self._version_clusters = _replace(
            self.cluster_model_version, self._version_clusters, dict(versions)
        )


def _replace(gauge: Gauge, current: set[str], values: Mapping[str, float]) -> set[str]:
    """Set ``gauge{cluster}`` to ``values`` and remove series of clusters not in it.

    Stale series are removed one by one rather than clearing the gauge first, so a scrape
    in between never sees an empty set.
    """
    for cluster in current - values.keys():
        gauge.remove(cluster)
    for cluster, value in values.items():
        gauge.labels(cluster=cluster).set(value)
    return set(values)
