"""What an agent has done lately: its fault streak, its last diagnosis, its heartbeat.

:class:`FaultStreak` follows the run of most recent windows diagnosed as one class with at
least a probability; the fault-alarm rule (``deploy/prometheus/faultfleet-rules.yml``)
fires when a fault class's run reaches N windows. :class:`Activity` is fed every diagnosis
by the agent's diagnosis thread, reports the streak to the metrics and, in a thread of its
own, publishes the retained :class:`~faultfleet.wire.messages.AgentHeartbeat` every
``diagnosis.heartbeat_s``: when the agent was last seen, the model it serves, its last
diagnosis and its streak. ``faultfleet status`` reads it; unlike the agent's status, the
broker does not replace it with the last will, so a dead agent's last sign of life stays.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from edge_agent.inference import OnnxDiagnoser
from edge_agent.metrics import AgentMetrics
from faultfleet.clock import SYSTEM_CLOCK, Clock
from faultfleet.wire.messages import AgentHeartbeat, Diagnosis
from faultfleet.wire.mqtt import MqttConnection

logger = logging.getLogger(__name__)

RECONNECT_POLL_S = 1.0
"""While the broker connection is down, how often to look whether a heartbeat can go out."""


class FaultStreak:
    """The run of most recent windows diagnosed as one class with enough probability.

    Parameters
    ----------
    min_probability : float
        A window extends its class's streak only when the model gives that class at least
        this probability (0 to 1); a window below it ends every streak.
    """

    def __init__(self, min_probability: float) -> None:
        if not 0.0 <= min_probability <= 1.0:
            raise ValueError(f"min_probability={min_probability!r} must be from 0 to 1")
        self.min_probability = min_probability
        self.class_name: str | None = None
        """Class of the current streak; None when the last window ended every streak."""
        self.windows = 0
        """Length of the current streak, windows."""

    def observe(self, class_name: str, probability: float) -> None:
        """Extend, restart or end the streak with one diagnosed window."""
        if probability < self.min_probability:
            self.class_name, self.windows = None, 0
        elif class_name == self.class_name:
            self.windows += 1
        else:
            self.class_name, self.windows = class_name, 1


class Activity:
    """The agent's recent activity, fed by its diagnosis thread; thread-safe.

    Parameters
    ----------
    agent_id : str
    metrics : AgentMetrics
        Receives the streak (``faultfleet_diagnosis_streak_windows``).
    diagnoser : OnnxDiagnoser
        Its active model is the serving model the heartbeat names.
    streak_min_probability : float
        See :class:`FaultStreak`.
    now : callable
        Unix time, seconds (the heartbeat's timestamp).
    """

    def __init__(
        self,
        agent_id: str,
        metrics: AgentMetrics,
        diagnoser: OnnxDiagnoser,
        *,
        streak_min_probability: float,
        now: Callable[[], float],
    ) -> None:
        self.agent_id = agent_id
        self.metrics = metrics
        self.diagnoser = diagnoser
        self.now = now
        self.streak = FaultStreak(streak_min_probability)
        self.windows_diagnosed = 0
        self._last: bytes | None = None
        """The JSON of the last diagnosis, read into a message only for the heartbeat."""
        self._lock = threading.Lock()
        metrics.set_streak_min_probability(streak_min_probability)

    @property
    def last_diagnosis(self) -> Diagnosis | None:
        """The last diagnosis observed; None before the first."""
        with self._lock:
            last = self._last
        return None if last is None else Diagnosis.model_validate_json(last)

    def observe(self, diagnosis: Diagnosis) -> None:
        """Record one diagnosed window and report the streak to the metrics."""
        json = diagnosis.model_dump_json().encode()
        self.observe_json(diagnosis.class_name, diagnosis.probability, json)

    def observe_json(self, class_name: str, probability: float, json: bytes) -> None:
        """:meth:`observe` of a diagnosis given as its class name, its probability and its
        JSON (the agent's diagnosis thread, which has no message to give)."""
        with self._lock:
            self.windows_diagnosed += 1
            self._last = json
            self.streak.observe(class_name, probability)
            name, windows = self.streak.class_name, self.streak.windows
        self.metrics.set_streak(name, windows)

    def heartbeat(self) -> AgentHeartbeat:
        """The heartbeat to publish now."""
        active = self.diagnoser.active
        with self._lock:
            last, windows = self._last, self.windows_diagnosed
            streak_class, streak_windows = self.streak.class_name, self.streak.windows
        return AgentHeartbeat(
            agent_id=self.agent_id,
            timestamp=self.now(),
            cluster_id=active.cluster_id if active else None,
            model_version=active.version if active else None,
            windows_diagnosed=windows,
            last_diagnosis=None if last is None else Diagnosis.model_validate_json(last),
            streak_class=streak_class,
            streak_windows=streak_windows,
        )

    def run(
        self,
        stop: threading.Event,
        connection: MqttConnection,
        topic: str,
        *,
        interval_s: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """Publish a retained heartbeat on ``topic`` every ``interval_s`` until ``stop``.

        Nothing is queued while the connection is down (QoS 0: a stale heartbeat is worth
        nothing); the next one goes out within :data:`RECONNECT_POLL_S` of reconnecting.
        ``interval_s`` 0 returns at once (heartbeats switched off).
        """
        if interval_s <= 0:
            return
        while not stop.is_set():
            sent = self._publish(connection, topic)
            clock.wait(stop, interval_s if sent else min(interval_s, RECONNECT_POLL_S))

    def _publish(self, connection: MqttConnection, topic: str) -> bool:
        if not connection.connected:
            return False
        payload = self.heartbeat().model_dump_json().encode()
        try:
            connection.publish(topic, payload, retain=True, qos=0)
        except (ValueError, RuntimeError) as error:
            logger.warning("%s: heartbeat not sent: %s", self.agent_id, error)
            return False
        return True
