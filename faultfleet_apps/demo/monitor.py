"""What the fleet demo watches on the broker: the coordinator, the agents and their diagnoses.

:class:`FleetMonitor` logs in as the read-only ``historian`` account and follows the
coordinator's retained status (rounds, campaign, placements) and the agents' live
diagnoses (when each first diagnosed with a model, and with which version), and counts the
diagnoses of a time window.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter

from faultfleet.wire.codec import WireError, parse_envelope
from faultfleet.wire.messages import CoordinatorStatus, Diagnosis
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from faultfleet.wire.topics import Topics

logger = logging.getLogger(__name__)

_STATUS = TypeAdapter(CoordinatorStatus)
_DIAGNOSIS = TypeAdapter(Diagnosis)


@dataclass
class LiveCounts:
    """Diagnoses seen on ``agents/+/diagnoses``."""

    total: int = 0
    by_agent_version: dict[str, int] = field(default_factory=dict)
    """Latest model version each agent diagnosed with."""
    window: list[Diagnosis] = field(default_factory=list)
    """Diagnoses of the counting window."""
    counting: bool = False
    first: dict[str, tuple[float, Diagnosis]] = field(default_factory=dict)
    """Each agent's first diagnosis, with the Unix time it was received."""


class FleetMonitor:
    """Subscribes to the coordinator's status and the agents' diagnoses.

    Parameters
    ----------
    settings : BrokerSettings
    clock : callable
        Unix time, seconds: when messages were received.
    """

    def __init__(self, settings: BrokerSettings, clock: Callable[[], float] = time.time) -> None:
        self.topics = Topics(settings.topic_root)
        self.clock = clock
        self.lock = threading.Lock()
        self.status: CoordinatorStatus | None = None
        self.live = LiveCounts()
        # Two sessions: hundreds of diagnoses a second can fill the broker's queue for a
        # client that a loaded host lets fall behind, and a retained status the broker drops
        # from that queue would not come again until the coordinator's next change.
        self.connection = MqttConnection(client_id="faultfleet-demo-monitor", settings=settings)
        self.connection.route(self.topics.all_diagnoses(), self._on_diagnosis)
        self.status_connection = MqttConnection(
            client_id="faultfleet-demo-monitor-status", settings=settings
        )
        self.status_connection.route(self.topics.coordinator_status(), self._on_status)

    def start(self) -> None:
        """Connect both sessions (the status first)."""
        self.status_connection.start()
        self.connection.start()

    def stop(self) -> None:
        """Disconnect both sessions."""
        self.connection.stop()
        self.status_connection.stop()

    def _on_status(self, topic: str, payload: bytes) -> None:
        if payload:
            with self.lock:
                self.status = parse_envelope(_STATUS, payload)

    def _on_diagnosis(self, topic: str, payload: bytes) -> None:
        try:
            diagnosis = parse_envelope(_DIAGNOSIS, payload)
        except WireError as error:
            logger.warning("bad diagnosis on %s: %s", topic, error)
            return
        with self.lock:
            live = self.live
            live.total += 1
            live.by_agent_version[diagnosis.agent_id] = diagnosis.model_version
            live.first.setdefault(diagnosis.agent_id, (self.clock(), diagnosis))
            if live.counting:
                live.window.append(diagnosis)

    def server_round(self) -> int:
        with self.lock:
            return self.status.server_round if self.status else 0

    def campaign_ended(self) -> bool:
        """Whether the coordinator reports its campaign done or stopped."""
        with self.lock:
            campaign = self.status.campaign if self.status else None
            return campaign is not None and campaign.status != "running"

    def placement(self, agent_id: str) -> dict[str, Any] | None:
        """The coordinator's placement of ``agent_id``, as its status reports it."""
        with self.lock:
            notes = self.status.placements if self.status else ()
        found = [n for n in notes if n.agent_id == agent_id]
        return found[-1].model_dump(mode="json") if found else None

    def first_diagnosis(self, agent_id: str) -> tuple[float, Diagnosis] | None:
        with self.lock:
            return self.live.first.get(agent_id)

    def agents_serving(self, expected: Mapping[str, int]) -> int:
        """Agents whose latest diagnosis used at least the version ``expected`` for them."""
        with self.lock:
            seen = self.live.by_agent_version
            return sum(1 for a, v in expected.items() if seen.get(a, -1) >= v)

    def count_for(self, seconds: float, stop: threading.Event) -> tuple[list[Diagnosis], float]:
        """Diagnoses received during ``seconds`` (fewer if stopped) and the time measured."""
        with self.lock:
            self.live.window = []
            self.live.counting = True
        started = time.monotonic()
        stop.wait(seconds)
        with self.lock:
            self.live.counting = False
            return list(self.live.window), time.monotonic() - started
