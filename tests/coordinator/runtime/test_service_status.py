"""What the coordinator makes of an agent's status: an implausible training-set size.

No broker: the service's connection is never started, and statuses are handed to its
handler as the network thread would.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.runtime.service import CoordinatorService
from coordinator.runtime.settings import AggregationSettings, CoordinatorSettings
from faultfleet.wire.messages import AgentStatus
from faultfleet.wire.topics import Topics
from tests.integration.services import install_signing_key, sample_value


def status(agent_id: str, samples: int) -> bytes:
    message = AgentStatus(
        agent_id=agent_id, state="online", can_train=True, num_train_samples=samples
    )
    return message.model_dump_json().encode()


def test_an_agent_declaring_more_than_the_limit_is_not_asked_to_train(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare
    install_signing_key(tmp_path)
    settings = CoordinatorSettings(
        state_dir=tmp_path, aggregation=AggregationSettings(max_samples_per_agent=5000)
    )
    registry = CollectorRegistry()
    service = CoordinatorService(settings, CoordinatorMetrics(registry))
    topics = Topics()

    # Execute
    with caplog.at_level(logging.WARNING, logger="coordinator.runtime.service"):
        service._on_status(topics.agent_status("honest"), status("honest", 5000))
        service._on_status(topics.agent_status("greedy"), status("greedy", 10**12))

    # Assert
    assert service.registry.online() == ["greedy", "honest"]
    assert service.registry.trainers() == ["honest"]
    refused = sample_value(
        registry, "faultfleet_updates_rejected_total", {"reason": "too_many_samples"}
    )
    assert refused == 1
    assert "agent greedy declares 1000000000000 training windows" in caplog.text
