"""The ``mosquitto.conf`` of the local test and demo broker (:mod:`faultfleet_apps.brokers.launch`).

Persistence is on by default and written to survive a SIGKILL, as in the shipped plant
configuration (``deploy/mosquitto/faultfleet.conf``, docs/deploy.md): Mosquitto keeps its
database in memory and writes it to ``mosquitto.db`` only on a clean exit and on autosaves,
so with a save every few minutes (``autosave_interval``, 1800 s by default) a killed broker
comes back with whatever was saved last and loses every session, subscription, retained
message and queued QoS 1 message since. ``autosave_on_changes true``
with ``autosave_interval 1`` saves after every change instead: a new persistent session, a
subscription, a retained message, a message queued for a client that is away (messages
delivered at once to connected clients are not changes). The file is written beside the
old one and renamed into place, so a kill during a save leaves the previous save.
"""

from __future__ import annotations

import getpass
from collections.abc import Sequence
from pathlib import Path

PUBLISH_HEADER_ROOM_BYTES = 5 + 2 + 65_535 + 2
"""Largest MQTT 3.1.1 PUBLISH overhead: fixed header, topic length, topic, packet id."""

AUTOSAVE_ON_EVERY_CHANGE = ("autosave_on_changes true", "autosave_interval 1")
"""Save the database after every change, so that a SIGKILL loses nothing the broker took."""


def mosquitto_config(
    *,
    port: int,
    workdir: Path,
    max_payload_bytes: int,
    persistence: bool,
    extra_config: Sequence[str] = (),
) -> str:
    """Text of a ``mosquitto.conf``: listen on 127.0.0.1:``port``, keep files in ``workdir``.

    Anonymous access is allowed unless ``extra_config`` sets ``allow_anonymous`` or
    ``password_file`` itself. ``message_size_limit`` is ``max_payload_bytes`` (larger
    messages are dropped) and ``max_packet_size`` that plus the PUBLISH header room (a
    client sending a larger packet is disconnected). With ``persistence`` the database is
    saved after every change (:data:`AUTOSAVE_ON_EVERY_CHANGE`) unless ``extra_config``
    sets the autosave itself.
    """
    extra = [line.strip() for line in extra_config]
    sets_auth = any(line.startswith(("allow_anonymous", "password_file")) for line in extra)
    sets_user = any(line.startswith("user ") for line in extra)
    sets_autosave = any(line.startswith("autosave_") for line in extra)
    lines = [f"listener {port} 127.0.0.1"]
    if not sets_auth:
        lines.append("allow_anonymous true")
    if not sets_user:
        # Started as root, mosquitto switches to the "mosquitto" user, which cannot write
        # to the caller's folder; as anyone else it ignores this line.
        lines.append(f"user {getpass.getuser()}")
    if persistence:
        lines += ["persistence true", f"persistence_location {workdir}/"]
        if not sets_autosave:
            lines += AUTOSAVE_ON_EVERY_CHANGE
    else:
        lines.append("persistence false")
    lines += [
        f"message_size_limit {max_payload_bytes}",
        f"max_packet_size {max_payload_bytes + PUBLISH_HEADER_ROOM_BYTES}",
        "max_queued_messages 10000",
        f"log_dest file {workdir / 'mosquitto.log'}",
        "log_type error",
        "log_type warning",
        "log_type notice",
        "log_type information",
        *extra,
    ]
    return "\n".join(lines) + "\n"
