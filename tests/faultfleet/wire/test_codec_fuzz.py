"""Property-based fuzzing of the codec and every envelope: a message is accepted or refused.

Whatever arrives — a valid message of any envelope, one with a field broken, nesting bombs,
huge or lying length fields, truncated frames, random bytes, tensor bodies of any shape —
the receivers' parsers either return a message or raise :class:`WireError` with a
:class:`RejectReason` the metrics count. No other exception (RecursionError, ValueError of
an overlong number, UnicodeEncodeError of a lone surrogate on the way back out) may escape:
one would end the thread that handles the broker's messages.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter

from faultfleet.wire import messages
from faultfleet.wire.codec import (
    MAGIC,
    MAX_HEADER_BYTES,
    MAX_JSON_CONTAINERS,
    MAX_JSON_DEPTH,
    RejectReason,
    WireError,
    decode_tensors,
    encode_frame,
    encode_tensors,
    parse_envelope,
    split_frame,
)
from faultfleet.wire.messages import ANSWER_ADAPTER, TASK_ADAPTER, Envelope, TensorEncoding

from .envelope_data import json_values, mutated, nested, valid_data

LIMIT = 4 * MAX_HEADER_BYTES
ENVELOPES: list[type[BaseModel]] = sorted(
    (
        cls
        for cls in vars(messages).values()
        if isinstance(cls, type) and issubclass(cls, Envelope) and "kind" in cls.model_fields
    ),
    key=lambda cls: cls.__name__,
)
RECEIVERS: dict[str, TypeAdapter[Any]] = {
    "task": TASK_ADAPTER,
    "answer": ANSWER_ADAPTER,
    **{cls.__name__: TypeAdapter(cls) for cls in ENVELOPES},
}
ENCODINGS = [
    TensorEncoding(dtype=dtype, compression=compression)
    for dtype in ("float32", "float16")
    for compression in ("none", "zlib")
]


def frame_of(header: Any, body: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    return MAGIC + struct.pack(">I", len(text)) + text + body


def reason_of(call: Callable[[], object]) -> RejectReason | None:
    """None when ``call`` returns, the reason of the :class:`WireError` it raises otherwise."""
    try:
        call()
    except WireError as error:
        return error.reason
    return None


def receive(adapter: TypeAdapter[Any], payload: bytes) -> BaseModel:
    """What an agent or the coordinator does with a frame; the message is re-encodable."""
    header, _ = split_frame(payload, max_bytes=LIMIT)
    message: BaseModel = parse_envelope(adapter, header)
    message.model_dump_json()  # an answer echoes its fields: they must encode again
    return message


def test_every_envelope_is_fuzzed() -> None:
    names = {cls.__name__ for cls in ENVELOPES}

    assert {
        "AgentHeartbeat",
        "FitTaskMessage",
        "GradientMessage",
        "ModelAnnouncement",
        "SignedMessage",
    } <= names
    assert len(names) == 16


@pytest.mark.parametrize("model", ENVELOPES, ids=lambda cls: cls.__name__)
@given(data=st.data())
def test_a_valid_message_of_every_envelope_round_trips(model: type[BaseModel], data: Any) -> None:
    # Prepare
    fields = data.draw(valid_data(model))
    expected = model.model_validate(fields)

    # Execute
    parsed = receive(TypeAdapter(model), frame_of(fields))
    again = receive(TypeAdapter(model), encode_frame(parsed))

    # Assert
    assert parsed == expected
    assert again == expected


@pytest.mark.parametrize("model", ENVELOPES, ids=lambda cls: cls.__name__)
@given(data=st.data(), receiver=st.sampled_from(sorted(RECEIVERS)))
def test_a_broken_message_is_accepted_or_refused_never_raised(
    model: type[BaseModel], receiver: str, data: Any
) -> None:
    fields = data.draw(mutated(model))

    reason = reason_of(lambda: receive(RECEIVERS[receiver], frame_of(fields)))

    assert reason in (None, RejectReason.SCHEMA, RejectReason.MALFORMED)


@given(
    depth=st.integers(1, 300_000),
    opener=st.sampled_from([b"[", b'{"a":', b'[{"b":']),
    closed=st.booleans(),
    where=st.sampled_from(["top", "field"]),
)
def test_nesting_bombs_are_refused_as_malformed(
    depth: int, opener: bytes, closed: bool, where: str
) -> None:
    # Prepare: depth openers (closed or not), alone or as the value of a header field
    closer = {b"[": b"]", b'{"a":': b"}", b'[{"b":': b"}]"}[opener]
    value = opener * depth + (b"0" + closer * depth if closed else b"")
    header = (
        value if where == "top" else b'{"schema_version": 5, "kind": "fit", "x": ' + value + b"}"
    )
    payload = MAGIC + struct.pack(">I", len(header)) + header
    levels = depth * (2 if opener == b'[{"b":' else 1) + (where == "field")

    # Execute
    with pytest.raises(WireError) as error:
        receive(TASK_ADAPTER, payload)

    # Assert: a small bomb may be valid JSON that the schema refuses; a real one never parses
    if levels > MAX_JSON_DEPTH or not closed or len(header) > MAX_HEADER_BYTES:
        assert error.value.reason is RejectReason.MALFORMED


@given(depth=st.integers(MAX_JSON_DEPTH, 60), model=st.sampled_from(ENVELOPES))
def test_deep_but_small_json_is_refused_before_validation(
    depth: int, model: type[BaseModel]
) -> None:
    with pytest.raises(WireError, match="deeper than") as error:
        receive(TypeAdapter(model), frame_of({"schema_version": 5, "x": nested(depth)}))

    assert error.value.reason is RejectReason.MALFORMED


@given(extra=st.integers(1, 4 * MAX_HEADER_BYTES), declared_only=st.booleans())
def test_headers_above_the_limit_are_refused(extra: int, declared_only: bool) -> None:
    # Prepare: a length field beyond the limit, with or without the bytes behind it
    length = MAX_HEADER_BYTES + extra
    body = b" " * (16 if declared_only else length)
    payload = MAGIC + struct.pack(">I", length) + body

    # Execute
    with pytest.raises(WireError) as error:
        split_frame(payload, max_bytes=8 * MAX_HEADER_BYTES)

    # Assert
    assert error.value.reason is RejectReason.MALFORMED


@given(brackets=st.integers(MAX_JSON_CONTAINERS + 1, 3 * MAX_JSON_CONTAINERS))
def test_a_header_of_too_many_containers_is_refused_before_parsing(brackets: int) -> None:
    header = {"schema_version": 5, "kind": "fit", "x": [[]] * brackets}

    with pytest.raises(WireError, match="more than the") as error:
        receive(TASK_ADAPTER, frame_of(header))

    assert error.value.reason is RejectReason.MALFORMED


@pytest.mark.parametrize("model", ENVELOPES, ids=lambda cls: cls.__name__)
@given(data=st.data())
def test_a_truncated_frame_is_refused_or_only_lost_its_body(
    model: type[BaseModel], data: Any
) -> None:
    # Prepare
    body = data.draw(st.binary(max_size=64))
    payload = frame_of(data.draw(valid_data(model)), body)
    cut = data.draw(st.integers(0, len(payload) - 1))

    # Execute / Assert: cut in the header → refused; cut in the body → the header is intact
    header_end = len(payload) - len(body)
    if cut < header_end:
        with pytest.raises(WireError) as error:
            receive(TypeAdapter(model), payload[:cut])
        assert error.value.reason is RejectReason.MALFORMED
    else:
        assert split_frame(payload[:cut], max_bytes=LIMIT)[1] == body[: cut - header_end]


@given(
    receiver=st.sampled_from(sorted(RECEIVERS)),
    payload=st.binary(max_size=512)
    | st.binary(max_size=512).map(lambda b: MAGIC + b)
    | st.tuples(st.integers(0, 2**32 - 1), st.binary(max_size=512)).map(
        lambda t: MAGIC + struct.pack(">I", t[0]) + t[1]
    ),
)
def test_random_bytes_are_refused_never_raised(receiver: str, payload: bytes) -> None:
    with pytest.raises(WireError):
        receive(RECEIVERS[receiver], payload)
    with pytest.raises(WireError):
        parse_envelope(RECEIVERS[receiver], payload)


@given(data=st.data(), model=st.sampled_from(ENVELOPES))
def test_flipped_bytes_in_a_valid_frame_are_accepted_or_refused(
    data: Any, model: type[BaseModel]
) -> None:
    # Prepare
    payload = bytearray(frame_of(data.draw(valid_data(model))))
    for _ in range(data.draw(st.integers(1, 8))):
        payload[data.draw(st.integers(0, len(payload) - 1))] = data.draw(st.integers(0, 255))

    # Execute
    reason = reason_of(lambda: receive(TypeAdapter(model), bytes(payload)))

    # Assert: a flip inside a string or a digit may still be a valid message
    assert reason is None or reason in tuple(RejectReason)


@pytest.mark.parametrize("encoding", ENCODINGS, ids=lambda e: f"{e.dtype}-{e.compression}")
@given(data=st.data())
def test_a_tensor_body_is_decoded_or_refused_never_raised(
    encoding: TensorEncoding, data: Any
) -> None:
    # Prepare: a valid body, then random bytes, a cut or flipped bytes, or another shape
    lengths = {"w": data.draw(st.integers(1, 64)), "b": data.draw(st.integers(1, 8))}
    sent = {name: np.arange(n, dtype=np.float32) for name, n in lengths.items()}
    body = bytearray(encode_tensors(sent, encoding))
    how = data.draw(st.sampled_from(["random", "cut", "flip", "shape", "intact"]))
    if how == "random":
        body = bytearray(data.draw(st.binary(max_size=256)))
    elif how == "cut":
        body = body[: data.draw(st.integers(0, len(body)))]
    elif how == "flip":
        for _ in range(data.draw(st.integers(1, 8))):
            body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    elif how == "shape":
        lengths = {"w": lengths["w"] + data.draw(st.integers(1, 4)), "b": lengths["b"]}

    # Execute
    decoded: dict[str, Any] = {}
    reason = reason_of(
        lambda: decoded.update(decode_tensors(bytes(body), encoding, lengths, max_bytes=1 << 16))
    )

    # Assert
    if reason is None:
        assert {name: value.shape for name, value in decoded.items()} == {
            name: (n,) for name, n in lengths.items()
        }
    else:
        assert how != "intact"


@given(value=json_values(max_leaves=30))
def test_any_json_header_is_accepted_or_refused(value: Any) -> None:
    payload = frame_of(value)
    reasons = {reason_of(partial(receive, adapter, payload)) for adapter in RECEIVERS.values()}

    assert reasons <= {None, RejectReason.SCHEMA, RejectReason.MALFORMED}
