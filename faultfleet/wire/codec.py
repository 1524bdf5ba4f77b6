"""Binary frames of the wire protocol, and the one import for everything that reads them.

A frame is ``b"FFW1"``, a 4-byte big-endian header length, a UTF-8 JSON header (one of the
envelopes of :mod:`faultfleet.wire.messages`) and a body. Task and update bodies hold named
flat weight vectors in the safetensors format (:mod:`faultfleet.wire.tensors`, re-exported
here).

Everything a receiver cannot accept raises :class:`WireError` carrying a
:class:`RejectReason` (:mod:`faultfleet.wire.rejects`, re-exported here); no other
exception leaves the parsers, so one hostile message cannot end a receiving thread.
"""

from __future__ import annotations

import struct
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from faultfleet.wire.messages import SCHEMA_VERSION
from faultfleet.wire.rejects import (
    MAX_HEADER_BYTES,
    MAX_JSON_CONTAINERS,
    MAX_JSON_DEPTH,
    RejectReason,
    WireError,
    load_json,
)
from faultfleet.wire.tensors import decode_tensors, encode_tensors, scale_exponents, tensor_bytes

MAGIC = b"FFW1"
_LENGTH = struct.Struct(">I")
_ALIGNMENT = 8


def encode_frame(header: BaseModel, body: bytes = b"") -> bytes:
    """``header`` as JSON followed by ``body``, in one frame.

    The JSON ends in up to 7 spaces so that the body starts at a multiple of 8 bytes: the
    tensors of a safetensors body (whose own header is padded the same way) are then
    aligned in the received buffer, and a receiver can use them where they lie
    (:func:`decode_tensors` with ``copy=False``). Frames without the padding decode alike.
    """
    text = header.model_dump_json().encode("utf-8")
    text += b" " * (-(len(MAGIC) + _LENGTH.size + len(text)) % _ALIGNMENT)
    return MAGIC + _LENGTH.pack(len(text)) + text + body


def split_frame(payload: bytes, *, max_bytes: int) -> tuple[dict[str, Any], bytes]:
    """The JSON header (as a dict) and the body of a frame.

    Raises
    ------
    WireError
        OVERSIZED above ``max_bytes``; MALFORMED for anything that is not a frame.
    """
    header, body_start = _frame_header(payload, max_bytes)
    return header, payload[body_start:]


def split_frame_view(payload: bytes, *, max_bytes: int) -> tuple[dict[str, Any], memoryview]:
    """As :func:`split_frame`, the body a view of ``payload`` instead of a copy."""
    header, body_start = _frame_header(payload, max_bytes)
    return header, memoryview(payload)[body_start:]


def frame_header(payload: bytes, *, max_bytes: int) -> dict[str, Any]:
    """The JSON header of a frame, without copying its body; raises as :func:`split_frame`."""
    return _frame_header(payload, max_bytes)[0]


def _frame_header(payload: bytes, max_bytes: int) -> tuple[dict[str, Any], int]:
    if len(payload) > max_bytes:
        raise WireError(
            RejectReason.OVERSIZED,
            f"message of {len(payload)} bytes exceeds the limit of {max_bytes} bytes "
            "(broker.max_payload_bytes)",
        )
    if len(payload) < len(MAGIC) + _LENGTH.size or not payload.startswith(MAGIC):
        raise WireError(RejectReason.MALFORMED, "not a faultfleet frame (no FFW1 marker)")
    (length,) = _LENGTH.unpack_from(payload, len(MAGIC))
    start = len(MAGIC) + _LENGTH.size
    if length > MAX_HEADER_BYTES or start + length > len(payload):
        raise WireError(
            RejectReason.MALFORMED,
            f"frame header of {length} bytes does not fit the {len(payload)}-byte message",
        )
    return load_json(payload[start : start + length], "frame header"), start + length


EnvelopeT = TypeVar("EnvelopeT")


def parse_envelope(adapter: TypeAdapter[EnvelopeT], data: dict[str, Any] | bytes) -> EnvelopeT:
    """Validate ``data`` (a header dict or JSON bytes) against ``adapter``.

    Raises
    ------
    WireError
        OVERSIZED and MALFORMED for bytes that are not a bounded JSON object
        (:func:`load_json`); SCHEMA for anything that does not validate, with the other
        side's schema version named when that is the cause.
    """
    if isinstance(data, bytes):
        data = load_json(data, "message")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise WireError(
            RejectReason.SCHEMA,
            f"message has schema_version {version!r}; this side speaks {SCHEMA_VERSION} — "
            "run the same faultfleet version on the coordinator and the agents",
        )
    try:
        return adapter.validate_python(data)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in item['loc']) or 'message'}: {item['msg']}"
            for item in error.errors()[:5]
        )
        raise WireError(RejectReason.SCHEMA, f"invalid message: {problems}") from error


__all__ = [
    "MAGIC",
    "MAX_HEADER_BYTES",
    "MAX_JSON_CONTAINERS",
    "MAX_JSON_DEPTH",
    "RejectReason",
    "WireError",
    "decode_tensors",
    "encode_frame",
    "encode_tensors",
    "frame_header",
    "load_json",
    "parse_envelope",
    "scale_exponents",
    "split_frame",
    "split_frame_view",
    "tensor_bytes",
]
