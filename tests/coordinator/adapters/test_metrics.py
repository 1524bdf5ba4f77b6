"""The coordinator's metrics: the design's names, every series from the start, no stale clusters."""

from __future__ import annotations

import math
from typing import cast

import pytest
from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.engine.promotion import Decision
from faultfleet.wire.codec import RejectReason
from tests.faultfleet.scrape import exposed_types, naming_problems, samples, value

DESIGN_METRICS = {
    "faultfleet_rounds_total": "counter",
    "faultfleet_round": "gauge",
    "faultfleet_round_duration_seconds": "histogram",
    "faultfleet_updates_received_total": "counter",
    "faultfleet_updates_rejected_total": "counter",
    "faultfleet_payload_received_bytes_total": "counter",
    "faultfleet_payload_sent_bytes_total": "counter",
    "faultfleet_agents_online": "gauge",
    "faultfleet_agents_registered": "gauge",
    "faultfleet_agents_by_state": "gauge",
    "faultfleet_rounds_without_quorum_total": "counter",
    "faultfleet_tasks_resent_total": "counter",
    "faultfleet_ingest_workers_missing_total": "counter",
    "faultfleet_updates_clipped_total": "counter",
    "faultfleet_build_info": "gauge",
    "faultfleet_clusters": "gauge",
    "faultfleet_federation_agents": "gauge",
    "faultfleet_membership_changes_total": "counter",
    "faultfleet_cluster_size_agents": "gauge",
    "faultfleet_cluster_accuracy_ratio": "gauge",
    "faultfleet_models_published_total": "counter",
    "faultfleet_promotions_total": "counter",
    "faultfleet_cluster_model_version": "gauge",
    "faultfleet_broker_connected": "gauge",
    "faultfleet_answers_held_bytes": "gauge",
    "faultfleet_answers_backpressure_seconds_total": "counter",
    "faultfleet_cluster_confidence_ratio": "gauge",
    "faultfleet_cluster_min_margin": "gauge",
    "faultfleet_clusters_borderline": "gauge",
    "faultfleet_merges_borderline_total": "counter",
    "faultfleet_campaign_state": "gauge",
    "faultfleet_campaigns_total": "counter",
    "faultfleet_new_labelled_windows": "gauge",
}

QUALITY_METRICS = (
    "faultfleet_cluster_confidence_ratio",
    "faultfleet_cluster_min_margin",
    "faultfleet_clusters_borderline",
    "faultfleet_merges_borderline_total",
)


def cluster_series(registry: CollectorRegistry, name: str) -> dict[str, float]:
    return {
        dict(labels)["cluster"]: v
        for (sample, labels), v in samples(registry).items()
        if sample == name
    }


def test_metrics_are_the_designs_and_follow_the_naming_rule() -> None:
    # Execute
    types = exposed_types(CoordinatorMetrics().registry)

    # Assert
    assert types == DESIGN_METRICS
    assert naming_problems(types) == []


def test_every_reject_reason_is_reported_as_zero_from_the_start() -> None:
    # Prepare
    metrics = CoordinatorMetrics()

    # Execute
    scraped = {
        dict(labels)["reason"]: v
        for (name, labels), v in samples(metrics.registry).items()
        if name == "faultfleet_updates_rejected_total"
    }

    # Assert
    assert scraped == {reason.value: 0.0 for reason in RejectReason}
    assert len(scraped) == 9


def test_reject_counts_under_its_reason_and_refuses_unknown_reasons() -> None:
    # Prepare
    metrics = CoordinatorMetrics()

    # Execute
    metrics.reject(RejectReason.NOT_FINITE)
    metrics.reject(RejectReason.LATE, n=3)

    # Assert
    reg = metrics.registry
    assert value(reg, "faultfleet_updates_rejected_total", reason="not_finite") == 1.0
    assert value(reg, "faultfleet_updates_rejected_total", reason="late") == 3.0
    with pytest.raises(ValueError, match="'because'"):
        metrics.reject("because")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n must be >= 0"):
        metrics.reject(RejectReason.LATE, n=-1)


def test_clipped_updates_are_counted_by_rule_from_zero() -> None:
    metrics = CoordinatorMetrics()
    before = {
        rule: value(metrics.registry, "faultfleet_updates_clipped_total", rule=rule)
        for rule in ("norm", "weight")
    }

    metrics.count_clipped(norm=3, weight=1)
    metrics.count_clipped(norm=0, weight=2)

    assert before == {"norm": 0.0, "weight": 0.0}
    assert value(metrics.registry, "faultfleet_updates_clipped_total", rule="norm") == 3
    assert value(metrics.registry, "faultfleet_updates_clipped_total", rule="weight") == 3
    with pytest.raises(ValueError, match="must be >= 0"):
        metrics.count_clipped(norm=-1, weight=0)


def test_observe_round_counts_sets_the_round_and_records_the_duration() -> None:
    # Prepare
    metrics = CoordinatorMetrics()

    # Execute
    metrics.observe_round(0.75, server_round=1)
    metrics.observe_round(45.0, server_round=2)

    # Assert
    reg = metrics.registry
    assert value(reg, "faultfleet_rounds_total") == 2.0
    assert value(reg, "faultfleet_round") == 2.0
    assert value(reg, "faultfleet_round_duration_seconds_count") == 2.0
    assert value(reg, "faultfleet_round_duration_seconds_sum") == pytest.approx(45.75)
    assert value(reg, "faultfleet_round_duration_seconds_bucket", le="1.0") == 1.0
    with pytest.raises(ValueError, match=r"-1\.0 s must be"):
        metrics.observe_round(-1.0, server_round=3)


def test_set_clusters_replaces_the_whole_set() -> None:
    # Prepare
    metrics = CoordinatorMetrics()
    metrics.set_clusters({"cluster-0": 30, "cluster-1": 18})

    # Execute
    metrics.set_clusters({"cluster-1": 20, "cluster-2": 28})

    # Assert
    reg = metrics.registry
    assert cluster_series(reg, "faultfleet_cluster_size_agents") == {
        "cluster-1": 20.0,
        "cluster-2": 28.0,
    }
    assert value(reg, "faultfleet_clusters") == 2.0


def test_set_cluster_accuracy_replaces_the_whole_set_and_wants_ratios() -> None:
    # Prepare
    metrics = CoordinatorMetrics()
    metrics.set_cluster_accuracy({"global": 0.4})

    # Execute
    metrics.set_cluster_accuracy({"cluster-0": 0.9, "cluster-1": 0.85})

    # Assert
    assert cluster_series(metrics.registry, "faultfleet_cluster_accuracy_ratio") == {
        "cluster-0": 0.9,
        "cluster-1": 0.85,
    }
    with pytest.raises(ValueError, match=r"92\.0 of cluster 'cluster-0' must be a ratio"):
        metrics.set_cluster_accuracy({"cluster-0": 92.0})


def test_bad_cluster_ids_and_sizes_leave_the_series_unchanged() -> None:
    # Prepare
    metrics = CoordinatorMetrics()
    metrics.set_clusters({"global": 4})

    # Execute / Assert
    with pytest.raises(ValueError, match="cluster id 'a/b'"):
        metrics.set_clusters({"a/b": 1})
    with pytest.raises(ValueError, match="size -2"):
        metrics.set_clusters({"cluster-0": -2})
    assert cluster_series(metrics.registry, "faultfleet_cluster_size_agents") == {"global": 4.0}


def test_agents_connection_and_direct_counters() -> None:
    # Prepare
    metrics = CoordinatorMetrics()

    # Execute
    metrics.set_agents(online=5, registered=7)
    metrics.set_connected(True)
    metrics.updates_received.inc()
    metrics.payload_received_bytes.inc(17_600_000)
    metrics.payload_sent_bytes.inc(2048)
    metrics.models_published.inc()

    # Assert
    reg = metrics.registry
    assert value(reg, "faultfleet_agents_online") == 5.0
    assert value(reg, "faultfleet_agents_registered") == 7.0
    assert value(reg, "faultfleet_broker_connected") == 1.0
    assert value(reg, "faultfleet_updates_received_total") == 1.0
    assert value(reg, "faultfleet_payload_received_bytes_total") == 17_600_000.0
    assert value(reg, "faultfleet_payload_sent_bytes_total") == 2048.0
    assert value(reg, "faultfleet_models_published_total") == 1.0
    with pytest.raises(ValueError, match="online=-1"):
        metrics.set_agents(online=-1, registered=0)


def test_instances_without_a_registry_do_not_collide() -> None:
    # Execute
    first, second = CoordinatorMetrics(), CoordinatorMetrics()
    first.models_published.inc()

    # Assert
    assert value(second.registry, "faultfleet_models_published_total") == 0.0
    shared = CollectorRegistry()
    assert CoordinatorMetrics(shared).registry is shared


def test_cluster_quality_is_reported_without_labels() -> None:
    # Prepare
    metrics = CoordinatorMetrics()
    reg = metrics.registry
    before = samples(reg)

    # Execute
    metrics.set_cluster_quality(0.72, 0.41, borderline_clusters=1, borderline_merges=2)
    metrics.set_cluster_quality(0.30, 0.05, borderline_clusters=2, borderline_merges=1)

    # Assert: one unlabelled series per metric, before and after, whatever the fleet
    scraped = samples(reg)
    for snapshot in (before, scraped):
        quality = [key for key in snapshot if key[0].startswith(QUALITY_METRICS)]
        assert all(labels == () for _, labels in quality)
    assert value(reg, "faultfleet_cluster_confidence_ratio") == pytest.approx(0.30)
    assert value(reg, "faultfleet_cluster_min_margin") == pytest.approx(0.05)
    assert value(reg, "faultfleet_clusters_borderline") == 2.0
    assert value(reg, "faultfleet_merges_borderline_total") == 3.0


def test_cluster_quality_without_a_figure_reads_nan_and_bad_values_are_refused() -> None:
    # Prepare
    metrics = CoordinatorMetrics()
    reg = metrics.registry
    assert math.isnan(value(reg, "faultfleet_cluster_confidence_ratio"))

    # Execute
    metrics.set_cluster_quality(0.9, 0.3, borderline_clusters=0)
    metrics.set_cluster_quality(None, None, borderline_clusters=0)

    # Assert
    assert math.isnan(value(reg, "faultfleet_cluster_confidence_ratio"))
    assert math.isnan(value(reg, "faultfleet_cluster_min_margin"))
    with pytest.raises(ValueError, match="ratio from 0 to 1"):
        metrics.set_cluster_quality(1.5, 0.1, borderline_clusters=0)
    with pytest.raises(ValueError, match="must be >= 0"):
        metrics.set_cluster_quality(0.5, 0.1, borderline_clusters=-1)


def test_every_promotion_decision_is_a_series_from_the_start() -> None:
    metrics = CoordinatorMetrics(CollectorRegistry())

    metrics.count_promotion(Decision.REJECTED)

    values = {
        dict(labels)["decision"]: v
        for (sample, labels), v in samples(metrics.registry).items()
        if sample == "faultfleet_promotions_total"
    }
    assert values == {"promoted": 0, "rejected": 1, "pinned": 0, "rollback": 0}
    with pytest.raises(ValueError, match="maybe"):
        metrics.count_promotion(cast(Decision, "maybe"))


def test_serving_versions_replace_the_cluster_set() -> None:
    metrics = CoordinatorMetrics(CollectorRegistry())

    metrics.set_serving_versions({"a": 3, "b": 4})
    metrics.set_serving_versions({"b": 5})

    assert cluster_series(metrics.registry, "faultfleet_cluster_model_version") == {"b": 5}
