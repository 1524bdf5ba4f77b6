"""The demo's fleet monitor over a real Mosquitto: the coordinator's status reaches it even
while its diagnosis session is stuck behind a flood (a loaded host)."""

from __future__ import annotations

import threading
import time

import pytest

from faultfleet.wire.messages import CoordinatorStatus, Diagnosis
from faultfleet.wire.settings import BrokerSettings
from faultfleet.wire.topics import Topics
from faultfleet_apps.demo.monitor import FleetMonitor
from tests.integration.services import wait_until
from tests.integration.wire_clients import connect

pytestmark = pytest.mark.integration

TOPICS = Topics()


def _diagnosis(agent_id: str, index: int) -> bytes:
    return (
        Diagnosis(
            agent_id=agent_id,
            window_index=index,
            class_id=0,
            class_name="normal",
            probability=0.9,
            model_version=3,
            cluster_id="cluster-0",
            timestamp=time.time(),
        )
        .model_dump_json()
        .encode()
    )


class _StarvedMonitor(FleetMonitor):
    """A monitor whose diagnosis handler waits until released, as on a starved host."""

    def __init__(self, settings: BrokerSettings) -> None:
        self.release = threading.Event()
        super().__init__(settings)

    def _on_diagnosis(self, topic: str, payload: bytes) -> None:
        self.release.wait(30)
        super()._on_diagnosis(topic, payload)


def test_the_status_arrives_while_the_diagnosis_session_is_stuck(
    broker_settings: BrokerSettings,
) -> None:
    # Prepare: a monitor whose diagnosis session is stuck on its first diagnosis
    monitor = _StarvedMonitor(broker_settings)
    release = monitor.release
    publisher = connect("test-publisher", broker_settings, {})
    monitor.start()
    try:
        assert monitor.connection.wait_subscribed(30)
        assert monitor.status_connection.wait_subscribed(30)
        # Execute: a diagnosis that blocks the diagnosis session, then the coordinator's status
        publisher.publish(TOPICS.diagnoses("m00"), _diagnosis("m00", 0))
        status = CoordinatorStatus(state="online", run_id="run-1", server_round=7)
        publisher.publish(TOPICS.coordinator_status(), status.model_dump_json(), retain=True)

        # Assert: the status is read while the diagnosis is still waiting
        wait_until(lambda: monitor.server_round() == 7, 30, "the coordinator's round")
        assert monitor.first_diagnosis("m00") is None
        release.set()
        wait_until(lambda: monitor.first_diagnosis("m00") is not None, 30, "m00's first diagnosis")
    finally:
        release.set()
        monitor.stop()
        publisher.stop()
