"""QualityWatch: cluster quality into the summary and metrics, borderline merges into the log."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.runtime.quality_watch import MERGE_CLIENTS_LISTED, QualityWatch
from coordinator.runtime.run_summary import RunSummary
from coordinator.strategies.base import Merge
from coordinator.strategies.flacc import FLACC
from tests.coordinator.fakes import seeded_factory
from tests.faultfleet.scrape import value

IDS = [f"m{i:02d}" for i in range(6)]
GROUPS = np.array([0, 0, 1, 1, 2, 2])


def flacc_after_merge(entities: list[tuple[int, ...]], merge: Merge) -> FLACC:
    """A FLACC whose last round (7) made ``merge``: FLACC's own state, set by hand."""
    strategy = FLACC()
    strategy.initialize(IDS, seeded_factory())
    alpha = np.where(GROUPS[:, None] == GROUPS[None, :], 0.8, 0.05)
    np.fill_diagonal(alpha, -1.0)  # FLACC's "unknown" on the diagonal
    strategy.alpha_ = alpha
    strategy._set_entities(entities)
    strategy.merge_history_.add(merge)
    return strategy


def test_a_borderline_merge_is_logged_counted_and_summarised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Prepare: round 7 merged group 0's pair with group 1's pair at cosine 0.05
    wrong = Merge(7, ("m00", "m01"), ("m02", "m03"), 0.05, 0.0)
    strategy = flacc_after_merge([(0, 1, 2, 3), (4, 5)], wrong)
    metrics = CoordinatorMetrics()
    summary = RunSummary(run_id="r", strategy="flacc")

    # Execute
    with caplog.at_level(logging.WARNING, logger="coordinator.runtime.quality_watch"):
        quality = QualityWatch(metrics).observe(strategy, 7, summary)

    # Assert
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "round 7: borderline merge of [m00, m01] and [m02, m03]" in warnings[0]
    assert quality.confidence == pytest.approx(0.0)
    assert summary.cluster_quality["confidence"] == pytest.approx(0.0)
    assert summary.cluster_quality["merges"][0]["borderline"] is True
    assert value(metrics.registry, "faultfleet_merges_borderline_total") == 1.0
    assert value(metrics.registry, "faultfleet_cluster_confidence_ratio") == 0.0


def test_a_clean_merge_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    # Prepare: round 7 merged the two members of group 2
    right = Merge(7, ("m04",), ("m05",), 0.8, 0.0)
    strategy = flacc_after_merge([(0, 1), (2, 3), (4, 5)], right)
    metrics = CoordinatorMetrics()
    summary = RunSummary(run_id="r", strategy="flacc")

    # Execute
    with caplog.at_level(logging.WARNING, logger="coordinator.runtime.quality_watch"):
        quality = QualityWatch(metrics).observe(strategy, 7, summary)

    # Assert
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert quality.confidence == pytest.approx(1.0)
    assert value(metrics.registry, "faultfleet_merges_borderline_total") == 0.0
    assert value(metrics.registry, "faultfleet_clusters_borderline") == 0.0


def test_a_settled_borderline_cluster_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    # Prepare: separated entities, one of which joins groups 0 and 1 (merged long ago)
    wrong = Merge(3, ("m00", "m01"), ("m02", "m03"), 0.05, 0.0)
    strategy = flacc_after_merge([(0, 1, 2, 3), (4, 5)], wrong)
    strategy.separated_ = True
    watch = QualityWatch(CoordinatorMetrics())
    summary = RunSummary(run_id="r", strategy="flacc")

    # Execute
    with caplog.at_level(logging.WARNING, logger="coordinator.runtime.quality_watch"):
        watch.observe(strategy, 20, summary)
        watch.observe(strategy, 21, summary)

    # Assert
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith("round 20: borderline cluster 0 of [m00, m01, m02, m03]")


def test_the_summary_lists_at_most_the_first_clients_of_a_large_merge() -> None:
    # Prepare: a merge of 70 clients with 60 others, in round 7
    ids = [f"m{i:03d}" for i in range(130)]
    strategy = FLACC()
    strategy.initialize(ids, seeded_factory())
    strategy._set_entities([tuple(range(130))])
    strategy.merge_history_.add(Merge(7, tuple(ids[:70]), tuple(ids[70:]), 0.5, 0.0))
    summary = RunSummary(run_id="r", strategy="flacc")

    # Execute
    QualityWatch(CoordinatorMetrics()).observe(strategy, 7, summary)

    # Assert: the first MERGE_CLIENTS_LISTED of each group, and both sizes
    merge = summary.cluster_quality["merges"][0]
    assert merge["first"] == ids[:MERGE_CLIENTS_LISTED]
    assert merge["second"] == ids[70 : 70 + MERGE_CLIENTS_LISTED]
    assert (merge["first_size"], merge["second_size"]) == (70, 60)
