"""``faultfleet ingest-worker``: one ingest worker process (MQTT 5, shared subscription).

Runs an :class:`~coordinator.adapters.ingest_worker.IngestWorker` on its own connection
until stopped; N such processes, on one host or several, share the agents' fit updates
through the broker (docs/deploy.md, "Ingest workers"). The worker keeps a retained status
on ``{root}/ingest/{worker}/status``: ``online`` on every connection, ``offline`` when it
stops, and ``offline`` as its last will, which the broker publishes when the process dies
or loses its connection; the coordinator then asks again for the updates it held.
"""

from __future__ import annotations

import logging
import threading
from typing import Literal

from coordinator.adapters.ingest_worker import IngestWorker
from coordinator.adapters.journal import RoundJournal
from coordinator.adapters.metrics.ingest_worker import IngestWorkerMetrics
from coordinator.runtime.ingest_worker_settings import IngestWorkerSettings
from faultfleet.wire.dispatch import Will
from faultfleet.wire.ingest_messages import IngestWorkerStatus
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.topics import Topics

logger = logging.getLogger(__name__)


class IngestWorkerService:
    """One ingest worker, wired to the broker the settings name.

    Parameters
    ----------
    settings : IngestWorkerSettings
    metrics : IngestWorkerMetrics, optional
        Where the worker counts what it does (served by the caller); a fresh set when None.
    """

    def __init__(
        self, settings: IngestWorkerSettings, metrics: IngestWorkerMetrics | None = None
    ) -> None:
        self.settings = settings
        self.metrics = metrics or IngestWorkerMetrics()
        topics = Topics(settings.broker.topic_root)
        self._status_topic = topics.ingest_status(settings.worker_id)
        self.connection = MqttConnection(
            client_id=f"faultfleet-ingest-{settings.worker_id}",
            settings=settings.broker,
            will=Will(self._status_topic, self._status("offline")),
            mqtt5=True,
            on_connection_change=self._connection_changed,
        )
        self.worker = IngestWorker(
            self.connection,
            topics,
            worker_id=settings.worker_id,
            journal=RoundJournal(settings.state_dir / settings.worker_id),
            max_payload_bytes=settings.broker.max_payload_bytes,
            check_threads=settings.check_threads,
            share_group=settings.share_group,
            metrics=self.metrics,
        )

    def _status(self, state: Literal["online", "offline"]) -> bytes:
        status = IngestWorkerStatus(worker_id=self.settings.worker_id, state=state)
        return status.model_dump_json().encode()

    def _connection_changed(self, connected: bool) -> None:
        self.metrics.broker_connected.set(1 if connected else 0)
        if connected:
            self.connection.publish(self._status_topic, self._status("online"), retain=True)

    def run(self, stop: threading.Event) -> None:
        """Take updates until ``stop`` is set, then finish the ones under way."""
        self.worker.start()
        self.connection.start()
        logger.info(
            "ingest worker %s sharing %s's results (group %s)",
            self.settings.worker_id,
            self.settings.broker.topic_root,
            self.settings.share_group,
        )
        try:
            stop.wait()
        finally:
            self.worker.close()
            self.connection.stop([(self._status_topic, self._status("offline"), True)])
            logger.info(
                "ingest worker %s stopped: %s", self.settings.worker_id, dict(self.worker.counts)
            )
