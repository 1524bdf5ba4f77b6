"""PUBLISH packets decode to exactly what paho's own decoder gives, with one payload copy."""

from __future__ import annotations

import struct

import pytest
from paho.mqtt import _packet
from paho.mqtt.enums import MQTTProtocolVersion
from paho.mqtt.exception import MalformedPacket
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

import faultfleet.wire.mqtt_client  # noqa: F401  (installs the decoder)
from faultfleet.wire import paho_receive

PAHO_DECODE = paho_receive._ORIGINAL
V311 = MQTTProtocolVersion.MQTTv311
V5 = MQTTProtocolVersion.MQTTv5


def publish_packet(topic: bytes, payload: bytes, *, qos: int, properties: bytes = b"") -> bytes:
    """A PUBLISH packet after its fixed header: topic, message id (QoS > 0), properties."""
    mid = struct.pack("!H", 4242) if qos else b""
    return struct.pack("!H", len(topic)) + topic + mid + properties + payload


def v5_properties() -> bytes:
    properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    properties.ContentType = "application/x-faultfleet"
    properties.UserProperty = [("agent", "m01")]
    return bytes(properties.pack())  # type: ignore[no-untyped-call]


def test_installed_in_place_of_pahos_decoder() -> None:
    assert PAHO_DECODE is not None
    assert _packet.decode_publish is paho_receive.decode_publish


@pytest.mark.parametrize("qos", [0, 1, 2])
@pytest.mark.parametrize("flags", [0x00, 0x01, 0x08, 0x09])
@pytest.mark.parametrize("payload", [b"", b"FFW1" + bytes(range(256)) * 40])
def test_mqtt311_packets_decode_as_paho_decodes_them(qos: int, flags: int, payload: bytes) -> None:
    header = 0x30 | (qos << 1) | flags
    packet = bytearray(publish_packet(b"faultfleet/agents/m01/results", payload, qos=qos))

    ours = paho_receive.decode_publish(header, packet, V311)

    assert ours == PAHO_DECODE(header, packet, V311)
    assert type(ours.payload) is bytes
    assert ours.payload == payload


@pytest.mark.parametrize("qos", [0, 1])
def test_mqtt5_properties_and_payload_decode_as_paho_decodes_them(qos: int) -> None:
    header = 0x30 | (qos << 1)
    packet = publish_packet(b"t/x", b"body bytes", qos=qos, properties=v5_properties())

    ours = paho_receive.decode_publish(header, packet, V5)
    theirs = PAHO_DECODE(header, packet, V5)

    assert ours.payload == theirs.payload == b"body bytes"
    assert (ours.topic, ours.mid, ours.qos) == (theirs.topic, theirs.mid, theirs.qos)
    assert ours.properties is not None
    assert theirs.properties is not None
    assert ours.properties.json() == theirs.properties.json()  # type: ignore[no-untyped-call]


@pytest.mark.parametrize(
    ("packet", "protocol"),
    [
        (b"\x00", V311),  # no room for the topic length
        (b"\x00\x09abc", V311),  # topic longer than the packet
        (b"\x00\x00payload", V311),  # empty topic in MQTT 3.1.1
        (b"\x00\x01t", V311),  # QoS 1 without a message id
        (b"\x00\x01t\x00\x01\x7f", V5),  # properties longer than the packet
    ],
)
def test_truncated_packets_are_malformed(packet: bytes, protocol: MQTTProtocolVersion) -> None:
    with pytest.raises(MalformedPacket):
        paho_receive.decode_publish(0x32, packet, protocol)
