"""Diagnoses are handed to the outbox thread, which publishes them in order; what it cannot
publish goes to the outbox behind what waits there, and nothing handed over is lost at a
stop."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from edge_agent import diagnosis_delivery
from edge_agent.diagnosis_delivery import DiagnosisDelivery
from edge_agent.diagnosis_log import DiagnosisLog
from edge_agent.metrics import AgentMetrics
from edge_agent.outbox import DiagnosisOutbox
from faultfleet.clock import SYSTEM_CLOCK, Clock
from faultfleet.wire.dispatch import PublishError
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from tests.clocks import FakeClock, Wait

TOPIC = "faultfleet/v1/agents/m07/diagnoses"
SETTINGS = BrokerSettings(max_payload_bytes=2048)


class Broker:
    """What the connection would do: connected or not; publishes recorded, or refused."""

    def __init__(self) -> None:
        self.connected = True
        self.queue_full = False
        self.published: list[bytes] = []
        self.arrived = threading.Event()

    def publish(self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = False) -> int:
        assert (topic, qos, retain) == (TOPIC, 1, False)
        if self.queue_full:
            raise PublishError("10000 messages already wait")
        self.published.append(payload)
        self.arrived.set()
        return len(payload)


def _delivery(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    broker: Broker,
    *,
    publish_delay_s: float = 0.0,
    clock: Clock = SYSTEM_CLOCK,
) -> DiagnosisDelivery:
    connection = MqttConnection(client_id="faultfleet-agent-m07", settings=SETTINGS)
    monkeypatch.setattr(connection, "publish", broker.publish)
    monkeypatch.setattr(MqttConnection, "connected", property(lambda self: broker.connected))
    return DiagnosisDelivery(
        "m07",
        connection,
        TOPIC,
        DiagnosisLog(tmp_path / "diagnoses.jsonl"),
        DiagnosisOutbox(tmp_path / "outbox", max_records=100),
        AgentMetrics(),
        publish_delay_s=publish_delay_s,
        clock=clock,
    )


def _json(index: int) -> bytes:
    return b'{"window_index":%d}' % index


def _kept(delivery: DiagnosisDelivery) -> list[bytes]:
    return delivery.outbox.take(100).records


def test_diagnoses_are_published_by_the_outbox_thread_in_order_and_logged_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare
    broker = Broker()
    delivery = _delivery(tmp_path, monkeypatch, broker)

    # Execute: three diagnoses, then the outbox thread's turn
    for index in range(3):
        delivery.deliver_json(_json(index))
    before = list(broker.published)
    delivery.send_handed_over()

    # Assert
    assert before == []
    assert broker.published == [_json(i) for i in range(3)]
    assert [r["window_index"] for r in delivery.log.recent(10)] == [0, 1, 2]
    assert _kept(delivery) == []


def test_a_diagnosis_made_after_the_connection_dropped_waits_behind_those_handed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: one diagnosis handed over while connected, then the connection drops
    broker = Broker()
    delivery = _delivery(tmp_path, monkeypatch, broker)
    delivery.deliver_json(_json(0))
    broker.connected = False

    # Execute: a second diagnosis before the outbox thread's turn
    delivery.deliver_json(_json(1))
    delivery.send_handed_over()

    # Assert: both kept, in order
    assert broker.published == []
    assert _kept(delivery) == [_json(0), _json(1)]


def test_diagnoses_the_client_cannot_queue_are_kept_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: the client's queue is full when the outbox thread publishes
    broker = Broker()
    delivery = _delivery(tmp_path, monkeypatch, broker)
    delivery.deliver_json(_json(0))
    delivery.deliver_json(_json(1))
    broker.queue_full = True

    # Execute: the outbox thread's turn, then a diagnosis while the outbox holds two
    delivery.send_handed_over()
    broker.queue_full = False
    delivery.deliver_json(_json(2))

    # Assert: the third waits behind the first two, on disk, and nothing was handed over
    assert broker.published == []
    assert _kept(delivery) == [_json(0), _json(1), _json(2)]


def test_diagnoses_still_handed_over_at_a_stop_are_kept_for_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare
    broker = Broker()
    delivery = _delivery(tmp_path, monkeypatch, broker)
    delivery.deliver_json(_json(0))
    delivery.deliver_json(_json(1))

    # Execute: the agent stops before the outbox thread's turn, and starts again
    delivery.close()
    again = _delivery(tmp_path, monkeypatch, broker)

    # Assert
    assert broker.published == []
    assert _kept(again) == [_json(0), _json(1)]


def test_beyond_the_bound_the_diagnosis_thread_publishes_what_waits_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: an outbox thread that does not come
    monkeypatch.setattr(diagnosis_delivery, "MAX_HANDED_OVER", 2)
    broker = Broker()
    delivery = _delivery(tmp_path, monkeypatch, broker)

    # Execute
    for index in range(3):
        delivery.deliver_json(_json(index))

    # Assert
    assert broker.published == [_json(i) for i in range(3)]


def test_a_diagnosis_too_large_to_publish_is_refused_and_still_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare
    broker = Broker()
    delivery = _delivery(tmp_path, monkeypatch, broker)
    large = b'{"origin":"%s"}' % (b"x" * SETTINGS.max_payload_bytes)

    # Execute / Assert
    with pytest.raises(ValueError, match="max_payload_bytes"):
        delivery.deliver_json(large)
    delivery.send_handed_over()
    assert broker.published == []
    assert len(delivery.log.recent(1)) == 1


def test_the_outbox_thread_publishes_what_is_handed_over_when_woken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: the outbox thread running
    broker = Broker()
    delivery = _delivery(tmp_path, monkeypatch, broker)
    stop = threading.Event()
    thread = threading.Thread(target=delivery.run, args=(stop,), daemon=True)
    thread.start()

    # Execute
    delivery.deliver_json(_json(0))
    arrived = broker.arrived.wait(30)
    stop.set()
    thread.join(30)

    # Assert
    assert arrived
    assert broker.published == [_json(0)]
    assert not thread.is_alive()


@pytest.mark.parametrize("delay_s", [0.25, 2.0])
def test_the_outbox_thread_publishes_the_diagnoses_of_its_delay_together_in_one_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, delay_s: float
) -> None:
    # Prepare: the outbox thread's waits on a fake clock; diagnoses are made "during" them
    broker, stop = Broker(), threading.Event()
    seen: list[tuple[float, list[bytes]]] = []

    def during(wait: Wait) -> None:
        seen.append((wait.timeout_s, list(broker.published)))
        if len(seen) == 1:  # the thread waits to be woken: the first diagnosis wakes it
            delivery.deliver_json(_json(0))
        elif len(seen) == 2:  # waiting for the others: two more windows
            clock.advance(delay_s / 2)
            delivery.deliver_json(_json(1))
            delivery.deliver_json(_json(2))
        else:
            stop.set()

    clock = FakeClock(on_wait=during)
    delivery = _delivery(tmp_path, monkeypatch, broker, publish_delay_s=delay_s, clock=clock)

    # Execute
    delivery.run(stop)

    # Assert: nothing published while the first waited its delay, then all three at once
    assert seen[0] == (0.5, [])
    assert seen[1] == (delay_s, [])
    assert seen[2] == (0.5, [_json(i) for i in range(3)])
    assert broker.published == [_json(i) for i in range(3)]


def test_without_a_delay_the_outbox_thread_publishes_each_diagnosis_when_woken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare
    broker, stop = Broker(), threading.Event()
    seen: list[tuple[float, list[bytes]]] = []

    def during(wait: Wait) -> None:
        seen.append((wait.timeout_s, list(broker.published)))
        if len(seen) <= 2:
            delivery.deliver_json(_json(len(seen) - 1))
        else:
            stop.set()

    clock = FakeClock(on_wait=during)
    delivery = _delivery(tmp_path, monkeypatch, broker, clock=clock)

    # Execute
    delivery.run(stop)

    # Assert: only waits to be woken, each diagnosis out by the next one
    assert seen == [(0.5, []), (0.5, [_json(0)]), (0.5, [_json(0), _json(1)])]


def test_a_stop_during_the_delay_still_publishes_what_was_handed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare
    broker, stop = Broker(), threading.Event()

    def during(wait: Wait) -> None:
        if wait.waitable is stop:
            stop.set()  # the agent stops while the first diagnosis waits for others
        else:
            delivery.deliver_json(_json(0))

    clock = FakeClock(on_wait=during)
    delivery = _delivery(tmp_path, monkeypatch, broker, publish_delay_s=0.25, clock=clock)

    # Execute
    delivery.run(stop)

    # Assert: the wait ended with the stop, not its whole delay, and the diagnosis went out
    assert clock.monotonic() == 0.0
    assert broker.published == [_json(0)]


@pytest.mark.parametrize("delay_s", [-0.1, float("nan"), float("inf")])
def test_a_publish_delay_that_is_not_a_number_of_seconds_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, delay_s: float
) -> None:
    with pytest.raises(ValueError, match="publish_delay_s must be a number of seconds >= 0"):
        _delivery(tmp_path, monkeypatch, Broker(), publish_delay_s=delay_s)
