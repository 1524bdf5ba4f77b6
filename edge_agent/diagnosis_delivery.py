"""Getting every diagnosis out: published while connected, kept on disk while not, logged.

:class:`DiagnosisDelivery` takes each diagnosis from the agent's diagnosis thread, as the
JSON of its :class:`~faultfleet.wire.messages.Diagnosis` (serialised once, for the broker,
the outbox and the log alike):

1. **Publish.** While the broker connection is up and nothing waits in the outbox, the
   diagnosis is handed to the outbox thread, which publishes it with QoS 1 on
   ``agents/{id}/diagnoses`` (so the diagnosis thread never waits on the MQTT client, whose
   network thread competes for the interpreter as soon as it is woken); one the broker has
   not acknowledged when the connection drops is sent again by the MQTT client after
   reconnecting. The outbox thread publishes ``[diagnosis] publish_delay_s`` after the
   first diagnosis handed over, together with those handed over since: one wake-up of the
   outbox thread and one burst of the network thread for several windows, not one each
   (every wake-up takes the interpreter and the caches from the diagnosis thread). Diagnoses
   handed over wait in memory for that moment, as those the MQTT client holds until the
   broker acknowledges them do.
2. **Keep.** While the connection is down (or diagnoses made during an outage still wait),
   it goes to the bounded on-disk outbox (:class:`~edge_agent.outbox.DiagnosisOutbox`,
   ``[diagnosis] outbox_max_diagnoses``), so that it keeps its place in line; the oldest
   beyond the bound are dropped and counted on ``faultfleet_diagnoses_dropped_total``.
   The outbox thread takes the handed-over diagnoses in order, before any it keeps after
   them, and keeps those it cannot publish (the client's queue full, the connection
   stopped) in the outbox; those still waiting when the agent stops go there too.
3. **Log.** Then the same JSON is appended to the local log, written in batches at most
   ``[diagnosis] flush_delay_s`` after it (:mod:`edge_agent.diagnosis_log`; the outbox
   thread writes a batch whose delay is up when no new diagnosis does). A full disk stops
   the log (each line missed counted on ``faultfleet_diagnosis_log_failures_total``),
   never the publishing, which comes first.

The outbox thread (:meth:`DiagnosisDelivery.run`) sends what the outbox holds once the
connection is back: it first waits until the broker acknowledged the messages sent before
the outage (the MQTT client sends those again by itself), then sends the outbox oldest first
in batches with QoS 1, removing each batch once acknowledged. Delivery is at least once:
after a crash between an acknowledgement and its removal a few diagnoses may arrive twice
(their ``timestamp`` and ``window_index`` tell; the index restarts with the agent). The
outbox survives an agent restart and is sent after it.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from collections.abc import Callable

from edge_agent.diagnosis_log import DiagnosisLog, LogWriteError
from edge_agent.metrics import AgentMetrics
from edge_agent.outbox import DiagnosisOutbox, OutboxDrop
from faultfleet.clock import SYSTEM_CLOCK, Clock
from faultfleet.wire.messages import Diagnosis
from faultfleet.wire.mqtt import MqttConnection

logger = logging.getLogger(__name__)

BATCH = 100
"""Diagnoses sent from the outbox per batch, before waiting for their acknowledgements."""

MAX_HANDED_OVER = 1000
"""Diagnoses that may wait for the outbox thread; beyond, the diagnosis thread publishes
them itself (an outbox thread held up for minutes, or not running)."""


class DiagnosisDelivery:
    """Publishes, keeps and logs one agent's diagnoses.

    Parameters
    ----------
    agent_id : str
    connection : MqttConnection
    topic : str
        The agent's diagnoses topic.
    log : DiagnosisLog
    outbox : DiagnosisOutbox
    metrics : AgentMetrics
    publish : bool
        ``[diagnosis] publish``: when False, diagnoses are only logged.
    publish_delay_s : float, seconds
        ``[diagnosis] publish_delay_s``: how long the outbox thread lets the first diagnosis
        handed over wait for others before it publishes them; 0 publishes each at once.
    on_error : callable, optional
        Receives an exception the outbox thread caught (the agent counts and logs it); the
        thread carries on.
    clock : Clock
        Paces the outbox thread's checks.
    ack_timeout_s : float, seconds
        How long the outbox thread waits for the acknowledgements of a batch.
    on_tick : callable, optional
        Called by the outbox thread at every wake-up (at least every 0.5 s), after it wrote
        the log lines whose delay is up: the agent writes its kept windows there.
    """

    def __init__(
        self,
        agent_id: str,
        connection: MqttConnection,
        topic: str,
        log: DiagnosisLog,
        outbox: DiagnosisOutbox,
        metrics: AgentMetrics,
        *,
        publish: bool = True,
        publish_delay_s: float = 0.0,
        on_error: Callable[[Exception], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        ack_timeout_s: float = 10.0,
        on_tick: Callable[[], None] | None = None,
    ) -> None:
        self.agent_id = agent_id
        self.connection = connection
        self.topic = topic
        self.log = log
        self.outbox = outbox
        self.metrics = metrics
        if not 0 <= publish_delay_s < math.inf:
            raise ValueError(
                f"publish_delay_s must be a number of seconds >= 0, got {publish_delay_s!r}"
            )
        self.publish = publish
        self.publish_delay_s = publish_delay_s
        self.on_error = on_error or (lambda error: logger.exception("outbox", exc_info=error))
        self.clock = clock
        self.ack_timeout_s = ack_timeout_s
        self.on_tick = on_tick
        self._wake = threading.Event()
        self._handed_over = 0
        """Outbox records before this index were given to the MQTT client, some not
        acknowledged when the connection dropped: the client sends those again itself."""
        self._handed: deque[bytes] = deque()
        """Diagnoses to publish, handed over by the diagnosis thread, oldest first; one
        stays here until it is published or kept."""
        self._handed_at = 0.0
        """When the oldest of ``_handed`` was handed over (``clock.monotonic``)."""
        self._send_lock = threading.Lock()
        self._log_lock = threading.Lock()
        self._log_failing = False
        self._outbox_failing = False
        self._report_outbox()

    def deliver(self, diagnosis: Diagnosis) -> None:
        """:meth:`deliver_json` of ``diagnosis``'s JSON."""
        self.deliver_json(diagnosis.model_dump_json().encode())

    def deliver_json(self, payload: bytes) -> None:
        """Publish (or keep) one diagnosis given as its JSON, then write it to the local log.

        Raises
        ------
        ValueError
            It is too large to publish (``broker.max_payload_bytes``); it is still logged.
        """
        try:
            if self.publish:
                self._hand_over_or_keep(payload)
        finally:
            self._write_log(payload)

    def _hand_over_or_keep(self, payload: bytes) -> None:
        limit = self.connection.settings.max_payload_bytes
        if len(payload) > limit:
            raise ValueError(
                f"diagnosis of {len(payload)} bytes exceeds broker.max_payload_bytes={limit}; "
                "it is logged, not published"
            )
        # Handed over while connected with an empty outbox, or behind diagnoses handed over
        # before: the outbox thread takes them in order, and keeps in the outbox what it
        # cannot publish, so the line holds.
        handed = self._handed
        if handed or (self.connection.connected and len(self.outbox) == 0):
            handed.append(payload)
            if len(handed) == 1:
                self._handed_at = self.clock.monotonic()
                self._wake.set()
            elif len(handed) > MAX_HANDED_OVER:
                self.send_handed_over()
            return
        self._keep(payload)

    def send_handed_over(self) -> None:
        """Publish the diagnoses handed over, oldest first, or keep them in the outbox when
        they cannot be published (the outbox thread does this at every wake-up)."""
        with self._send_lock:
            handed = self._handed
            while handed:
                try:
                    self._publish_or_keep(handed[0])
                finally:
                    handed.popleft()  # only now: a diagnosis delivered meanwhile waits behind

    def wake(self) -> None:
        """Have the outbox thread wake up now (it then also calls ``on_tick``)."""
        self._wake.set()

    def connection_changed(self, connected: bool) -> None:
        """Network thread: wake the outbox thread when the connection is back."""
        if connected:
            self._wake.set()

    def _publish_or_keep(self, payload: bytes) -> None:
        # Published at once only when the outbox is empty, in flight included: a batch the
        # outbox thread has taken but not handed to the client yet is older than this one.
        if self.connection.connected and len(self.outbox) == 0:
            try:
                self.connection.publish(self.topic, payload, qos=1)
            except RuntimeError as error:  # PublishError, the queue full; or a stopped client
                logger.debug("%s: %s; the diagnosis goes to the outbox", self.agent_id, error)
            else:
                return
        self._keep(payload)

    def _keep(self, payload: bytes) -> None:
        try:
            self.outbox.append(payload)
        except OSError as error:
            self.metrics.diagnoses_lost(OutboxDrop.UNWRITABLE)
            if not self._outbox_failing:
                logger.error(
                    "%s: cannot write the outbox %s (%s); diagnoses made while the broker is "
                    "unreachable are lost until it can be written again "
                    "(faultfleet_diagnoses_dropped_total{reason=unwritable} counts them)",
                    self.agent_id,
                    self.outbox.folder,
                    error,
                )
            self._outbox_failing = True
            return
        if self._outbox_failing:
            logger.info("%s: the outbox is written again", self.agent_id)
            self._outbox_failing = False
        self._report_outbox()

    def _report_outbox(self) -> None:
        self.metrics.outbox_diagnoses.set(len(self.outbox))

    # -- the outbox thread -----------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Publish what is handed over, and send the outbox whenever the connection is up,
        until ``stop`` is set."""
        while not stop.is_set():
            self._send_handed_over_safely()
            if self.connection.connected and len(self.outbox) > 0:
                try:
                    self._drain(stop)
                except Exception as error:  # a failing disk, a bug: counted, tried again
                    self.on_error(error)
            self.clock.wait(self._wake, 0.5)
            self._wake.clear()  # a diagnosis handed over since is sent at the loop's start
            self._tick()
            self._let_handed_over_gather(stop)
        self._send_handed_over_safely()

    def _let_handed_over_gather(self, stop: threading.Event) -> None:
        """Wait until the oldest diagnosis handed over is ``publish_delay_s`` old (or
        ``stop``), so that those made meanwhile are published with it."""
        if self.publish_delay_s > 0 and self._handed:
            left_s = self._handed_at + self.publish_delay_s - self.clock.monotonic()
            if left_s > 0:
                self.clock.wait(stop, left_s)

    def _send_handed_over_safely(self) -> None:
        try:
            self.send_handed_over()
        except Exception as error:  # a failing disk, a bug: counted, tried again
            self.on_error(error)

    def _tick(self) -> None:
        """Write what waits for the disk once its delay is up."""
        try:
            self.flush_log(only_due=True)
            if self.on_tick is not None:
                self.on_tick()
        except Exception as error:  # a bug: counted, tried again at the next tick
            self.on_error(error)

    def _drain(self, stop: threading.Event) -> None:
        """Send the outbox, oldest first, while connected; the diagnoses sent."""
        # Messages sent before the outage are older: let the client deliver them first.
        if not self.connection.wait_acknowledged(self.ack_timeout_s):
            return
        self.outbox.acknowledged(self._handed_over)  # the client sent them after reconnecting
        sent = 0
        while not stop.is_set() and self.connection.connected:
            batch = self.outbox.take(BATCH)
            if not batch.records:
                break
            messages = [(self.topic, record, False) for record in batch.records]
            try:
                acknowledged = self.connection.publish_many(messages, timeout_s=self.ack_timeout_s)
            except Exception:
                self.outbox.release(batch.start)  # perhaps not handed over: take them again
                raise
            self._handed_over = batch.end
            self.outbox.acknowledged(batch.start + acknowledged)
            sent += acknowledged
            self._report_outbox()
            if acknowledged < len(batch.records):  # the connection dropped, or the broker lags
                break
        if sent:
            logger.info(
                "%s: sent %d diagnoses kept while the broker was unreachable; %d still wait",
                self.agent_id,
                sent,
                len(self.outbox),
            )

    def close(self) -> None:
        """Close the outbox (what waits stays for the next start, diagnoses handed over and
        not yet published included) and the local log, writing the lines that wait for it."""
        with self._send_lock:
            while self._handed:
                self._keep(self._handed.popleft())
        self.outbox.close()
        try:
            self.log.close()
        except OSError as error:  # the last lines could not be written: a full disk
            if isinstance(error, LogWriteError):
                self.metrics.diagnosis_log_failures.inc(error.lines_lost)
            logger.warning("%s: closing the diagnosis log: %s", self.agent_id, error)

    # -- the local log ---------------------------------------------------------------------

    def flush_log(self, *, only_due: bool = False) -> None:
        """Write the waiting log lines (with ``only_due``, once their delay is up); a failing
        disk is counted and logged as for :meth:`deliver`."""
        self._logged(lambda: self.log.flush(only_due=only_due))

    def _write_log(self, line: bytes) -> None:
        """Append one line to the local log; a failing disk is counted and logged when it
        starts and when it ends, and never stops diagnosis or publishing."""
        try:
            written = self.log.append_line(line)
        except OSError as error:
            self._log_failed(error)
            return
        if written:
            self._log_written()

    def _logged(self, write: Callable[[], int]) -> None:
        try:
            written = write()
        except OSError as error:
            self._log_failed(error)
            return
        if written:
            self._log_written()

    def _log_failed(self, error: OSError) -> None:
        """Count the lines lost (LogWriteError: a batch; otherwise this line, at rotation)."""
        lost = error.lines_lost if isinstance(error, LogWriteError) else 1
        self.metrics.diagnosis_log_failures.inc(lost)
        with self._log_lock:
            failing, self._log_failing = self._log_failing, True
        if not failing:
            logger.error(
                "%s: cannot write the diagnosis log %s (%s); diagnoses are still "
                "published, free disk space to keep them locally "
                "(faultfleet_diagnosis_log_failures_total counts the ones missed)",
                self.agent_id,
                self.log.path,
                error,
            )

    def _log_written(self) -> None:
        """The log took lines: say so if it failed before."""
        with self._log_lock:
            failing, self._log_failing = self._log_failing, False
        if failing:
            logger.info("%s: the diagnosis log is written again", self.agent_id)
