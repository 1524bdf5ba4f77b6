"""paho's decoding of a received PUBLISH packet, with one copy of the payload instead of three.

paho 2's ``_packet.decode_publish`` peels the topic length, the topic and the message id
off the packet with ``struct.unpack`` of ``"!H{n}s"`` formats, and each of those copies
the whole rest of the packet: a 17.6 MB model update is copied three times (each into
freshly mapped memory, so with a page fault every 4 kB), all while paho's network thread
holds the GIL. That costs more than everything the coordinator then does with the update
(:mod:`coordinator.adapters.mqtt_answers`), and nothing else in the process runs meanwhile.

:func:`decode_publish` reads the same fields in place (``struct.unpack_from``, a
``memoryview`` of the packet) and copies the payload out once; the result is the same
``PublishPacket``, field for field, for MQTT 3.1.1 and 5 (whose properties are read from
a copy of just their bytes). :func:`install` puts it in paho's place, for every client of
the process; it does nothing if paho's module no longer has the function it replaces.
"""

from __future__ import annotations

import struct
from typing import Any

from paho.mqtt import __version__ as paho_version
from paho.mqtt import _packet
from paho.mqtt.enums import MQTTProtocolVersion
from paho.mqtt.exception import MalformedPacket
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties, VariableByteIntegers

CHECKED_PAHO = "2.2."
"""The paho release whose private decoder :func:`install` replaces."""
_U16 = struct.Struct("!H")
_ORIGINAL: Any = getattr(_packet, "decode_publish", None)


def decode_publish(
    header: int, packet: bytes | bytearray, protocol: MQTTProtocolVersion
) -> _packet.PublishPacket:
    """The fields of a PUBLISH packet, as paho's ``_packet.decode_publish`` returns them.

    Parameters
    ----------
    header : int
        First byte of the fixed header (packet type and flags).
    packet : bytes or bytearray
        Everything after the fixed header's remaining length.
    protocol : MQTTProtocolVersion

    Raises
    ------
    MalformedPacket
        A packet too short for its topic, message id or properties, as paho would.
    """
    view = memoryview(packet)
    try:
        (topic_length,) = _U16.unpack_from(view, 0)
        offset = _U16.size + topic_length
        if offset > len(view):
            raise MalformedPacket("PUBLISH topic runs past the end of the packet")
        topic = bytes(view[_U16.size : offset])
        if protocol != MQTTProtocolVersion.MQTTv5 and not topic:
            raise MalformedPacket("topic can't be empty in MQTTv3")
        qos = (header & 0x06) >> 1
        mid = 0
        if qos > 0:
            (mid,) = _U16.unpack_from(view, offset)
            offset += _U16.size
        properties = None
        if protocol == MQTTProtocolVersion.MQTTv5:
            offset, properties = _properties(view, offset)
    except (struct.error, IndexError, ValueError) as error:
        raise MalformedPacket(str(error)) from error
    return _packet.PublishPacket(
        dup=bool(header & 0x08),
        qos=qos,
        retain=bool(header & 0x01),
        topic=topic,
        mid=mid,
        properties=properties,
        payload=bytes(view[offset:]),
    )


def _properties(view: memoryview, offset: int) -> tuple[int, Properties]:
    """The MQTT 5 properties at ``offset`` and where the payload starts after them."""
    head = bytes(view[offset : offset + 4])
    length, length_bytes = VariableByteIntegers.decode(head)  # type: ignore[no-untyped-call]
    end = offset + length_bytes + length
    if end > len(view):
        raise MalformedPacket("PUBLISH properties run past the end of the packet")
    properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    properties.unpack(bytes(view[offset:end]))  # type: ignore[no-untyped-call]
    return end, properties


def install() -> bool:
    """Make paho decode every PUBLISH with :func:`decode_publish`; False (and nothing
    changed) when paho is not the 2.2 release it was checked against (its tests compare
    both decoders field for field) or has no ``_packet.decode_publish`` to replace."""
    if _ORIGINAL is None or not paho_version.startswith(CHECKED_PAHO):
        return False
    _packet.decode_publish = decode_publish
    return True
