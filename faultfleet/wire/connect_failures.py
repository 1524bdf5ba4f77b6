"""Why a connection to the broker failed, in words an operator can act on, logged at once.

The paho adapter (:mod:`faultfleet.wire.mqtt`) reports every failed try here: a socket
error before MQTT starts (:func:`describe_socket_error`: nothing listens, the host name
does not resolve, the TLS handshake failed, no answer) or the broker's refusal in its
CONNACK (:func:`describe_refusal`: bad user name or password, not authorised).
:class:`FailureLog` logs the first failure at WARNING at once, then again at WARNING
whenever the reason changes and every ``repeat_every``-th try (the others at DEBUG, so a
broker that stays down for a day does not fill the journal), and says at INFO how many
tries failed once the connection is up. Paho-free, like :mod:`faultfleet.wire.dispatch`.
"""

from __future__ import annotations

import errno
import logging
import socket
import ssl
import threading
from dataclasses import dataclass
from enum import StrEnum

REPEAT_EVERY = 10
"""A failure that repeats is logged at WARNING again every this many tries: with the
30 s ceiling of the reconnect backoff, every five minutes."""

_BAD_CREDENTIALS = 134  # MQTT 5 reason code; paho maps MQTT 3.1.1's CONNACK 4 to it
_NOT_AUTHORIZED = 135  # MQTT 3.1.1's CONNACK 5


class FailureKind(StrEnum):
    """What went wrong, one word each (they head the log line)."""

    REFUSED = "refused"
    """Nothing accepts connections at host:port (broker down, wrong port, firewall reject)."""
    DNS = "dns"
    """The host name does not resolve."""
    TLS = "tls"
    """The TLS handshake failed (unknown CA, name mismatch, plain listener)."""
    TIMEOUT = "timeout"
    """No answer within the connect timeout (firewall drop, wrong address)."""
    UNREACHABLE = "unreachable"
    """No route to the host or its network."""
    AUTH = "auth"
    """The broker refused the login (user name, password or certificate)."""
    BROKER = "broker"
    """The broker refused the connection for another reason (client id, protocol, busy)."""
    NETWORK = "network"
    """Any other socket error."""


@dataclass(frozen=True)
class ConnectFailure:
    """One failed connection try.

    Attributes
    ----------
    kind : FailureKind
    detail : str
        What happened, e.g. ``connection refused``.
    advice : str
        What to check.
    """

    kind: FailureKind
    detail: str
    advice: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}; {self.advice}"


def describe_socket_error(error: OSError, host: str, port: int, *, tls: bool) -> ConnectFailure:
    """The failure behind an exception raised while opening the connection.

    Parameters
    ----------
    error : OSError
        What paho's connection attempt raised (``ssl.SSLError`` and ``socket.gaierror``
        are OSErrors too).
    host, port : str, int
        The broker address the service was configured with.
    tls : bool
        Whether the connection uses TLS (``broker.tls_ca`` is set): a connection reset
        then means the handshake failed, typically against a plain listener.
    """
    where = f"{host}:{port}"
    text = _error_text(error)
    kind, detail, advice = (
        FailureKind.NETWORK,
        f"cannot connect to {where} ({text})",
        "check broker.host, broker.port and the network",
    )
    if isinstance(error, socket.gaierror):
        kind, detail = FailureKind.DNS, f"cannot resolve host {host!r} ({text})"
        advice = "check broker.host and this machine's DNS or /etc/hosts"
    elif isinstance(error, ssl.SSLCertVerificationError):
        kind = FailureKind.TLS
        detail = f"the broker's certificate at {where} did not verify ({error.verify_message})"
        advice = (
            "broker.tls_ca must be the CA that signed the broker's certificate, and "
            "broker.host a name or address in that certificate"
        )
    elif isinstance(error, ssl.SSLError) or (tls and isinstance(error, ConnectionResetError)):
        kind, detail = FailureKind.TLS, f"TLS handshake with {where} failed ({text})"
        advice = (
            "check that broker.port is the broker's TLS listener, and broker.tls_ca, "
            "tls_cert and tls_key"
        )
    elif isinstance(error, ConnectionRefusedError):
        kind, detail = FailureKind.REFUSED, f"connection to {where} refused"
        advice = "is the broker running, and are broker.host and broker.port right?"
    elif isinstance(error, TimeoutError):
        kind, detail = FailureKind.TIMEOUT, f"no answer from {where} ({text})"
        advice = "check broker.host and broker.port and that no firewall drops the connection"
    elif error.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL):
        kind, detail = FailureKind.UNREACHABLE, f"{where} is unreachable ({text})"
        advice = "check broker.host and this machine's network and routes"
    return ConnectFailure(kind, detail, advice)


def describe_refusal(reason_value: int, reason_text: str, username: str | None) -> ConnectFailure:
    """The failure behind a CONNACK that refused the connection.

    Parameters
    ----------
    reason_value : int
        The MQTT 5 reason code paho reports (MQTT 3.1.1 codes mapped onto it).
    reason_text : str
        Its name, e.g. ``Not authorized``.
    username : str or None
        The user name the service logged in with.
    """
    who = f"user {username!r}" if username is not None else "an anonymous client"
    if reason_value in (_BAD_CREDENTIALS, _NOT_AUTHORIZED):
        return ConnectFailure(
            FailureKind.AUTH,
            f"the broker refused the login of {who} ({reason_text})",
            "check broker.username and broker.password_file against the broker's password "
            "file (mosquitto_passwd), and allow_anonymous",
        )
    return ConnectFailure(
        FailureKind.BROKER,
        f"the broker refused the connection of {who} ({reason_text})",
        "check the broker's log",
    )


def _error_text(error: OSError) -> str:
    reason = getattr(error, "reason", None)  # set by the ssl module on the errors it raises
    if isinstance(error, ssl.SSLError) and reason:
        return str(reason).replace("_", " ").lower()
    return error.strerror or str(error) or type(error).__name__


class FailureLog:
    """Counts consecutive failed tries and logs them without flooding the log.

    Parameters
    ----------
    logger : logging.Logger
    broker : str
        ``host:port``, for the messages.
    client_id : str
    repeat_every : int
        A failure repeating with the same kind is logged at WARNING every this many tries.
    """

    def __init__(
        self,
        logger: logging.Logger,
        broker: str,
        client_id: str,
        repeat_every: int = REPEAT_EVERY,
    ) -> None:
        if repeat_every < 1:
            raise ValueError(f"repeat_every={repeat_every} must be >= 1")
        self.logger = logger
        self.broker = broker
        self.client_id = client_id
        self.repeat_every = repeat_every
        self._lock = threading.Lock()
        self._failures = 0
        self._last: ConnectFailure | None = None

    @property
    def last(self) -> ConnectFailure | None:
        """The last failure since the last successful connection; None once connected."""
        return self._last

    @property
    def consecutive(self) -> int:
        """Tries that failed since the last successful connection."""
        return self._failures

    def failed(self, failure: ConnectFailure) -> None:
        """Record and log one failed try."""
        with self._lock:
            self._failures += 1
            changed = self._last is None or self._last.kind != failure.kind
            self._last = failure
            count = self._failures
        loud = changed or count % self.repeat_every == 0
        self.logger.log(
            logging.WARNING if loud else logging.DEBUG,
            "cannot connect %r to broker %s: %s (try %d, retrying with backoff)",
            self.client_id,
            self.broker,
            failure,
            count,
        )

    def connected(self) -> int:
        """Forget the failures once connected; returns how many tries had failed."""
        with self._lock:
            count, self._failures, self._last = self._failures, 0, None
        if count:
            self.logger.info(
                "connected %r to broker %s after %d failed tries",
                self.client_id,
                self.broker,
                count,
            )
        return count
