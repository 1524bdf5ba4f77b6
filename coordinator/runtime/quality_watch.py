"""Cluster quality between rounds: into the run summary and the metrics, doubts into the log.

After every round :class:`QualityWatch` judges the strategy's clustering without ground
truth (:mod:`coordinator.strategies.quality`), writes the figures to the run summary
(``summary.json``'s ``cluster_quality``, each merge naming at most
:data:`MERGE_CLIENTS_LISTED` clients per group) and the run-level summaries to the
metrics, and logs a warning

* for every merge of the round whose score is borderline (FLACC): the merged cluster may
  join two different groups of machines;
* for every cluster that becomes borderline while the strategy's clusters are settled
  (FLACC after separation, FL+HC after its clustering round, …); a cluster that stays
  borderline is not repeated, a restarted coordinator says it once more.
"""

from __future__ import annotations

import logging

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.runtime.run_summary import RunSummary
from coordinator.strategies.base import Strategy
from coordinator.strategies.quality import BORDERLINE, ClusterQuality, RunQuality, assess

logger = logging.getLogger(__name__)

MERGE_CLIENTS_LISTED = 50
"""Client ids listed per group of a merge in ``summary.json`` (each group's size is given):
a fleet of 20,000 agents merged 1.5 million clients in one round of clustering, 15 MB of
ids rewritten after every round that nobody reads one by one."""


class QualityWatch:
    """Judges the clustering after each round (module docstring).

    Parameters
    ----------
    metrics : CoordinatorMetrics
    """

    def __init__(self, metrics: CoordinatorMetrics) -> None:
        self.metrics = metrics
        self._borderline: set[frozenset[str]] = set()

    def observe(self, strategy: Strategy, server_round: int, summary: RunSummary) -> RunQuality:
        """Judge ``strategy``'s clustering after ``server_round``; update, report, warn."""
        quality = assess(strategy.cluster_evidence(), server_round)
        summary.cluster_quality = quality.to_json(listed=MERGE_CLIENTS_LISTED)
        borderline_merges = quality.borderline_merges
        self.metrics.set_cluster_quality(
            quality.confidence,
            quality.min_margin,
            quality.borderline_clusters,
            len(borderline_merges),
        )
        for scored in borderline_merges:
            merge = scored.merge
            logger.warning(
                "round %d: borderline merge of %s and %s at similarity %.3f (bar %.3f): "
                "score %.2f < %.2f, the merged cluster may join two different groups",
                server_round,
                _agents(merge.first),
                _agents(merge.second),
                merge.similarity,
                merge.threshold,
                scored.score,
                BORDERLINE,
            )
        current = {frozenset(c.members) for c in quality.clusters if c.borderline}
        if quality.settled:
            for cluster in quality.clusters:
                if cluster.borderline and frozenset(cluster.members) not in self._borderline:
                    logger.warning("round %d: %s", server_round, _describe(cluster))
        self._borderline = current if quality.settled else set()
        return quality


def _describe(cluster: ClusterQuality) -> str:
    return (
        f"borderline cluster {cluster.label} of {_agents(cluster.members)}: score "
        f"{cluster.score:.2f} < {BORDERLINE} (cohesion {_number(cluster.cohesion)}, weakest "
        f"link {_number(cluster.weakest_link)}, margin {_number(cluster.margin)} to cluster "
        f"{cluster.nearest}); it may join two groups, or split one"
    )


def _agents(members: tuple[str, ...]) -> str:
    shown = ", ".join(members[:4])
    more = f", … {len(members)} agents" if len(members) > 4 else ""
    return f"[{shown}{more}]"


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
