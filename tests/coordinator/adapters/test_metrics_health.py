"""The coordinator's fleet-health metrics: agents by state, quorum failures and the standard
process metrics, read back from a real scrape (promotion decisions: test_metrics.py)."""

from __future__ import annotations

import pytest

from coordinator.adapters.metrics import AGENT_STATES, CoordinatorMetrics
from faultfleet import __version__
from tests.faultfleet.scrape import STANDARD_FAMILIES, all_types, samples, value


def by_label(metrics: CoordinatorMetrics, name: str, label: str) -> dict[str, float]:
    return {
        dict(labels)[label]: v
        for (sample, labels), v in samples(metrics.registry).items()
        if sample == name
    }


def test_every_state_and_the_quorum_failures_read_zero_from_the_start() -> None:
    # Execute
    metrics = CoordinatorMetrics()

    # Assert
    assert by_label(metrics, "faultfleet_agents_by_state", "state") == dict.fromkeys(
        AGENT_STATES, 0.0
    )
    assert value(metrics.registry, "faultfleet_rounds_without_quorum_total") == 0.0


@pytest.mark.parametrize(
    ("online", "retired", "registered", "offline"),
    [(3, 0, 3, 0), (2, 0, 3, 1), (1, 1, 3, 1), (0, 2, 2, 0), (0, 0, 0, 0)],
)
def test_a_stopped_agent_counts_as_offline(
    online: int, retired: int, registered: int, offline: int
) -> None:
    # Prepare
    metrics = CoordinatorMetrics()

    # Execute
    metrics.set_agents(online=online, registered=registered, retired=retired)

    # Assert
    assert by_label(metrics, "faultfleet_agents_by_state", "state") == {
        "online": float(online),
        "offline": float(offline),
        "retired": float(retired),
    }
    assert value(metrics.registry, "faultfleet_agents_online") == online
    assert value(metrics.registry, "faultfleet_agents_registered") == registered


def test_inconsistent_agent_counts_are_refused() -> None:
    # Prepare
    metrics = CoordinatorMetrics()
    metrics.set_agents(online=1, registered=2)

    # Execute / Assert
    with pytest.raises(ValueError, match="online \\+ retired <= registered"):
        metrics.set_agents(online=2, registered=2, retired=1)
    assert by_label(metrics, "faultfleet_agents_by_state", "state")["offline"] == 1.0


def test_a_round_without_quorum_is_counted() -> None:
    # Prepare
    metrics = CoordinatorMetrics()

    # Execute
    metrics.rounds_without_quorum.inc()

    # Assert
    assert value(metrics.registry, "faultfleet_rounds_without_quorum_total") == 1.0


def test_the_process_collectors_and_build_info_are_on_the_registry() -> None:
    # Execute
    metrics = CoordinatorMetrics()
    build = {
        dict(labels)["version"]: v
        for (name, labels), v in samples(metrics.registry).items()
        if name == "faultfleet_build_info"
    }

    # Assert
    assert STANDARD_FAMILIES.items() <= all_types(metrics.registry).items()
    assert value(metrics.registry, "process_resident_memory_bytes") > 0
    assert build == {__version__: 1.0}
