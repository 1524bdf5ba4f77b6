"""Starting and stopping the local test broker (Mosquitto, and the amqtt fallback)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from faultfleet_apps.brokers import launch
from faultfleet_apps.brokers.launch import BrokerError, free_port, mosquitto_config, start_broker


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_mosquitto_starts_listening_and_stop_frees_its_port(
    mosquitto_bin: Path, tmp_path: Path
) -> None:
    # Prepare / Execute
    broker = start_broker(prefer="mosquitto", workdir=tmp_path)
    try:
        with socket.create_connection((broker.host, broker.port), timeout=2):
            listening = True
    finally:
        broker.stop()
    broker.stop()  # idempotent

    # Assert
    assert broker.kind == "mosquitto"
    assert listening
    assert not broker.running
    assert _port_is_free(broker.port)
    assert "listen socket on port" in broker.log_tail(50)


def test_a_picked_port_taken_before_the_broker_binds_it_is_replaced(
    mosquitto_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: the first port picked is bound by someone else by the time the broker starts
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        taken = squatter.getsockname()[1]
        picks = iter([taken])
        monkeypatch.setattr(launch, "free_port", lambda: next(picks, None) or free_port())

        # Execute
        broker = start_broker(prefer="mosquitto", workdir=tmp_path)
        try:
            with socket.create_connection((broker.host, broker.port), timeout=2):
                listening = True
        finally:
            broker.stop()

    # Assert
    assert broker.port != taken
    assert listening
    assert "address already in use" in (tmp_path / "mosquitto.log").read_text().lower()


def test_bad_config_line_raises_broker_error_with_log_tail(
    mosquitto_bin: Path, tmp_path: Path
) -> None:
    with pytest.raises(BrokerError, match=r"exited at start(.|\n)*not_a_mosquitto_option"):
        start_broker(
            prefer="mosquitto", workdir=tmp_path, extra_config=["not_a_mosquitto_option 1"]
        )


def test_mosquitto_config_allows_anonymous_unless_extra_config_sets_auth(tmp_path: Path) -> None:
    # Prepare
    def config(extra: list[str]) -> str:
        return mosquitto_config(
            port=1883,
            workdir=tmp_path,
            max_payload_bytes=4096,
            persistence=True,
            extra_config=extra,
        )

    # Execute
    open_config = config([])
    locked_config = config(["password_file /etc/pw"])

    # Assert
    assert "listener 1883 127.0.0.1\n" in open_config
    assert "allow_anonymous true\n" in open_config
    assert "message_size_limit 4096\n" in open_config
    assert f"persistence_location {tmp_path}/\n" in open_config
    assert "allow_anonymous" not in locked_config
    assert locked_config.endswith("password_file /etc/pw\n")


def test_amqtt_rejects_mosquitto_extra_config() -> None:
    with pytest.raises(BrokerError, match="extra_config"):
        start_broker(prefer="amqtt", extra_config=["max_keepalive 60"])


@pytest.mark.integration
def test_amqtt_broker_round_trips_a_retained_qos1_message() -> None:
    # Prepare
    with start_broker(prefer="amqtt", port=free_port()) as broker:
        settings = BrokerSettings(host=broker.host, port=broker.port)
        publisher = MqttConnection(client_id="amqtt-pub", settings=settings)
        subscriber = MqttConnection(client_id="amqtt-sub", settings=settings)
        received: list[tuple[str, bytes]] = []
        subscriber.route("ff/status/#", lambda topic, payload: received.append((topic, payload)))
        try:
            publisher.start()
            assert publisher.wait_connected(30)

            # Execute: the subscriber connects only after the retained message was stored.
            publisher.publish_wait("ff/status/a", b"online", retain=True, timeout_s=30)
            subscriber.start()
            assert subscriber.wait_subscribed(30)
            _wait_until(lambda: bool(received))
        finally:
            publisher.stop()
            subscriber.stop()

    # Assert
    assert broker.kind == "amqtt"
    assert received == [("ff/status/a", b"online")]
    assert not broker.running


def _retained_after_a_kill(workdir: Path, extra_config: list[str]) -> list[bytes]:
    """Publish a retained message, SIGKILL the broker once its database file was replaced,
    restart it and return what a new subscriber gets on that topic."""
    broker = start_broker(prefer="mosquitto", workdir=workdir, extra_config=extra_config)
    database = workdir / "mosquitto.db"
    try:
        settings = BrokerSettings(host=broker.host, port=broker.port)
        publisher = MqttConnection(client_id="kill-pub", settings=settings)
        publisher.start()
        assert publisher.wait_connected(30)
        before = database.stat().st_ino if database.exists() else None
        publisher.publish_wait("ff/kept/a", b"retained", retain=True, timeout_s=30)
        if not extra_config:  # a save follows the change: wait until the file was replaced
            _wait_until(lambda: database.exists() and database.stat().st_ino != before)
        publisher.stop()
        port = broker.port

        # Execute
        broker.kill()
        killed = not broker.running
        broker.restart()
        received: list[bytes] = []
        subscriber = MqttConnection(client_id="kill-sub", settings=settings)
        subscriber.route("ff/kept/#", lambda topic, payload: received.append(payload))
        subscriber.start()
        assert subscriber.wait_subscribed(30)
        if not extra_config:
            _wait_until(lambda: bool(received))
        else:
            subscriber.publish_wait("ff/probe", b"x")  # anything retained came before this
        subscriber.stop()
    finally:
        broker.stop()
    assert killed
    assert broker.port == port
    return received


def test_a_killed_broker_restarts_with_everything_it_had_taken(
    mosquitto_bin: Path, tmp_path: Path
) -> None:
    assert _retained_after_a_kill(tmp_path, []) == [b"retained"]


def test_without_autosave_on_changes_a_kill_loses_the_retained_message(
    mosquitto_bin: Path, tmp_path: Path
) -> None:
    # Mosquitto's default: a save every 1800 s and at a clean exit, so a SIGKILL loses it
    assert _retained_after_a_kill(tmp_path, ["autosave_interval 1800"]) == []


def test_restart_refuses_a_running_broker(mosquitto_bin: Path, tmp_path: Path) -> None:
    with (
        start_broker(prefer="mosquitto", workdir=tmp_path) as broker,
        pytest.raises(BrokerError, match="still runs"),
    ):
        broker.restart()


def test_mosquitto_config_saves_on_every_change_unless_told_otherwise(tmp_path: Path) -> None:
    def config(*extra: str) -> str:
        return mosquitto_config(
            port=1883,
            workdir=tmp_path,
            max_payload_bytes=1024,
            persistence=True,
            extra_config=extra,
        )

    assert "autosave_on_changes true\nautosave_interval 1\n" in config()
    assert "autosave_on_changes" not in config("autosave_interval 60")


def _wait_until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
