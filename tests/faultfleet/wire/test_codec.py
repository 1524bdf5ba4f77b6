"""Tests of frames and envelopes: round trips, and every way a receiver refuses a header.

Tensor bodies are tested in ``test_codec_tensors.py``.
"""

from __future__ import annotations

import json
import pickle
import struct
from typing import Any

import pytest
from pydantic import TypeAdapter

from faultfleet.wire.codec import (
    MAGIC,
    MAX_HEADER_BYTES,
    RejectReason,
    WireError,
    encode_frame,
    parse_envelope,
    split_frame,
)
from faultfleet.wire.messages import (
    ANSWER_ADAPTER,
    AgentStatus,
    FitUpdateMessage,
    TaskFailedMessage,
)

LIMIT = 1 << 20
STATUS = AgentStatus(agent_id="m07", state="online", num_train_samples=5)
UPDATE = FitUpdateMessage(
    task_id="t1",
    run_id="r1",
    server_round=2,
    agent_id="m07",
    model_key="cluster-0",
    num_samples=10,
    train_loss=0.5,
)


def header_bytes(header: object) -> bytes:
    """A frame prefix around an arbitrary JSON value."""
    text = json.dumps(header).encode()
    return MAGIC + struct.pack(">I", len(text)) + text


def reason_of(error: pytest.ExceptionInfo[WireError]) -> RejectReason:
    return error.value.reason


# -- frames ----------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [b"", b"\x00\x01tensor bytes\xff"])
def test_frame_round_trip(body: bytes) -> None:
    payload = encode_frame(UPDATE, body)

    header, rest = split_frame(payload, max_bytes=LIMIT)

    assert payload.startswith(b"FFW1")
    assert rest == body
    assert parse_envelope(ANSWER_ADAPTER, header) == UPDATE


def test_a_frame_of_exactly_the_limit_is_accepted() -> None:
    payload = encode_frame(STATUS, b"x" * 100)

    header, body = split_frame(payload, max_bytes=len(payload))

    assert header["agent_id"] == "m07"
    assert body == b"x" * 100


def test_a_frame_above_the_limit_is_oversized() -> None:
    payload = encode_frame(STATUS, b"x" * 100)

    with pytest.raises(WireError, match=rf"{len(payload)} bytes exceeds the limit") as error:
        split_frame(payload, max_bytes=len(payload) - 1)

    assert reason_of(error) is RejectReason.OVERSIZED


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "no FFW1 marker"),
        (b'{"schema_version": 1}', "no FFW1 marker"),
        (b"FFW2" + header_bytes({})[4:], "no FFW1 marker"),
        (MAGIC + b"\x00\x00", "no FFW1 marker"),
        (MAGIC + struct.pack(">I", 50) + b'{"a": 1}', "header of 50 bytes does not fit"),
        (MAGIC + struct.pack(">I", MAX_HEADER_BYTES + 1) + b" " * 10, "does not fit"),
        (MAGIC + struct.pack(">I", 5) + b"{nope", "frame header is not JSON"),
        (MAGIC + struct.pack(">I", 2) + b"\xff\xfe", "frame header is not JSON"),
        (header_bytes([1, 2, 3]), "not a JSON object"),
        (header_bytes("status"), "not a JSON object"),
    ],
)
def test_malformed_frames(payload: bytes, message: str) -> None:
    with pytest.raises(WireError, match=message) as error:
        split_frame(payload, max_bytes=LIMIT)

    assert reason_of(error) is RejectReason.MALFORMED


def test_a_pickled_frame_is_malformed() -> None:
    payload = pickle.dumps({"schema_version": 1, "kind": "agent_status"})

    with pytest.raises(WireError) as error:
        split_frame(payload, max_bytes=LIMIT)

    assert reason_of(error) is RejectReason.MALFORMED


# -- envelopes -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 3, 4, 6, 0, None])
def test_parse_envelope_names_both_schema_versions(version: int | None) -> None:
    header, _ = split_frame(encode_frame(UPDATE), max_bytes=LIMIT)
    header["schema_version"] = version

    with pytest.raises(WireError, match=rf"schema_version {version!r}; this side speaks 5") as e:
        parse_envelope(ANSWER_ADAPTER, header)

    assert reason_of(e) is RejectReason.SCHEMA


def test_parse_envelope_without_a_version_is_a_schema_error() -> None:
    header = json.loads(UPDATE.model_dump_json())
    del header["schema_version"]

    with pytest.raises(WireError, match="schema_version None") as error:
        parse_envelope(ANSWER_ADAPTER, header)

    assert reason_of(error) is RejectReason.SCHEMA


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"agent_id": "m/07"}, r"invalid message: fit_update\.agent_id: String should match"),
        ({"extra": 1}, r"fit_update\.extra: Extra inputs are not permitted"),
        ({"kind": "fit_downdate"}, "does not match any of the expected tags"),
        ({"train_loss": None}, r"fit_update\.train_loss"),
    ],
)
def test_parse_envelope_reports_invalid_fields_as_schema_errors(
    change: dict[str, Any], message: str
) -> None:
    header = {**json.loads(UPDATE.model_dump_json()), **change}

    with pytest.raises(WireError, match=message) as error:
        parse_envelope(ANSWER_ADAPTER, header)

    assert reason_of(error) is RejectReason.SCHEMA


def test_parse_envelope_reads_json_bytes() -> None:
    failed = TaskFailedMessage(task_id="t", run_id="r", server_round=1, agent_id="a", reason="x")

    assert parse_envelope(ANSWER_ADAPTER, failed.model_dump_json().encode()) == failed
    assert parse_envelope(TypeAdapter(AgentStatus), STATUS.model_dump_json().encode()) == STATUS


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x80\x04not json", "message is not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b"", "message is not JSON"),
    ],
)
def test_parse_envelope_of_bytes_that_are_no_json_object(data: bytes, message: str) -> None:
    with pytest.raises(WireError, match=message) as error:
        parse_envelope(TypeAdapter(AgentStatus), data)

    assert reason_of(error) is RejectReason.MALFORMED


def test_reject_reasons_are_the_metric_label_values() -> None:
    assert [r.value for r in RejectReason] == [
        "malformed",
        "oversized",
        "schema",
        "wrong_shape",
        "not_finite",
        "unknown_task",
        "duplicate",
        "late",
        "too_many_samples",
    ]
