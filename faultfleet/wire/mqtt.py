"""The MQTT transport: with :mod:`faultfleet.wire.mqtt_client`, which builds its paho client,
the only module of faultfleet that imports paho.

:class:`MqttConnection` wraps one paho client (MQTT 3.1.1, callback API version 2) with
what both services need: a retained last will, reconnection with exponential backoff
(including a first connection to a broker that is still down), every failed try logged at
once with its reason (:mod:`faultfleet.wire.connect_failures`), a routing table whose
subscriptions are renewed on every reconnect, payload size limits in both directions, and
handlers that can never kill the network loop (an exception is logged with its topic and
counted). With ``persistent_session`` the broker keeps the session across disconnections
(MQTT 3.1.1 ``clean_session=False``; why not MQTT 5: :mod:`faultfleet.wire.mqtt_client`);
QoS 1 messages published while disconnected go out after reconnecting, and
:meth:`MqttConnection.publish_many` / :meth:`MqttConnection.wait_acknowledged` send a
backlog in order, at least once. Handlers run on paho's network thread, one at a time, in
arrival order, and must be quick: while one runs no keep-alive is answered.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, cast

import paho.mqtt.client as paho
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from faultfleet.wire.connect_failures import (
    ConnectFailure,
    FailureLog,
    describe_refusal,
    describe_socket_error,
)
from faultfleet.wire.dispatch import (
    ConnectionState,
    Dispatcher,
    Handler,
    PublishError,
    Will,
    topic_matches,
)
from faultfleet.wire.mqtt_client import (
    FailureReportingClient,
    Sender,
    Subscriber,
    make_client,
    wait_published,
)
from faultfleet.wire.settings import BrokerSettings
from faultfleet.wire.topics import shared

logger = logging.getLogger(__name__)


__all__ = ["Handler", "MqttConnection", "PublishError", "Will"]


class MqttConnection:
    """One MQTT 3.1.1 session with the broker named by ``settings``.

    Parameters
    ----------
    client_id : str
        MQTT client id; unique per broker (a second client with the same id takes over).
    settings : BrokerSettings
        Broker address, credentials, TLS files, keep-alive and payload limit.
    will : Will, optional
        Last will, published by the broker if this client vanishes without
        :meth:`stop`.
    persistent_session : bool
        Ask the broker to keep subscriptions and queue QoS 1 messages while this client
        is offline (``clean_session=False``).
    on_connection_change : callable, optional
        Called with True after every successful (re)connection and False after every
        loss, on the network thread.
    reconnect_min_s, reconnect_max_s : float, seconds
        First delay before reconnecting, doubled on each failed try up to the maximum.
    on_handler_error : callable, optional
        Called with ``(topic, exception)`` when a handler raises; it logs the error (the
        connection logs it with its traceback when none is given).
    on_oversized : callable, optional
        Called with ``(topic, size_bytes)`` for an incoming message above
        ``settings.max_payload_bytes``; no handler sees such a message.
    max_queued_messages : int
        Outgoing QoS 1 messages kept while unacknowledged or disconnected; beyond that
        :meth:`publish` raises :class:`PublishError`.
    mqtt5 : bool
        Speak MQTT 5 instead of 3.1.1, for shared subscriptions (:meth:`route` with a
        ``share_group``); needs Mosquitto 2 or a clustered broker (amqtt speaks 3.1.1 only).
    """

    def __init__(
        self,
        *,
        client_id: str,
        settings: BrokerSettings,
        will: Will | None = None,
        persistent_session: bool = False,
        on_connection_change: Callable[[bool], None] | None = None,
        reconnect_min_s: float = 0.5,
        reconnect_max_s: float = 30.0,
        on_handler_error: Callable[[str, Exception], None] | None = None,
        on_oversized: Callable[[str, int], None] | None = None,
        max_queued_messages: int = 10_000,
        mqtt5: bool = False,
    ) -> None:
        if not client_id:
            raise ValueError("client_id is empty; give each MQTT client a unique id")
        if not 0 < reconnect_min_s <= reconnect_max_s:
            raise ValueError(
                f"reconnect_min_s={reconnect_min_s} and reconnect_max_s={reconnect_max_s} must "
                "satisfy 0 < reconnect_min_s <= reconnect_max_s"
            )
        self.client_id = client_id
        self.settings = settings
        self.dispatcher = Dispatcher(
            matches=topic_matches,
            max_payload_bytes=settings.max_payload_bytes,
            on_handler_error=on_handler_error,
            on_oversized=on_oversized,
        )
        self._max_queued_messages = max_queued_messages
        self._state = ConnectionState(on_connection_change)
        self._failures = FailureLog(logger, self.broker_address, client_id)
        self._started = False
        self._stopped = False
        self._mqtt5 = mqtt5
        self._persistent = persistent_session
        self._network_thread: int | None = None
        self._connection_number = 0
        self._delivering_retained = False
        self._client = self._make_client(will, persistent_session, reconnect_min_s, reconnect_max_s)
        self._sender = Sender(self._client, client_id, settings, self.broker_address)
        self._subscriber = Subscriber(self._client)

    def _make_client(
        self, will: Will | None, persistent: bool, reconnect_min_s: float, reconnect_max_s: float
    ) -> FailureReportingClient:
        client = make_client(
            self.client_id,
            self.settings,
            will,
            persistent_session=persistent,
            reconnect_s=(reconnect_min_s, reconnect_max_s),
            max_queued_messages=self._max_queued_messages,
            mqtt5=self._mqtt5,
        )
        client.on_connect = self._on_connect
        client.on_connect_fail = self._on_connect_fail
        client.on_disconnect = self._on_disconnect
        client.on_subscribe = self._on_subscribe
        client.on_message = self._on_message
        return client

    @property
    def handler_errors(self) -> int:
        """Number of handler calls that raised."""
        return self.dispatcher.handler_errors

    @property
    def oversized_messages(self) -> int:
        """Number of incoming messages dropped for their size."""
        return self.dispatcher.oversized_messages

    @property
    def broker_address(self) -> str:
        """``host:port`` of the broker, for messages."""
        return f"{self.settings.host}:{self.settings.port}"

    @property
    def connected(self) -> bool:
        """Whether the broker has accepted the connection (CONNACK) and not lost it since."""
        return self._state.connected

    @property
    def connection_number(self) -> int:
        """How many times the broker accepted this client's connection: the number of the
        connection now up (or last up), 0 before the first."""
        return self._connection_number

    def outgoing_connection(self) -> int:
        """The number of the connection a message published now leaves on: the current one
        while connected, else the next (the client queues it until it reconnects)."""
        with self._state.lock:
            return self._connection_number + (0 if self._state.connected else 1)

    @property
    def delivering_retained(self) -> bool:
        """Read by a handler, on the network thread: whether the message it handles is a
        retained one the broker delivered because this client subscribed (on every
        connection), rather than one published since the subscription."""
        return self._delivering_retained

    @property
    def connect_failure(self) -> ConnectFailure | None:
        """Why the last try to connect failed; None once connected (or before any try)."""
        return self._failures.last

    def start(self) -> None:
        """Connect in the background; failed tries are retried with backoff until :meth:`stop`."""
        with self._state.lock:
            if self._started or self._stopped:
                raise RuntimeError(f"MQTT client {self.client_id!r} was already started or stopped")
            self._started = True
        clean = not self._persistent if self._mqtt5 else paho.MQTT_CLEAN_START_FIRST_ONLY
        s = self.settings  # clean_start counts under MQTT 5 only (3.1.1: clean_session)
        self._client.connect_async(s.host, s.port, s.keepalive_s, clean_start=clean)
        self._client.loop_start()

    def wait_connected(self, timeout_s: float) -> bool:
        """Block up to ``timeout_s`` seconds for the connection; True when connected."""
        return self._state.wait_connected(timeout_s)

    def wait_subscribed(self, timeout_s: float) -> bool:
        """Block until the broker acknowledged every route's subscription on this connection.

        Returns False after ``timeout_s`` seconds, or at once when the broker refused one.
        """
        return self._state.wait_subscribed(self.dispatcher.filters, timeout_s)

    def route(self, topic_filter: str, handler: Handler, *, share_group: str | None = None) -> None:
        """Call ``handler(topic, payload)`` for every message matching ``topic_filter``.

        Subscribes (QoS 1) now when connected and again after every reconnect. A message
        matching several routes reaches each of their handlers. With ``share_group`` (MQTT
        5 only) the subscription is ``$share/{share_group}/{topic_filter}``: the broker
        hands each message to one of the group's subscribers.
        """
        if share_group is not None:
            if not self._mqtt5:
                raise ValueError("shared subscriptions need MQTT 5: build with mqtt5=True")
            self._subscriber.names[topic_filter] = shared(share_group, topic_filter)
        with self._state.lock:
            if self.dispatcher.add(topic_filter, handler) and self._state.connected:
                self._subscribe(topic_filter)

    def unroute(self, topic_filter: str, handler: Handler) -> None:
        """Undo :meth:`route`; unsubscribes once no route uses the filter (now when
        connected, else on reconnecting: a persistent session keeps it while away)."""
        with self._state.lock:
            if self.dispatcher.remove(topic_filter, handler):
                self._subscriber.unsubscribe(topic_filter, connected=self._state.connected)

    def publish(
        self, topic: str, payload: bytes | str, *, retain: bool = False, qos: int = 1
    ) -> int:
        """Queue a message for the broker; returns the payload size in bytes.

        QoS 1 messages published while disconnected are sent after reconnecting.

        Raises
        ------
        ValueError
            The payload exceeds ``settings.max_payload_bytes``.
        PublishError
            The outgoing queue is full (the broker has been unreachable for a while).
        """
        data = payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)
        self._sender.send(topic, data, retain=retain, qos=qos)
        return len(data)

    def publish_wait(
        self, topic: str, payload: bytes | str, *, retain: bool = False, timeout_s: float = 10.0
    ) -> int:
        """Publish with QoS 1 and block until the broker acknowledges it (PUBACK).

        Returns the payload size in bytes. Raises RuntimeError when called from a handler
        (the acknowledgement arrives on the very thread the handler blocks).

        Raises
        ------
        TimeoutError
            No acknowledgement within ``timeout_s`` seconds; the message stays queued.
        """
        self._refuse_on_network_thread("publish_wait()")
        data = payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)
        if not wait_published(self._sender.send(topic, data, retain=retain, qos=1), timeout_s):
            raise TimeoutError(
                f"broker {self.broker_address} did not acknowledge the message to {topic!r} "
                f"within {timeout_s:.1f} s (connected: {self.connected}); it stays queued"
            )
        return len(data)

    def publish_many(self, messages: Sequence[tuple[str, bytes, bool]], *, timeout_s: float) -> int:
        """Publish ``(topic, payload, retain)`` messages in order with QoS 1 and wait for
        the broker's acknowledgements.

        Returns how many of them, counted from the first, were acknowledged within
        ``timeout_s`` seconds; the others stay queued in the client (paho sends them again
        after a reconnect). Not callable from a handler.

        Raises
        ------
        ValueError, PublishError
            As :meth:`publish`, for the first message that cannot be queued.
        """
        self._refuse_on_network_thread("publish_many()")
        acknowledged = self._sender.send_all(messages, timeout_s)
        return acknowledged.index(False) if False in acknowledged else len(acknowledged)

    def wait_backlog(self, max_bytes: int, timeout_s: float) -> bool:
        """Wait until at most ``max_bytes`` of QoS 1 payload published so far wait for the
        broker's acknowledgement; False after ``timeout_s`` seconds. Not callable from a
        handler.

        A caller publishing many large messages waits here before each, so that what paho
        holds for the broker (every message until its PUBACK) stays near ``max_bytes``
        instead of growing with the number of messages.
        """
        self._refuse_on_network_thread("wait_backlog()")
        return self._sender.acknowledgements.wait_below(max_bytes, timeout_s)

    def wait_acknowledged(self, timeout_s: float) -> bool:
        """Wait until the broker acknowledged every QoS 1 message published so far.

        After a reconnect paho sends the unacknowledged ones again; a caller that must keep
        its messages in order waits for them here before publishing newer ones. False after
        ``timeout_s`` seconds. Not callable from a handler.
        """
        self._refuse_on_network_thread("wait_acknowledged()")
        return self._sender.acknowledgements.wait(timeout_s)

    def stop(
        self, final: Sequence[tuple[str, bytes, bool]] = (), *, timeout_s: float = 5.0
    ) -> None:
        """Publish ``final`` ``(topic, payload, retain)`` messages, then disconnect cleanly.

        A clean disconnect does not fire the last will, so pass the 'offline' status here.
        Waits up to ``timeout_s`` seconds in all for the final messages. Idempotent; not
        callable from a handler.
        """
        self._refuse_on_network_thread("stop()")
        with self._state.lock:
            if self._stopped:
                return
            self._stopped = True
            started = self._started
        if not started:
            self._sender.closed = True
            return
        try:
            self._sender.send_final(final, timeout_s, connected=self.connected)
        finally:
            self._sender.closed = True
            self._client.disconnect()
            self._client.loop_stop()
            self._state.set(False)

    def _refuse_on_network_thread(self, what: str) -> None:
        if threading.get_ident() == self._network_thread:
            raise RuntimeError(
                f"{what} called from an MQTT handler would block the network thread that "
                "receives the broker's answers; use publish() or hand the work to another thread"
            )

    def _subscribe(self, topic_filter: str) -> None:
        # Called with the lock held, so on_subscribe cannot see the mid before it is recorded.
        if (mid := self._subscriber.subscribe(topic_filter)) is not None:
            self._state.subscriptions.sent(mid, topic_filter)

    def _on_connect(
        self,
        client: paho.Client,
        userdata: Any,
        flags: paho.ConnectFlags,
        reason_code: ReasonCode,
        properties: Properties | None,
    ) -> None:
        self._network_thread = threading.get_ident()
        if reason_code.is_failure:
            self._failures.failed(
                describe_refusal(reason_code.value, str(reason_code), self.settings.username)
            )
            return
        self._failures.connected()
        logger.info(
            "connected to broker %s as %r (session present: %s)",
            self.broker_address,
            self.client_id,
            flags.session_present,
        )
        with self._state.lock:
            self._connection_number += 1
            self._state.subscriptions.reset()
            self._subscriber.settle()
            for topic_filter in self.dispatcher.filters():
                self._subscribe(topic_filter)
            changed = self._state.mark(True)
        if changed:
            self._state.report(True)

    def _on_disconnect(
        self,
        client: paho.Client,
        userdata: Any,
        flags: paho.DisconnectFlags,
        reason_code: ReasonCode,
        properties: Properties | None,
    ) -> None:
        # not connected: the broker refused the login, which _on_connect logged already
        level, what = (
            (logging.WARNING, "lost") if self._state.connected else (logging.DEBUG, "closed by")
        )
        if self._stopped:
            level, what = logging.INFO, "left"
        logger.log(level, "%s broker %s (%s)", what, self.broker_address, reason_code)
        self._state.set(False)

    def _on_connect_fail(self, client: paho.Client, userdata: Any) -> None:
        error = cast(FailureReportingClient, client).last_connect_error
        if error is not None:  # else paho raised no OSError: nothing to explain
            host, port, tls = self.settings.host, self.settings.port, bool(self.settings.tls_ca)
            self._failures.failed(describe_socket_error(error, host, port, tls=tls))

    def _on_subscribe(
        self,
        client: paho.Client,
        userdata: Any,
        mid: int,
        reason_codes: list[ReasonCode],
        properties: Properties | None,
    ) -> None:
        refused = any(code.is_failure for code in reason_codes)
        topic_filter = self._state.answered(mid, refused=refused)
        if refused:
            logger.error(
                "broker %s refused the subscription to %s for %r; check its ACL",
                self.broker_address,
                topic_filter,
                self.settings.username or self.client_id,
            )

    def _on_message(self, client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        self._network_thread = threading.get_ident()
        try:
            topic = message.topic
        except UnicodeDecodeError:
            logger.warning("dropped a message whose topic is not UTF-8: %r", message._topic)
            return
        self._delivering_retained = bool(message.retain)
        try:
            self.dispatcher.dispatch(topic, bytes(message.payload))
        finally:
            self._delivering_retained = False
