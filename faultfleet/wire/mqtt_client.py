"""The paho client :class:`~faultfleet.wire.mqtt.MqttConnection` drives, built and configured.

:func:`make_client` sets up one paho client (MQTT 3.1.1, callback API version 2) from a
service's :class:`~faultfleet.wire.settings.BrokerSettings`: login, TLS, last will, in-flight
and queue limits, reconnect backoff, and paho's log lines on ``faultfleet.wire.mqtt.paho``.
:class:`FailureReportingClient` keeps the exception of the last failed connection try, which
paho does not pass to ``on_connect_fail`` (:mod:`faultfleet.wire.connect_failures` turns it
into the reason an operator reads). :class:`Sender` is every publish of the connection
(size limit, full queue, a QoS 1 message queued while disconnected) and
:class:`Acknowledgements` what it waits on. Importing it makes paho decode received messages
with one copy of their payload (:mod:`faultfleet.wire.paho_receive`). With
:mod:`faultfleet.wire.mqtt` and that module, the only modules that import paho.

**Why MQTT 3.1.1 with ``clean_session=False``, not MQTT 5** (for the services; ingest
workers, which need MQTT 5's shared subscriptions, opt in with ``mqtt5=True`` and then
require Mosquitto 2 or a clustered broker). A persistent session is what
lets the broker keep a service's subscriptions and queue its QoS 1 messages while it is
away, and MQTT 3.1.1 has it. MQTT 5 would add a session expiry interval and message expiry
(stale tasks discarded by the broker), and paho and Mosquitto speak it; but the embedded
amqtt broker that the demo and the tests fall back to without Mosquitto accepts MQTT 3.1.1
only (protocol level 4), and one protocol for every broker keeps the behaviour the same
everywhere. A 3.1.1 session never expires on its own: the shipped Mosquitto configuration
bounds it with ``persistent_client_expiration`` (docs/deploy.md). Client ids are stable
(``faultfleet-coordinator``, ``faultfleet-agent-<agent id>``), so a restarted service takes
up its own session again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import cast

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode

from faultfleet.wire import paho_receive
from faultfleet.wire.dispatch import PublishError, Will
from faultfleet.wire.settings import BrokerSettings

logger = logging.getLogger("faultfleet.wire.mqtt")

MAX_INFLIGHT_MESSAGES = 100

paho_receive.install()


def _not_the_post_disconnect_race(record: logging.LogRecord) -> bool:
    # paho 2.2's network thread runs once more after a clean disconnect() closed the socket
    # and logs "Client is not connected" at ERROR; nothing is wrong, so drop that line.
    return not record.getMessage().startswith("Client is not connected")


PAHO_LOGGER = logging.getLogger("faultfleet.wire.mqtt.paho")
PAHO_LOGGER.addFilter(_not_the_post_disconnect_race)


class FailureReportingClient(paho.Client):
    """paho's client, keeping the error of its last failed connection try.

    paho calls ``on_connect_fail`` without the exception; the reason (refused, DNS, TLS)
    is what an operator needs, so :meth:`reconnect` keeps it.
    """

    last_connect_error: OSError | None = None

    def reconnect(self) -> MQTTErrorCode:
        """paho's reconnect, remembering the OSError it raises."""
        try:
            return super().reconnect()
        except OSError as error:
            self.last_connect_error = error
            raise


def make_client(
    client_id: str,
    settings: BrokerSettings,
    will: Will | None,
    *,
    persistent_session: bool,
    reconnect_s: tuple[float, float],
    max_queued_messages: int,
    mqtt5: bool = False,
) -> FailureReportingClient:
    """A configured, unconnected client; the caller sets the callbacks.

    Parameters
    ----------
    client_id : str
    settings : BrokerSettings
        Login (the password read from its file now), TLS files.
    will : Will, optional
    persistent_session : bool
        ``clean_session=False``: the broker keeps subscriptions and queues QoS 1 messages
        (see the module docstring for why MQTT 3.1.1).
    reconnect_s : (float, float), seconds
        First and largest delay of the reconnect backoff.
    max_queued_messages : int
        Outgoing QoS 1 messages kept while unacknowledged or disconnected.
    mqtt5 : bool
        Speak MQTT 5 (shared subscriptions, ``$share/...``; Mosquitto 2 and clustered
        brokers, not amqtt) instead of 3.1.1; ``persistent_session`` then becomes
        ``clean_start=False`` on connecting.
    """
    if mqtt5:
        client = FailureReportingClient(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=paho.MQTTv5,
        )
    else:
        client = FailureReportingClient(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=client_id,
            clean_session=not persistent_session,
            protocol=paho.MQTTv311,
        )
    client.enable_logger(PAHO_LOGGER)
    if settings.username is not None:
        client.username_pw_set(settings.username, settings.password())
    if settings.tls_ca is not None:
        client.tls_set(
            ca_certs=str(settings.tls_ca),
            certfile=str(settings.tls_cert) if settings.tls_cert else None,
            keyfile=str(settings.tls_key) if settings.tls_key else None,
        )
    if will is not None:
        client.will_set(will.topic, will.payload, qos=will.qos, retain=will.retain)
    client.max_inflight_messages_set(MAX_INFLIGHT_MESSAGES)
    client.max_queued_messages_set(max_queued_messages)
    # paho annotates the delays as int but sleeps fractional seconds just as well.
    client.reconnect_delay_set(cast(int, reconnect_s[0]), cast(int, reconnect_s[1]))
    return client


class Subscriber:
    """The connection's SUBSCRIBE and UNSUBSCRIBE packets (QoS 1), by topic filter.

    ``names`` maps a filter to the name it is subscribed under (``$share/{group}/{filter}``
    for a shared subscription). A persistent session keeps its subscriptions on the broker
    while the client is away, so a filter dropped while disconnected is owed an
    UNSUBSCRIBE, sent by :meth:`settle` once connected again.
    """

    def __init__(self, client: paho.Client) -> None:
        self._client = client
        self.names: dict[str, str] = {}
        self._owed: set[str] = set()

    def subscribe(self, topic_filter: str) -> int | None:
        """Send a SUBSCRIBE; its packet id, or None when it could not be sent (logged)."""
        name = self.names.get(topic_filter, topic_filter)
        self._owed.discard(name)
        result, mid = self._client.subscribe(name, qos=1)
        if result == MQTTErrorCode.MQTT_ERR_SUCCESS and mid is not None:
            return mid
        reason = paho.error_string(result)
        logger.warning("subscribing to %s failed (%s); retried on reconnect", topic_filter, reason)
        return None

    def unsubscribe(self, topic_filter: str, *, connected: bool) -> None:
        """Send an UNSUBSCRIBE now when ``connected``, else once :meth:`settle` runs."""
        name = self.names.pop(topic_filter, topic_filter)
        if not connected or self._client.unsubscribe(name)[0] != MQTTErrorCode.MQTT_ERR_SUCCESS:
            self._owed.add(name)

    def settle(self) -> None:
        """Send the UNSUBSCRIBEs owed from while the connection was down."""
        owed, self._owed = sorted(self._owed), set()
        for name in owed:
            self.unsubscribe(name, connected=True)


def wait_published(info: paho.MQTTMessageInfo, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` seconds for the broker's PUBACK; True once it arrived."""
    info.wait_for_publish(timeout=max(timeout_s, 0.0))
    return info.is_published()


class Acknowledgements:
    """The QoS 1 messages a connection sent that the broker has not acknowledged yet.

    paho sends the unacknowledged ones again after a reconnect; :meth:`wait` lets a caller
    that must keep its messages in order (the agent's diagnosis outbox) wait for them
    before it sends newer ones, and :meth:`wait_below` lets one that publishes many large
    messages (the coordinator's fit tasks) hold back until the broker has taken most of
    what it sent, so that the messages waiting in paho stay within a byte budget.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: deque[tuple[paho.MQTTMessageInfo, int]] = deque()
        self._bytes = 0
        """Payload bytes of the messages in :attr:`_sent`."""

    def add(self, info: paho.MQTTMessageInfo, size_bytes: int) -> None:
        """Track ``info`` (a payload of ``size_bytes``); forgets the oldest ones already
        acknowledged."""
        with self._lock:
            self._forget_acknowledged()
            self._sent.append((info, size_bytes))
            self._bytes += size_bytes

    def pending_bytes(self) -> int:
        """Payload bytes sent and not acknowledged, counted up to the oldest unacknowledged
        message (the broker acknowledges a connection's messages in order)."""
        with self._lock:
            self._forget_acknowledged()
            return self._bytes

    def wait(self, timeout_s: float) -> bool:
        """Wait until every message tracked so far is acknowledged; False after ``timeout_s``."""
        with self._lock:
            sent = [info for info, _ in self._sent]
        deadline = time.monotonic() + timeout_s
        return all(wait_published(info, deadline - time.monotonic()) for info in sent)

    def wait_below(self, max_bytes: int, timeout_s: float) -> bool:
        """Wait until at most ``max_bytes`` of payload are unacknowledged, oldest first;
        False after ``timeout_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                self._forget_acknowledged()
                if self._bytes <= max_bytes:
                    return True
                oldest = self._sent[0][0]
            if not wait_published(oldest, deadline - time.monotonic()):
                return False

    def _forget_acknowledged(self) -> None:
        while self._sent and self._sent[0][0].is_published():
            self._bytes -= self._sent.popleft()[1]


class Sender:
    """Every publish of one :class:`~faultfleet.wire.mqtt.MqttConnection`, with its rules.

    The payload size limit; a full outgoing queue raised as :class:`PublishError`; a QoS 1
    message published while disconnected kept by paho and sent after reconnecting (marked
    pending, not failed), a QoS 0 one dropped; QoS 1 messages tracked until acknowledged.
    """

    def __init__(
        self, client: paho.Client, client_id: str, settings: BrokerSettings, broker_address: str
    ) -> None:
        self.client = client
        self.client_id = client_id
        self.max_payload_bytes = settings.max_payload_bytes
        self.broker_address = broker_address
        self.acknowledgements = Acknowledgements()
        self.closed = False
        """Set once the connection stopped: every later publish raises RuntimeError."""

    def send(self, topic: str, data: bytes, *, retain: bool, qos: int) -> paho.MQTTMessageInfo:
        """``client.publish`` with the rules above.

        Raises
        ------
        ValueError
            The payload exceeds ``broker.max_payload_bytes``.
        PublishError
            paho's outgoing queue is full, or paho refused the message.
        RuntimeError
            The connection was stopped.
        """
        if self.closed:
            raise RuntimeError(f"cannot publish to {topic!r}: {self.client_id!r} was stopped")
        if len(data) > self.max_payload_bytes:
            raise ValueError(
                f"payload of {len(data)} bytes for topic {topic!r} exceeds "
                f"broker.max_payload_bytes={self.max_payload_bytes}; send less or raise the "
                "limit on every service and on the broker"
            )
        info = self.client.publish(topic, data, qos=qos, retain=retain)
        if info.rc == MQTTErrorCode.MQTT_ERR_QUEUE_SIZE:
            raise PublishError(
                f"cannot publish to {topic!r}: {self.client.max_queued_messages} messages "
                f"already wait for broker {self.broker_address} (connected: "
                f"{self.client.is_connected()}); restore the broker connection or raise "
                "max_queued_messages"
            )
        if info.rc == MQTTErrorCode.MQTT_ERR_NO_CONN:
            if qos == 0:
                logger.debug("not connected: QoS 0 message to %s dropped", topic)
            else:
                # Queued by paho and sent after reconnecting; mark it pending, not failed.
                info.rc = MQTTErrorCode.MQTT_ERR_SUCCESS
        elif info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            raise PublishError(f"cannot publish to {topic!r}: {paho.error_string(info.rc)}")
        if qos > 0:
            self.acknowledgements.add(info, len(data))
        return info

    def send_all(self, messages: Sequence[tuple[str, bytes, bool]], timeout_s: float) -> list[bool]:
        """Send ``(topic, payload, retain)`` messages with QoS 1; whether each was
        acknowledged within ``timeout_s`` seconds in all."""
        deadline = time.monotonic() + timeout_s
        sent = [self.send(t, bytes(p), retain=r, qos=1) for t, p, r in messages]
        return [wait_published(info, deadline - time.monotonic()) for info in sent]

    def send_final(
        self, final: Sequence[tuple[str, bytes, bool]], timeout_s: float, *, connected: bool
    ) -> None:
        """The messages of a clean stop; each one not acknowledged in time is logged."""
        if not final:
            return
        if not connected:
            topics = [topic for topic, _, _ in final]
            logger.warning("broker %s unreachable: final %s not sent", self.broker_address, topics)
            return
        for (topic, _, _), done in zip(final, self.send_all(final, timeout_s), strict=True):
            if not done:
                logger.warning(
                    "no PUBACK for the final message to %s within %.1f s", topic, timeout_s
                )
