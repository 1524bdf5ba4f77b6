"""An agent's fault-streak metrics and standard process metrics, read back from a scrape."""

from __future__ import annotations

import pytest

from edge_agent.metrics import AgentMetrics
from tests.faultfleet.scrape import STANDARD_FAMILIES, all_types, samples, value

CLASSES = ("normal", "inner_race", "outer_race")


def streaks(metrics: AgentMetrics) -> dict[str, float]:
    return {
        dict(labels)["class_name"]: v
        for (name, labels), v in samples(metrics.registry).items()
        if name == "faultfleet_diagnosis_streak_windows"
    }


def test_every_class_has_a_streak_series_at_zero_from_the_start() -> None:
    # Execute
    metrics = AgentMetrics(class_names=CLASSES)

    # Assert
    assert streaks(metrics) == dict.fromkeys(CLASSES, 0.0)


def test_the_current_streak_is_the_only_nonzero_series() -> None:
    # Prepare
    metrics = AgentMetrics(class_names=CLASSES)

    # Execute
    metrics.set_streak("inner_race", 4)
    metrics.set_streak("outer_race", 12)

    # Assert
    assert streaks(metrics) == {"normal": 0.0, "inner_race": 0.0, "outer_race": 12.0}

    # Execute: a window below the probability ends every streak
    metrics.set_streak(None, 0)

    # Assert
    assert streaks(metrics) == dict.fromkeys(CLASSES, 0.0)


def test_an_unknown_class_or_a_bad_streak_is_refused_and_changes_nothing() -> None:
    # Prepare
    metrics = AgentMetrics(class_names=CLASSES)
    metrics.set_streak("normal", 3)

    # Execute / Assert
    with pytest.raises(ValueError, match="'cage' is not one of the model's classes"):
        metrics.set_streak("cage", 1)
    with pytest.raises(ValueError, match="not a streak"):
        metrics.set_streak(None, 2)
    with pytest.raises(ValueError, match="not a streak"):
        metrics.set_streak("normal", -1)
    assert streaks(metrics) == {"normal": 3.0, "inner_race": 0.0, "outer_race": 0.0}


def test_class_names_learned_later_get_streak_series() -> None:
    # Prepare
    metrics = AgentMetrics()

    # Execute
    metrics.set_class_names(CLASSES)
    metrics.set_streak("outer_race", 2)

    # Assert
    assert streaks(metrics) == {"normal": 0.0, "inner_race": 0.0, "outer_race": 2.0}


def test_the_streak_probability_is_reported_as_a_ratio() -> None:
    # Prepare
    metrics = AgentMetrics(class_names=CLASSES)

    # Execute
    metrics.set_streak_min_probability(0.85)

    # Assert
    assert value(metrics.registry, "faultfleet_diagnosis_streak_min_probability_ratio") == 0.85
    with pytest.raises(ValueError, match="from 0 to 1"):
        metrics.set_streak_min_probability(85.0)


def test_the_process_collectors_and_build_info_are_on_the_registry() -> None:
    # Execute
    metrics = AgentMetrics(class_names=CLASSES)

    # Assert
    assert STANDARD_FAMILIES.items() <= all_types(metrics.registry).items()
    assert value(metrics.registry, "process_open_fds") > 0
    assert (
        sum(v for (n, _), v in samples(metrics.registry).items() if n == "faultfleet_build_info")
        == 1.0
    )
