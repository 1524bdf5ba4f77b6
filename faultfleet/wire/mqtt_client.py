"""The paho client :class:`~faultfleet.wire.mqtt.MqttConnection` drives, built and configured.

:func:`make_client` sets up one paho client (MQTT 3.1.1, callback API version 2) from a
service's :class:`~faultfleet.wire.settings.BrokerSettings`: login, TLS, last will, in-flight
and queue limits, reconnect backoff, and paho's log lines on ``faultfleet.wire.mqtt.paho``.
:class:`FailureReportingClient` keeps the exception of the last failed connection try, which
paho does not pass to ``on_connect_fail`` (:mod:`faultfleet.wire.connect_failures` turns it
into the reason an operator reads). With :mod:`faultfleet.wire.mqtt`, the only modules that
import paho.
"""

from __future__ import annotations

import logging
from typing import cast

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode

from faultfleet.wire.dispatch import Will
from faultfleet.wire.settings import BrokerSettings

MAX_INFLIGHT_MESSAGES = 100


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
) -> FailureReportingClient:
    """A configured, unconnected client; the caller sets the callbacks.

    Parameters
    ----------
    client_id : str
    settings : BrokerSettings
        Login (the password read from its file now), TLS files.
    will : Will, optional
    persistent_session : bool
        ``clean_session=False``: the broker keeps subscriptions and queues QoS 1 messages.
    reconnect_s : (float, float), seconds
        First and largest delay of the reconnect backoff.
    max_queued_messages : int
        Outgoing QoS 1 messages kept while unacknowledged or disconnected.
    """
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
