"""Service logins against the plant's Mosquitto: refused logins and foreign certificates are
logged at once with their reason, and ``faultfleet status`` reads the fleet with the
read-only ``status`` account of the shipped ACL."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from faultfleet.wire.connect_failures import FailureKind
from faultfleet.wire.messages import AgentStatus
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from faultfleet_apps.brokers.launch import RunningBroker
from faultfleet_apps.cli.main import main

from .plant_broker import PASSWORDS, ROOT, TIMEOUT_S, Plant, login, missing

pytestmark = pytest.mark.integration  # a real Mosquitto with the plant's configuration


def first_failure_warning(caplog: pytest.LogCaptureFixture) -> logging.LogRecord:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        for record in caplog.records:
            if record.name == "faultfleet.wire.mqtt" and record.levelno == logging.WARNING:
                return record
        time.sleep(0.01)
    raise AssertionError(f"no warning within {TIMEOUT_S:g} s: {caplog.text}")


def test_a_wrong_password_is_logged_at_once_as_a_refused_login(
    broker: RunningBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare
    password_file = tmp_path / "m01.password"
    password_file.write_text("not-the-password\n", encoding="utf-8")
    settings = BrokerSettings(
        host=broker.host, port=broker.port, username="m01", password_file=password_file
    )
    connection = MqttConnection(
        client_id="m01-wrong", settings=settings, reconnect_min_s=0.05, reconnect_max_s=0.2
    )

    # Execute
    with caplog.at_level(logging.DEBUG, logger="faultfleet.wire.mqtt"):
        connection.start()
        try:
            warning = first_failure_warning(caplog)
            failure = connection.connect_failure
        finally:
            connection.stop()

    # Assert
    assert "auth: the broker refused the login of user 'm01'" in warning.getMessage()
    assert "broker.password_file" in warning.getMessage()
    assert failure is not None
    assert failure.kind == FailureKind.AUTH
    assert not any(
        r.levelno >= logging.WARNING and "lost broker" in r.getMessage() for r in caplog.records
    )


def test_a_broker_certificate_from_another_ca_is_logged_as_tls(
    plant: Plant, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: trust the system's CAs, which did not sign the throw-away broker certificate
    system_ca = Path("/etc/ssl/certs/ca-certificates.crt")
    if not system_ca.is_file():
        missing(f"{system_ca} is needed: apt-get install ca-certificates")
    settings = BrokerSettings(
        host=plant.broker.host, port=plant.tls_port, username="m02", tls_ca=system_ca
    )
    connection = MqttConnection(
        client_id="m02-tls", settings=settings, reconnect_min_s=0.05, reconnect_max_s=0.2
    )

    # Execute
    with caplog.at_level(logging.WARNING, logger="faultfleet.wire.mqtt"):
        connection.start()
        try:
            warning = first_failure_warning(caplog)
        finally:
            connection.stop()

    # Assert
    assert "tls: the broker's certificate" in warning.getMessage()
    assert "did not verify" in warning.getMessage()


def status_config(tmp_path: Path, broker: RunningBroker, user: str) -> Path:
    """A ``faultfleet status`` TOML logging in as ``user``."""
    password_file = tmp_path / f"{user}.password"
    password_file.write_text(PASSWORDS[user] + "\n", encoding="utf-8")
    config = tmp_path / "status.toml"
    config.write_text(
        f'[broker]\nhost = "{broker.host}"\nport = {broker.port}\nusername = "{user}"\n'
        f'password_file = "{password_file}"\n',
        encoding="utf-8",
    )
    return config


def test_faultfleet_status_reads_the_fleet_with_the_status_account(
    broker: RunningBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare: m01's retained online status, as the agent leaves it
    status = AgentStatus(agent_id="m01", state="online", timestamp=100.0)
    with login(broker, "m01") as m01:
        m01.publish(f"{ROOT}/agents/m01/status", status.model_dump_json().encode(), retain=True)

    # Execute
    code = main(["status", "--config", str(status_config(tmp_path, broker, "status")), "--json"])

    # Assert
    document = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [(a["agent_id"], a["state"], a["last_seen"]) for a in document["agents"]] == [
        ("m01", "online", 100.0)
    ]
    with login(broker, "m01") as m01:
        m01.publish(f"{ROOT}/agents/m01/status", b"", retain=True)
