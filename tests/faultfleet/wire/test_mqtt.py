"""MqttConnection against a real Mosquitto broker (the ``broker`` fixture)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from faultfleet.wire.mqtt import MqttConnection, PublishError, Will
from faultfleet.wire.settings import BrokerSettings
from faultfleet_apps.brokers.launch import RunningBroker, free_port, start_broker

TIMEOUT_S = 30.0

Connect = Callable[..., MqttConnection]


class Inbox:
    """A handler that records ``(topic, payload)`` and lets the test wait for a count."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes]] = []
        self._arrived = threading.Condition()

    def __call__(self, topic: str, payload: bytes) -> None:
        with self._arrived:
            self.messages.append((topic, payload))
            self._arrived.notify_all()

    def wait_for(self, count: int, timeout_s: float = TIMEOUT_S) -> bool:
        with self._arrived:
            return self._arrived.wait_for(lambda: len(self.messages) >= count, timeout_s)

    @property
    def payloads(self) -> list[bytes]:
        return [payload for _, payload in self.messages]


def _wait_until(condition: Callable[[], bool], timeout_s: float = TIMEOUT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def connect(broker_settings: BrokerSettings) -> Iterator[Connect]:
    """Make connections to the test broker (fast reconnects); all are stopped afterwards."""
    made: list[MqttConnection] = []

    def make(client_id: str, *, start: bool = True, **options: Any) -> MqttConnection:
        options.setdefault("settings", broker_settings)
        options.setdefault("reconnect_min_s", 0.05)
        options.setdefault("reconnect_max_s", 0.5)
        connection = MqttConnection(client_id=client_id, **options)
        made.append(connection)
        if start:
            connection.start()
            assert connection.wait_connected(TIMEOUT_S), f"{client_id} did not connect"
        return connection

    yield make
    for connection in made:
        connection.stop()


def listening(connect: Connect, client_id: str, topic_filter: str) -> Inbox:
    """An Inbox of ``topic_filter`` on a new connection, once the broker confirmed the
    subscription."""
    inbox = Inbox()
    receiver = connect(client_id, start=False)
    receiver.route(topic_filter, inbox)
    receiver.start()
    assert receiver.wait_subscribed(TIMEOUT_S)
    return inbox


def test_messages_reach_only_the_matching_handlers(connect: Connect) -> None:
    # Prepare: two routes before connecting, one added while connected.
    wildcard, plus, exact = Inbox(), Inbox(), Inbox()
    receiver = connect("router", start=False)
    receiver.route("ff/#", wildcard)
    receiver.route("ff/+/x", plus)
    receiver.start()
    receiver.route("other/exact", exact)
    assert receiver.wait_subscribed(TIMEOUT_S)
    sender = connect("sender")

    # Execute
    for topic in ("ff/1/x", "ff/2/y", "other/exact", "other/ignored"):
        sender.publish_wait(topic, topic.encode())

    # Assert
    assert wildcard.wait_for(2)
    assert plus.wait_for(1)
    assert exact.wait_for(1)
    assert wildcard.messages == [("ff/1/x", b"ff/1/x"), ("ff/2/y", b"ff/2/y")]
    assert plus.messages == [("ff/1/x", b"ff/1/x")]
    assert exact.messages == [("other/exact", b"other/exact")]


def test_a_raising_handler_is_counted_and_later_messages_still_arrive(connect: Connect) -> None:
    # Prepare
    inbox = Inbox()
    errors: list[tuple[str, Exception]] = []

    def picky(topic: str, payload: bytes) -> None:
        if payload == b"bad":
            raise ValueError("cannot parse")
        inbox(topic, payload)

    receiver = connect("picky", start=False, on_handler_error=lambda t, e: errors.append((t, e)))
    receiver.route("jobs/#", picky)
    receiver.start()
    assert receiver.wait_subscribed(TIMEOUT_S)
    sender = connect("jobs-sender")

    # Execute
    sender.publish_wait("jobs/1", b"bad")
    sender.publish_wait("jobs/2", b"good")

    # Assert
    assert inbox.wait_for(1)
    assert inbox.messages == [("jobs/2", b"good")]
    assert receiver.handler_errors == 1
    assert [(topic, str(error)) for topic, error in errors] == [("jobs/1", "cannot parse")]
    assert receiver.connected


def test_publish_wait_inside_a_handler_is_refused_not_deadlocked(connect: Connect) -> None:
    # Prepare
    errors: list[Exception] = []
    receiver = connect("impatient", start=False, on_handler_error=lambda t, e: errors.append(e))

    def answer_and_wait(topic: str, payload: bytes) -> None:
        receiver.publish_wait("answer", b"no")

    receiver.route("ask", answer_and_wait)
    receiver.start()
    assert receiver.wait_subscribed(TIMEOUT_S)

    # Execute
    receiver.publish_wait("ask", b"?")

    # Assert
    assert _wait_until(lambda: bool(errors))
    assert "called from an MQTT handler" in str(errors[0])


_DOOMED_CLIENT = """
import sys, time
from faultfleet.wire.mqtt import MqttConnection, Will
from faultfleet.wire.settings import BrokerSettings
settings = BrokerSettings(host="127.0.0.1", port=int(sys.argv[1]))
topic = sys.argv[2]
connection = MqttConnection(client_id="doomed", settings=settings, will=Will(topic, b"offline"))
connection.start()
connection.publish_wait(topic, b"online", retain=True)
print("ready", flush=True)
time.sleep(60)
"""


def test_retained_last_will_appears_when_the_client_process_is_killed(
    broker: RunningBroker, connect: Connect
) -> None:
    # Prepare: a client in its own process announces itself online.
    topic = "ff/agents/doomed/status"
    process = subprocess.Popen(
        [sys.executable, "-c", _DOOMED_CLIENT, str(broker.port), topic],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        watcher = Inbox()
        observer = connect("observer", start=False)
        observer.route(topic, watcher)
        observer.start()
        assert watcher.wait_for(1)

        # Execute: SIGKILL, no DISCONNECT packet reaches the broker.
        process.kill()
    finally:
        process.kill()
        process.wait()

    # Assert: the will reaches the live subscriber and stays retained for late ones.
    assert watcher.wait_for(2)
    assert watcher.payloads == [b"online", b"offline"]
    latecomer = Inbox()
    late = connect("latecomer", start=False)
    late.route(topic, latecomer)
    late.start()
    assert latecomer.wait_for(1)
    assert latecomer.payloads == [b"offline"]


def test_clean_stop_publishes_final_messages_and_not_the_will(connect: Connect) -> None:
    # Prepare
    status = "ff/agents/tidy/status"
    watcher = Inbox()
    observer = connect("observer", start=False)
    observer.route("ff/#", watcher)
    observer.start()
    assert observer.wait_subscribed(TIMEOUT_S)
    tidy = connect("tidy", will=Will(status, b"offline-by-will"))
    tidy.publish_wait(status, b"online", retain=True)

    # Execute
    tidy.stop(final=[(status, b"offline", True)])
    tidy.stop()  # idempotent
    # A message sent after the stop: once it arrives, a will would have arrived before it.
    observer.publish_wait("ff/marker", b"after-stop")

    # Assert
    assert watcher.wait_for(3)
    assert watcher.payloads == [b"online", b"offline", b"after-stop"]
    assert not tidy.connected
    with pytest.raises(RuntimeError, match="'tidy' was stopped"):
        tidy.publish(status, b"too late")


def test_reconnects_and_resubscribes_after_the_broker_restarts(
    broker: RunningBroker, connect: Connect
) -> None:
    # Prepare
    changes: list[bool] = []
    inbox = Inbox()
    receiver = connect("survivor", start=False, on_connection_change=changes.append)
    receiver.route("ff/restart/#", inbox)
    receiver.start()
    assert receiver.wait_subscribed(TIMEOUT_S)

    # Execute: the broker goes away and comes back on the same port.
    broker.stop()
    assert _wait_until(lambda: not receiver.connected)
    with start_broker(prefer="mosquitto", port=broker.port, workdir=broker.workdir):
        assert receiver.wait_subscribed(TIMEOUT_S)
        sender = connect("restart-sender")
        sender.publish_wait("ff/restart/1", b"after restart")
        arrived = inbox.wait_for(1)
        receiver.stop()
        sender.stop()

    # Assert
    assert arrived
    assert inbox.messages == [("ff/restart/1", b"after restart")]
    assert changes == [True, False, True, False]


def test_handlers_tell_retained_deliveries_and_connections_are_numbered(
    broker: RunningBroker, connect: Connect
) -> None:
    # Prepare: a retained message before the receiver subscribes
    connect("retain-sender").publish_wait("ff/flag/old", b"retained", retain=True)
    seen: list[tuple[bytes, bool]] = []
    receiver = connect("flag-reader", start=False)
    receiver.route(
        "ff/flag/#", lambda _, payload: seen.append((payload, receiver.delivering_retained))
    )
    before = (receiver.connection_number, receiver.outgoing_connection())

    # Execute: connect; a message published after the subscription; the broker restarts
    receiver.start()
    assert receiver.wait_subscribed(TIMEOUT_S)
    connect("fresh-sender").publish_wait("ff/flag/new", b"fresh")
    assert _wait_until(lambda: len(seen) == 2)
    first = (receiver.connection_number, receiver.outgoing_connection())
    broker.stop()
    assert _wait_until(lambda: not receiver.connected)
    while_down = (receiver.connection_number, receiver.outgoing_connection())
    with start_broker(prefer="mosquitto", port=broker.port, workdir=broker.workdir):
        assert receiver.wait_subscribed(TIMEOUT_S)
        again = (receiver.connection_number, receiver.outgoing_connection())
        receiver.stop()

    # Assert: the retained message is told apart from the fresh one, and only in a handler
    assert seen[:2] == [(b"retained", True), (b"fresh", False)]
    assert not receiver.delivering_retained
    assert (before, first, while_down, again) == ((0, 1), (1, 1), (1, 2), (2, 2))


def test_persistent_session_receives_qos1_messages_sent_while_it_was_away(
    connect: Connect,
) -> None:
    # Prepare: subscribe once, then leave cleanly; the broker keeps the session.
    first = connect("keeper", start=False, persistent_session=True)
    first.route("ff/queued/#", Inbox())
    first.start()
    assert first.wait_subscribed(TIMEOUT_S)
    first.stop()
    sender = connect("queue-sender")

    # Execute
    for index in range(3):
        sender.publish_wait(f"ff/queued/{index}", f"m{index}".encode())
    inbox = Inbox()
    second = connect("keeper", start=False, persistent_session=True)
    second.route("ff/queued/#", inbox)
    second.start()

    # Assert
    assert inbox.wait_for(3)
    assert inbox.payloads == [b"m0", b"m1", b"m2"]


@pytest.mark.parametrize("while_connected", [True, False])
def test_unroute_unsubscribes_the_persistent_session(
    connect: Connect, while_connected: bool
) -> None:
    # Prepare: a persistent session subscribed to ff/gone/#
    first = connect("leaver", start=False, persistent_session=True)
    first.route("ff/gone/#", Inbox())
    first.start()
    assert first.wait_subscribed(TIMEOUT_S)
    first.stop()

    # Execute: the same session drops the route (while connected, or before connecting)
    second = connect("leaver", start=False, persistent_session=True)
    inbox = Inbox()
    second.route("ff/gone/#", inbox)
    if while_connected:
        second.start()
        assert second.wait_subscribed(TIMEOUT_S)
        second.unroute("ff/gone/#", inbox)
    else:
        second.unroute("ff/gone/#", inbox)
        second.start()
    second.route("ff/kept", inbox)
    assert second.wait_subscribed(TIMEOUT_S)
    second.stop()
    sender = connect("gone-sender")
    sender.publish_wait("ff/gone/1", b"queued only if still subscribed")
    sender.publish_wait("ff/kept", b"queued")
    third_inbox = Inbox()
    third = connect("leaver", start=False, persistent_session=True)
    third.route("ff/#", third_inbox)
    third.start()

    # Assert: the broker queued the kept topic's message only
    assert third_inbox.wait_for(1)
    assert third.wait_subscribed(TIMEOUT_S)
    sender.publish_wait("ff/marker", b"after")
    assert third_inbox.wait_for(2)
    assert third_inbox.messages == [("ff/kept", b"queued"), ("ff/marker", b"after")]
    assert inbox.messages == []


def test_oversized_publish_raises_value_error_naming_the_sizes() -> None:
    settings = BrokerSettings(port=free_port(), max_payload_bytes=1024)
    connection = MqttConnection(client_id="big", settings=settings)
    with pytest.raises(ValueError, match=r"1025 bytes.*max_payload_bytes=1024"):
        connection.publish("ff/big", b"x" * 1025)


def test_oversized_incoming_message_skips_the_handler(
    broker_settings: BrokerSettings, connect: Connect
) -> None:
    # Prepare: the receiver accepts 1 KiB, the sender sends 2 KiB.
    inbox = Inbox()
    oversized: list[tuple[str, int]] = []
    small = broker_settings.model_copy(update={"max_payload_bytes": 1024})
    receiver = connect(
        "small", start=False, settings=small, on_oversized=lambda t, n: oversized.append((t, n))
    )
    receiver.route("ff/size/#", inbox)
    receiver.start()
    assert receiver.wait_subscribed(TIMEOUT_S)
    sender = connect("large-sender")

    # Execute
    sender.publish_wait("ff/size/big", b"x" * 2048)
    sender.publish_wait("ff/size/small", b"fits")

    # Assert
    assert inbox.wait_for(1)
    assert inbox.messages == [("ff/size/small", b"fits")]
    assert oversized == [("ff/size/big", 2048)]
    assert receiver.oversized_messages == 1


def test_full_outgoing_queue_raises_publish_error() -> None:
    # Prepare: nothing listens on the port, so messages pile up locally.
    settings = BrokerSettings(port=free_port())
    connection = MqttConnection(client_id="queued", settings=settings, max_queued_messages=2)
    connection.publish("ff/q", b"1")
    connection.publish("ff/q", b"2")

    # Execute / Assert
    with pytest.raises(PublishError, match="2 messages already wait"):
        connection.publish("ff/q", b"3")


def test_publish_wait_times_out_while_the_broker_is_down() -> None:
    # Prepare
    settings = BrokerSettings(port=free_port())
    connection = MqttConnection(client_id="patient", settings=settings, reconnect_min_s=0.05)
    connection.start()
    try:
        # Execute / Assert
        with pytest.raises(TimeoutError, match="did not acknowledge"):
            connection.publish_wait("ff/t", b"hello", timeout_s=0.2)
        assert not connection.connected
    finally:
        connection.stop()


def test_publish_many_sends_in_order_and_counts_the_acknowledged(connect: Connect) -> None:
    # Prepare
    inbox = listening(connect, "many-receiver", "ff/many/#")
    sender = connect("many-sender")
    messages = [(f"ff/many/{index}", f"m{index}".encode(), False) for index in range(5)]

    # Execute
    acknowledged = sender.publish_many(messages, timeout_s=TIMEOUT_S)

    # Assert
    assert acknowledged == 5
    assert inbox.wait_for(5)
    assert inbox.payloads == [b"m0", b"m1", b"m2", b"m3", b"m4"]


def test_publish_many_without_a_broker_acknowledges_none() -> None:
    connection = MqttConnection(client_id="alone", settings=BrokerSettings(port=free_port()))
    connection.start()
    try:
        acknowledged = connection.publish_many([("ff/alone", b"x", False)], timeout_s=0.2)
    finally:
        connection.stop()

    assert acknowledged == 0


def test_a_sender_waiting_for_its_backlog_never_holds_more_than_the_budget_and_one_message(
    connect: Connect,
) -> None:
    # Prepare: a receiver of 40 messages of 100 kB, a sender with a 250 kB budget
    inbox = listening(connect, "backlog-receiver", "ff/backlog/#")
    sender = connect("backlog-sender")
    size, budget = 100_000, 250_000
    held = []

    # Execute: before each publish, wait until the backlog is within the budget
    for index in range(40):
        assert sender.wait_backlog(budget, TIMEOUT_S)
        held.append(sender._sender.acknowledgements.pending_bytes())
        sender.publish(f"ff/backlog/{index}", bytes([index]) * size)
        held.append(sender._sender.acknowledgements.pending_bytes())

    # Assert: never more than the budget plus the message just sent; everything arrives in
    # order and is acknowledged
    assert max(held) <= budget + size
    assert inbox.wait_for(40)
    assert [payload[0] for payload in inbox.payloads] == list(range(40))
    assert sender.wait_acknowledged(TIMEOUT_S)
    assert sender._sender.acknowledgements.pending_bytes() == 0


def test_the_backlog_of_a_connection_without_a_broker_does_not_drain() -> None:
    # Prepare: nothing listens on the port; two messages wait in the client
    connection = MqttConnection(client_id="backlogged", settings=BrokerSettings(port=free_port()))
    connection.start()
    try:
        connection.publish("ff/b", b"x" * 1000)
        connection.publish("ff/b", b"y" * 500)

        # Execute
        started = time.monotonic()
        within_1000 = connection.wait_backlog(1000, 0.3)
        waited_s = time.monotonic() - started
        within_1500 = connection.wait_backlog(1500, 0.3)
        pending = connection._sender.acknowledgements.pending_bytes()
    finally:
        connection.stop()

    # Assert: 1,500 bytes wait; a budget below that times out, one above it holds at once
    assert not within_1000
    assert waited_s >= 0.25
    assert within_1500
    assert pending == 1500


def test_messages_sent_while_a_killed_broker_is_down_are_acknowledged_after_it_returns(
    broker: RunningBroker, connect: Connect
) -> None:
    # Prepare: a persistent receiver, subscribed (and saved by the broker)
    inbox = Inbox()
    receiver = connect("outage-receiver", start=False, persistent_session=True)
    receiver.route("ff/outage/#", inbox)
    receiver.start()
    assert receiver.wait_subscribed(TIMEOUT_S)
    sender = connect("outage-sender")
    sender.publish_wait("ff/outage/0", b"before")

    # Execute: SIGKILL, two messages while it is down, then the broker comes back
    broker.kill()
    assert _wait_until(lambda: not sender.connected and not receiver.connected)
    sender.publish("ff/outage/1", b"during 1")
    sender.publish("ff/outage/2", b"during 2")
    acknowledged_while_down = sender.wait_acknowledged(0.2)
    broker.restart()

    # Assert
    assert not acknowledged_while_down
    assert sender.wait_acknowledged(TIMEOUT_S)
    assert inbox.wait_for(3)
    assert inbox.payloads == [b"before", b"during 1", b"during 2"]
