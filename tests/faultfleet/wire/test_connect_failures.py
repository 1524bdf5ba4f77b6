"""Broker connection failures are logged at once with their reason.

The reasons are read from the exceptions a real connection raises (an unreachable port, a
host name that does not resolve, TLS against a plain listener) and from the broker's
CONNACK (a wrong password: tests/deploy/test_mosquitto.py, which runs the plant's
Mosquitto configuration). The classification and the throttling are checked on their own.
"""

from __future__ import annotations

import errno
import logging
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from faultfleet.wire.connect_failures import (
    ConnectFailure,
    FailureKind,
    FailureLog,
    describe_refusal,
    describe_socket_error,
)
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from faultfleet_apps.brokers.launch import free_port

TIMEOUT_S = 30.0
SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def _verify_error() -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(
        1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"
    )
    error.verify_message = "self-signed certificate"
    return error


@pytest.mark.parametrize(
    ("error", "tls", "kind", "words"),
    [
        (
            ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
            False,
            "refused",
            "refused",
        ),
        (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), False, "dns", "resolve"),
        (_verify_error(), True, "tls", "self-signed certificate"),
        (
            ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"),
            True,
            "tls",
            "handshake",
        ),
        (
            ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
            True,
            "tls",
            "handshake",
        ),
        (
            ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
            False,
            "network",
            "reset",
        ),
        (TimeoutError("timed out"), False, "timeout", "no answer"),
        (OSError(errno.EHOSTUNREACH, "No route to host"), False, "unreachable", "unreachable"),
        (OSError(errno.EPIPE, "Broken pipe"), False, "network", "Broken pipe"),
    ],
)
def test_socket_errors_are_named_with_what_to_check(
    error: OSError, tls: bool, kind: str, words: str
) -> None:
    # Execute
    failure = describe_socket_error(error, "broker.plant.example", 1883, tls=tls)

    # Assert
    assert failure.kind == kind
    assert words.lower() in failure.detail.lower()
    assert "broker." in failure.advice or "broker" in failure.advice
    assert str(failure).startswith(f"{kind}: ")


@pytest.mark.parametrize(
    ("code", "text", "kind"),
    [
        (134, "Bad user name or password", "auth"),
        (135, "Not authorized", "auth"),
        (136, "Server unavailable", "broker"),
    ],
)
def test_a_refused_connack_names_the_user(code: int, text: str, kind: str) -> None:
    # Execute
    failure = describe_refusal(code, text, "m07")

    # Assert
    assert failure.kind == kind
    assert f"user 'm07' ({text})" in failure.detail
    assert describe_refusal(code, text, None).detail.endswith(f"an anonymous client ({text})")


def test_a_repeating_failure_is_loud_at_first_on_a_change_and_every_nth_try(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Prepare
    log = FailureLog(logging.getLogger("test.failures"), "h:1883", "c", repeat_every=3)
    refused = ConnectFailure(FailureKind.REFUSED, "refused", "check")
    dns = ConnectFailure(FailureKind.DNS, "dns", "check")

    # Execute
    with caplog.at_level(logging.DEBUG, logger="test.failures"):
        for failure in (refused, refused, refused, refused, dns, dns):
            log.failed(failure)
        failed_tries = log.connected()

    # Assert: tries 1 (first), 3 (every 3rd) and 5 (the kind changed) at WARNING
    levels = [r.levelname for r in caplog.records]
    assert levels == ["WARNING", "DEBUG", "WARNING", "DEBUG", "WARNING", "WARNING", "INFO"]
    assert "(try 5, retrying with backoff)" in caplog.records[4].getMessage()
    assert "after 6 failed tries" in caplog.records[-1].getMessage()
    assert failed_tries == 6
    assert (log.last, log.consecutive) == (None, 0)


@pytest.fixture
def failing() -> Iterator[Callable[[BrokerSettings], MqttConnection]]:
    """Start connections (fast reconnects) that cannot connect; stopped afterwards."""
    made: list[MqttConnection] = []

    def start(settings: BrokerSettings) -> MqttConnection:
        connection = MqttConnection(
            client_id=f"doomed-{len(made)}",
            settings=settings,
            reconnect_min_s=0.05,
            reconnect_max_s=0.2,
        )
        made.append(connection)
        connection.start()
        return connection

    yield start
    for connection in made:
        connection.stop()


def first_warning(caplog: pytest.LogCaptureFixture) -> logging.LogRecord:
    """The first WARNING of faultfleet.wire.mqtt, waiting up to TIMEOUT_S for it."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        warnings = [
            r
            for r in caplog.records
            if r.name == "faultfleet.wire.mqtt" and r.levelno == logging.WARNING
        ]
        if warnings:
            return warnings[0]
        time.sleep(0.01)
    raise AssertionError(f"no warning within {TIMEOUT_S:g} s; log: {caplog.text}")


def test_an_unreachable_port_is_logged_on_the_first_try(
    failing: Callable[[BrokerSettings], MqttConnection], caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: a port nothing listens on
    port = free_port()

    # Execute
    with caplog.at_level(logging.DEBUG, logger="faultfleet.wire.mqtt"):
        connection = failing(BrokerSettings(host="127.0.0.1", port=port))
        warning = first_warning(caplog)

    # Assert
    message = warning.getMessage()
    assert f"cannot connect 'doomed-0' to broker 127.0.0.1:{port}: refused:" in message
    assert "(try 1, retrying with backoff)" in message
    failure = connection.connect_failure
    assert failure is not None
    assert failure.kind == FailureKind.REFUSED
    assert not connection.connected


def test_a_host_that_does_not_resolve_is_logged_as_dns(
    failing: Callable[[BrokerSettings], MqttConnection], caplog: pytest.LogCaptureFixture
) -> None:
    # Execute: .invalid never resolves (RFC 2606)
    with caplog.at_level(logging.WARNING, logger="faultfleet.wire.mqtt"):
        failing(BrokerSettings(host="broker.faultfleet.invalid", port=1883))
        warning = first_warning(caplog)

    # Assert
    assert "dns: cannot resolve host 'broker.faultfleet.invalid'" in warning.getMessage()


def test_tls_against_a_plain_listener_is_logged_as_tls(
    broker_settings: BrokerSettings,
    failing: Callable[[BrokerSettings], MqttConnection],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Prepare: a real Mosquitto that speaks plain MQTT on this port
    if not SYSTEM_CA.is_file():
        pytest.skip(f"{SYSTEM_CA} is missing (Debian package ca-certificates)")
    settings = broker_settings.model_copy(update={"tls_ca": SYSTEM_CA})

    # Execute
    with caplog.at_level(logging.WARNING, logger="faultfleet.wire.mqtt"):
        connection = failing(settings)
        warning = first_warning(caplog)

    # Assert
    assert f"to broker {broker_settings.host}:{broker_settings.port}: tls: " in warning.getMessage()
    assert "TLS listener" in warning.getMessage()
    assert not connection.connected
