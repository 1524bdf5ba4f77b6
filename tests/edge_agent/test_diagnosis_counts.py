"""The per-window diagnosis metrics: exact at every scrape, exposed as prometheus_client's."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from edge_agent.metrics import INFERENCE_LATENCY_BUCKETS_S
from edge_agent.metrics.diagnosis_counts import DiagnosisCounts, StreakGauge
from tests.faultfleet.scrape import samples

CLASSES = ("healthy", "inner_race", "outer_race")


def without_created(registry: CollectorRegistry) -> list[str]:
    return [
        line for line in generate_latest(registry).decode().splitlines() if "_created" not in line
    ]


def test_the_scrape_reads_what_prometheus_clients_objects_would_read() -> None:
    # Prepare: the same windows counted both ways
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    counts = DiagnosisCounts(ours, INFERENCE_LATENCY_BUCKETS_S)
    windows = Counter(
        "faultfleet_windows_processed_total", "Signal windows diagnosed.", registry=theirs
    )
    latency = Histogram(
        "faultfleet_inference_latency_seconds",
        "Wall time of one ONNX Runtime call (one batch of windows).",
        buckets=INFERENCE_LATENCY_BUCKETS_S,
        registry=theirs,
    )
    diagnoses = Counter(
        "faultfleet_diagnoses_total",
        "Windows diagnosed, by the class the model predicted.",
        ["class_name"],
        registry=theirs,
    )
    for name in CLASSES:
        diagnoses.labels(class_name=name)
    counts.set_class_names(CLASSES)

    # Execute: bounds included, a batch, then new names
    for class_id, latency_s in [(2, 0.0001), (0, 0.00025), (2, 0.3), (1, 7.0), (0, 0.0)]:
        counts.observe_one(class_id, latency_s)
        diagnoses.labels(class_name=CLASSES[class_id]).inc()
        windows.inc()
        latency.observe(latency_s)
    counts.observe_batch([1, 1], 0.002)
    diagnoses.labels(class_name="inner_race").inc(2)
    windows.inc(2)
    latency.observe(0.002)
    counts.set_class_names(("outer_race", "cage"))
    counts.observe_one(1, 0.001)
    diagnoses.labels(class_name="cage").inc()
    windows.inc()
    latency.observe(0.001)

    # Assert: the same text, line for line, and the created timestamps exposed
    assert without_created(ours) == without_created(theirs)
    assert set(samples(ours)) == set(samples(theirs))


def test_windows_counted_by_several_threads_all_show_at_the_scrape() -> None:
    # Prepare
    registry = CollectorRegistry()
    counts = DiagnosisCounts(registry, INFERENCE_LATENCY_BUCKETS_S)
    counts.set_class_names(CLASSES)

    def diagnose() -> None:
        for index in range(1000):
            counts.observe_one(index % 3, 0.001)

    # Execute: four agents of one process
    threads = [threading.Thread(target=diagnose) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Assert
    scraped = samples(registry)
    assert scraped[("faultfleet_windows_processed_total", ())] == 4000.0
    assert scraped[("faultfleet_inference_latency_seconds_count", ())] == 4000.0
    per_class = {
        dict(labels)["class_name"]: value
        for (name, labels), value in scraped.items()
        if name == "faultfleet_diagnoses_total"
    }
    assert per_class == {"healthy": 4 * 334.0, "inner_race": 4 * 333.0, "outer_race": 4 * 333.0}


def test_the_streak_reads_as_gauges_set_one_by_one_would() -> None:
    # Prepare
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    streak = StreakGauge(ours)
    help_text = (
        "Most recent windows in a row diagnosed as this class with at least the streak "
        "probability; 0 for every class but the current streak's."
    )
    gauge = Gauge("faultfleet_diagnosis_streak_windows", help_text, ["class_name"], registry=theirs)
    streak.add_names(CLASSES)
    for name in CLASSES:
        gauge.labels(class_name=name).set(0)

    # Execute
    streak.current = ("outer_race", 4)
    gauge.labels(class_name="outer_race").set(4)

    # Assert
    assert without_created(ours) == without_created(theirs)
    streak.current = (None, 0)
    assert set(samples(ours).values()) == {0.0}
