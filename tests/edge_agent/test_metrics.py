"""An agent's metrics: the design's names, a series per class from the start, batch semantics."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from edge_agent.metrics import TASK_REJECT_REASONS, AgentMetrics
from edge_agent.model_intake import ModelRejectReason
from faultfleet.wire.codec import RejectReason
from tests.faultfleet.scrape import exposed_types, naming_problems, samples, value

DESIGN_METRICS = {
    "faultfleet_windows_processed_total": "counter",
    "faultfleet_inference_latency_seconds": "histogram",
    "faultfleet_model_version": "gauge",
    "faultfleet_diagnosis_streak_windows": "gauge",
    "faultfleet_diagnosis_streak_min_probability_ratio": "gauge",
    "faultfleet_build_info": "gauge",
    "faultfleet_local_training_seconds": "histogram",
    "faultfleet_diagnoses_total": "counter",
    "faultfleet_models_rejected_total": "counter",
    "faultfleet_tasks_rejected_total": "counter",
    "faultfleet_incoming_files_refused_total": "counter",
    "faultfleet_tasks_queue_full_total": "counter",
    "faultfleet_clock_skew_seconds": "gauge",
    "faultfleet_thread_errors_total": "counter",
    "faultfleet_thread_restarts_total": "counter",
    "faultfleet_diagnosis_log_failures_total": "counter",
    "faultfleet_broker_connected": "gauge",
    "faultfleet_outbox_diagnoses": "gauge",
    "faultfleet_diagnoses_dropped_total": "counter",
    "faultfleet_tasks_repeated_total": "counter",
}
CLASSES = ("healthy", "inner_race", "outer_race")


def diagnoses(registry: CollectorRegistry) -> dict[str, float]:
    return {
        dict(labels)["class_name"]: v
        for (name, labels), v in samples(registry).items()
        if name == "faultfleet_diagnoses_total"
    }


def test_metrics_are_the_designs_and_follow_the_naming_rule() -> None:
    # Execute
    types = exposed_types(AgentMetrics(class_names=CLASSES).registry)

    # Assert
    assert types == DESIGN_METRICS
    assert naming_problems(types) == []


def test_every_class_has_a_series_and_no_model_reads_minus_one_from_the_start() -> None:
    # Execute
    metrics = AgentMetrics(class_names=CLASSES)

    # Assert
    assert diagnoses(metrics.registry) == dict.fromkeys(CLASSES, 0.0)
    assert value(metrics.registry, "faultfleet_model_version") == -1.0
    assert value(metrics.registry, "faultfleet_windows_processed_total") == 0.0


def test_one_call_counts_every_window_and_its_class_and_one_latency() -> None:
    # Prepare
    metrics = AgentMetrics(class_names=CLASSES)

    # Execute
    metrics.observe_diagnoses([2, 2, 0, 2], latency_s=0.004)

    # Assert
    reg = metrics.registry
    assert value(reg, "faultfleet_windows_processed_total") == 4.0
    assert diagnoses(reg) == {"healthy": 1.0, "inner_race": 0.0, "outer_race": 3.0}
    assert value(reg, "faultfleet_inference_latency_seconds_count") == 1.0
    assert value(reg, "faultfleet_inference_latency_seconds_sum") == pytest.approx(0.004)
    assert value(reg, "faultfleet_inference_latency_seconds_bucket", le="0.0025") == 0.0
    assert value(reg, "faultfleet_inference_latency_seconds_bucket", le="0.005") == 1.0


def test_one_window_records_what_a_batch_of_one_records() -> None:
    # Prepare
    single, batch = AgentMetrics(class_names=CLASSES), AgentMetrics(class_names=CLASSES)

    # Execute
    for class_id, latency_s in [(2, 0.004), (0, 0.001), (2, 0.02)]:
        single.observe_diagnosis(class_id, latency_s)
        batch.observe_diagnoses([class_id], latency_s)
    with pytest.raises(ValueError, match="class id 3 is outside the 3 known classes"):
        single.observe_diagnosis(3, 0.001)
    with pytest.raises(ValueError, match="latency nan s must be a finite number"):
        single.observe_diagnosis(0, float("nan"))

    # Assert
    names = ["faultfleet_windows_processed_total", "faultfleet_inference_latency_seconds_sum"]
    names += ["faultfleet_inference_latency_seconds_count"]
    for name in names:
        assert value(single.registry, name) == value(batch.registry, name)
    assert diagnoses(single.registry) == diagnoses(batch.registry)
    assert value(single.registry, "faultfleet_windows_processed_total") == 3.0


def test_an_empty_batch_records_nothing() -> None:
    # Prepare
    metrics = AgentMetrics(class_names=CLASSES)

    # Execute
    metrics.observe_diagnoses([], latency_s=0.001)

    # Assert
    assert value(metrics.registry, "faultfleet_inference_latency_seconds_count") == 0.0


def test_an_unknown_class_id_is_refused_and_counts_nothing() -> None:
    # Prepare
    metrics = AgentMetrics(class_names=CLASSES)

    # Execute
    with pytest.raises(ValueError, match="class id 3 is outside the 3 known classes"):
        metrics.observe_diagnoses([0, 3], latency_s=0.001)

    # Assert
    assert value(metrics.registry, "faultfleet_windows_processed_total") == 0.0
    assert diagnoses(metrics.registry) == dict.fromkeys(CLASSES, 0.0)


def test_class_names_learned_later_add_series_and_keep_old_counts() -> None:
    # Prepare
    metrics = AgentMetrics()
    with pytest.raises(ValueError, match="outside the 0 known classes"):
        metrics.observe_diagnoses([0], latency_s=0.001)
    metrics.set_class_names(["healthy", "outer_race"])
    metrics.observe_diagnoses([1], latency_s=0.001)

    # Execute
    metrics.set_class_names(CLASSES)
    metrics.observe_diagnoses([1], latency_s=0.001)

    # Assert
    assert metrics.class_names == CLASSES
    assert diagnoses(metrics.registry) == {"healthy": 0.0, "inner_race": 1.0, "outer_race": 1.0}
    with pytest.raises(ValueError, match="distinct"):
        metrics.set_class_names(["a", "a"])


def test_agents_sharing_one_instance_add_up() -> None:
    # Prepare
    shared = AgentMetrics(class_names=CLASSES)

    # Execute: two simulated agents in one lab process
    shared.observe_diagnoses([0, 1], latency_s=0.002)
    shared.observe_diagnoses([1], latency_s=0.003)
    shared.observe_training(12.0)
    shared.observe_training(30.0)

    # Assert
    reg = shared.registry
    assert value(reg, "faultfleet_windows_processed_total") == 3.0
    assert value(reg, "faultfleet_inference_latency_seconds_count") == 2.0
    assert value(reg, "faultfleet_local_training_seconds_count") == 2.0
    assert value(reg, "faultfleet_local_training_seconds_sum") == 42.0


def test_model_version_rejections_and_connection() -> None:
    # Prepare
    metrics = AgentMetrics(CollectorRegistry(), CLASSES)

    # Execute
    metrics.set_model_version(4)
    metrics.model_rejected(ModelRejectReason.UNKNOWN_KEY)
    metrics.model_rejected(ModelRejectReason.UNKNOWN_KEY)
    metrics.task_rejected(RejectReason.MALFORMED)
    metrics.set_connected(True)
    metrics.set_connected(False)

    # Assert
    reg = metrics.registry
    assert value(reg, "faultfleet_model_version") == 4.0
    assert value(reg, "faultfleet_models_rejected_total", reason="unknown_key") == 2.0
    assert value(reg, "faultfleet_models_rejected_total", reason="unsigned") == 0.0
    assert value(reg, "faultfleet_tasks_rejected_total", reason="malformed") == 1.0
    assert value(reg, "faultfleet_broker_connected") == 0.0
    with pytest.raises(ValueError, match="model version -2"):
        metrics.set_model_version(-2)
    with pytest.raises(ValueError, match="training time nan"):
        metrics.observe_training(float("nan"))


def test_every_rejection_reason_has_a_series_from_the_start() -> None:
    # Execute
    found = samples(AgentMetrics(class_names=CLASSES).registry)

    # Assert
    model_reasons = {
        dict(labels)["reason"]
        for (name, labels) in found
        if name == "faultfleet_models_rejected_total"
    }
    task_reasons = {
        dict(labels)["reason"]
        for (name, labels) in found
        if name == "faultfleet_tasks_rejected_total"
    }
    assert model_reasons == {reason.value for reason in ModelRejectReason}
    assert task_reasons == {reason.value for reason in TASK_REJECT_REASONS}
