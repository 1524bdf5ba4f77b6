"""Binary frames and tensor payloads of the wire protocol.

A frame is ``b"FFW1"``, a 4-byte big-endian header length, a UTF-8 JSON header (one of the
envelopes of :mod:`faultfleet.wire.messages`) and a body. Task and update bodies hold named
flat weight vectors in the safetensors format — a header of names, dtypes and shapes followed
by raw little-endian data, parsed without executing anything (never pickle, never
``torch.load`` of bytes from the network). Bodies can be float16 and zlib-compressed
(:class:`~faultfleet.wire.messages.TensorEncoding`); receivers always get float32 back.
Gradients travel scaled by a power of two per tensor (:func:`scale_exponents`), so that
float16 keeps their precision whatever their magnitude.

Everything a receiver cannot accept raises :class:`WireError` carrying a
:class:`RejectReason`, which the coordinator counts on
``faultfleet_updates_rejected_total{reason=...}`` and an agent on
``faultfleet_tasks_rejected_total{reason=...}``; no other exception leaves the parsers, so
one hostile message cannot end a receiving thread. JSON is bounded before it is parsed
(:data:`MAX_HEADER_BYTES`, :data:`MAX_JSON_DEPTH`, :data:`MAX_JSON_CONTAINERS`) and then
read by pydantic-core's parser, which recurses in no Python frame, refuses lone surrogates
(that could not be written back as UTF-8), NaN and infinities, and numbers of more than a
few thousand digits.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import from_json
from safetensors import SafetensorError
from safetensors.numpy import load as load_safetensors
from safetensors.numpy import save as save_safetensors

from faultfleet.errors import FaultfleetError
from faultfleet.types import FloatArray
from faultfleet.wire.messages import SCHEMA_VERSION, TensorEncoding

MAGIC = b"FFW1"
_LENGTH = struct.Struct(">I")
MAX_HEADER_BYTES = 1024 * 1024
"""Largest frame header, and largest plain JSON message (status, assignment, diagnosis)."""
MAX_JSON_DEPTH = 16
"""Deepest nesting of arrays and objects in a header; the deepest envelope needs 4."""
MAX_JSON_CONTAINERS = 10_000
"""Most ``[`` and ``{`` characters in a header (inside strings included)."""

_DTYPES = {"float32": np.float32, "float16": np.float16}
_WIDTH = {"float32": 4, "float16": 2}
_FLOAT16_TOP_EXPONENT = 15
"""A scaled float16 tensor's largest magnitude lies in [2**14, 2**15), below float16's
maximum (65504) with room for rounding up, and 2**29 above its smallest normal number."""


class RejectReason(StrEnum):
    """Why a message from an agent was refused (a label of the rejection counter)."""

    MALFORMED = "malformed"
    """Not a frame, bad JSON, or an unreadable tensor body."""
    OVERSIZED = "oversized"
    """Larger than ``broker.max_payload_bytes`` (or inflates beyond it)."""
    SCHEMA = "schema"
    """A header that does not validate: unknown field, wrong type, other schema version."""
    WRONG_SHAPE = "wrong_shape"
    """Tensors missing, extra, or of the wrong length or dtype for the model."""
    NOT_FINITE = "not_finite"
    """NaN or infinite weights."""
    UNKNOWN_TASK = "unknown_task"
    """An answer to no task of this run (another run, a forged id, another agent's topic)."""
    DUPLICATE = "duplicate"
    """A second answer for the same (round, agent): kept once, idempotently."""
    LATE = "late"
    """An answer that arrived after its round's deadline."""
    TOO_MANY_SAMPLES = "too_many_samples"
    """An update claiming more training samples than its agent declared when it came online,
    or an agent status declaring more than the coordinator's plausible limit."""


class WireError(FaultfleetError, ValueError):
    """A message that cannot be accepted; :attr:`reason` says which rule it broke."""

    def __init__(self, reason: RejectReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def encode_frame(header: BaseModel, body: bytes = b"") -> bytes:
    """``header`` as JSON followed by ``body``, in one frame."""
    text = header.model_dump_json().encode("utf-8")
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


def load_json(data: bytes, what: str) -> dict[str, Any]:
    """A JSON object of at most :data:`MAX_HEADER_BYTES` bytes, nesting and containers bounded.

    Parameters
    ----------
    data : bytes
        UTF-8 JSON text.
    what : str
        What the bytes are, for the error message ("frame header", "message").

    Raises
    ------
    WireError
        OVERSIZED above :data:`MAX_HEADER_BYTES`; MALFORMED for anything that is not a JSON
        object within the nesting limits.
    """
    if len(data) > MAX_HEADER_BYTES:
        raise WireError(
            RejectReason.OVERSIZED,
            f"{what} of {len(data)} bytes exceeds the {MAX_HEADER_BYTES}-byte limit for JSON",
        )
    _count_containers(data, what)
    try:
        # pydantic-core's parser stops at 200 levels without recursing in Python.
        value = from_json(data, allow_inf_nan=False)
    except ValueError as error:  # also UTF-8 errors, lone surrogates, overlong numbers
        raise WireError(RejectReason.MALFORMED, f"{what} is not JSON: {error}") from error
    if not isinstance(value, dict):
        raise WireError(RejectReason.MALFORMED, f"{what} is not a JSON object")
    _check_depth(value, what)
    return value


def _count_containers(data: bytes, what: str) -> None:
    """Refuse more than :data:`MAX_JSON_CONTAINERS` brackets, counted in C before parsing."""
    containers = data.count(b"[") + data.count(b"{")
    if containers > MAX_JSON_CONTAINERS:
        raise WireError(
            RejectReason.MALFORMED,
            f"{what} holds {containers} '[' and '{{' characters, more than the "
            f"{MAX_JSON_CONTAINERS} any message needs",
        )


def _check_depth(value: dict[str, Any], what: str) -> None:
    """Refuse arrays and objects nested deeper than :data:`MAX_JSON_DEPTH`.

    Iterative, and it visits at most :data:`MAX_JSON_CONTAINERS` containers.
    """
    stack: list[tuple[dict[str, Any] | list[Any], int]] = [(value, 1)]
    while stack:
        container, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise WireError(
                RejectReason.MALFORMED,
                f"{what} nests arrays or objects deeper than {MAX_JSON_DEPTH} levels",
            )
        items = container.values() if isinstance(container, dict) else container
        stack.extend((item, depth + 1) for item in items if isinstance(item, dict | list))


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


def scale_exponents(tensors: Mapping[str, FloatArray], encoding: TensorEncoding) -> dict[str, int]:
    """Power-of-two exponents that fit each tensor to ``encoding``'s dtype.

    float32 needs no scale (all exponents 0). For float16, the exponent e of a tensor whose
    largest magnitude is m puts m / 2**e in [2**14, 2**15): every entry down to
    2**-29 · m is then a normal float16 number with 11 significant bits (relative error at
    most 2**-11), whereas unscaled gradients of 1e-5 and below would be subnormal or zero.
    Dividing and multiplying by a power of two is exact, so the scale adds no error.

    Returns
    -------
    dict of tensor name to int
        Pass to :func:`encode_tensors` and send to the receiver (``exponents``).
    """
    exponents: dict[str, int] = {}
    for name, value in tensors.items():
        exponent = 0
        if encoding.dtype == "float16" and np.size(value):
            magnitudes = np.abs(np.asarray(value, dtype=np.float32))
            finite = magnitudes[np.isfinite(magnitudes)]
            largest = float(finite.max()) if finite.size else 0.0
            if largest > 0.0:
                exponent = int(np.frexp(largest)[1]) - _FLOAT16_TOP_EXPONENT
        exponents[name] = exponent
    return exponents


def encode_tensors(
    tensors: Mapping[str, FloatArray],
    encoding: TensorEncoding,
    *,
    exponents: Mapping[str, int] | None = None,
) -> bytes:
    """Named flat vectors as a safetensors body in ``encoding``.

    Parameters
    ----------
    tensors : mapping of name to array
        Flattened on the way.
    encoding : TensorEncoding
    exponents : mapping of name to int, optional
        Send ``tensor / 2**exponents[name]`` (see :func:`scale_exponents`); the receiver
        passes the same exponents to :func:`decode_tensors`.

    Raises
    ------
    ValueError
        For float16 when a value lies beyond float16's range (±65504): it would arrive as
        infinity and be refused; use float32 for such a model.
    """
    dtype = _DTYPES[encoding.dtype]
    if exponents:
        tensors = {
            name: np.ldexp(np.asarray(value, dtype=np.float32), -exponents.get(name, 0))
            for name, value in tensors.items()
        }
    if encoding.dtype == "float16":
        limit = float(np.finfo(np.float16).max)
        for name, value in tensors.items():
            magnitudes = np.abs(np.asarray(value, dtype=np.float32))
            finite = magnitudes[np.isfinite(magnitudes)]
            largest = float(finite.max()) if finite.size else 0.0
            if largest > limit:
                raise ValueError(
                    f"tensor {name!r} holds {largest:.3g}, beyond float16's range ±{limit:g}; "
                    "set [wire] dtype = 'float32'"
                )
    arrays = {
        name: np.ascontiguousarray(np.asarray(value).reshape(-1), dtype=dtype)
        for name, value in tensors.items()
    }
    body = save_safetensors(arrays)
    return zlib.compress(body, level=1) if encoding.compression == "zlib" else body


def decode_tensors(
    body: bytes,
    encoding: TensorEncoding,
    expected: Mapping[str, int],
    *,
    max_bytes: int,
    exponents: Mapping[str, int] | None = None,
) -> dict[str, FloatArray]:
    """The float32 vectors of a safetensors body, checked against ``expected`` lengths.

    Parameters
    ----------
    body : bytes
    encoding : TensorEncoding
        As the frame header declares it.
    expected : mapping of tensor name to its length (number of parameters)
    max_bytes : int
        Limit on the inflated size of a compressed body.
    exponents : mapping of name to int, optional
        Multiply each tensor by ``2**exponents[name]`` (0 if absent) after decoding, undoing
        the sender's :func:`scale_exponents`; values it pushes beyond float32 are refused
        as not finite.

    Raises
    ------
    WireError
        MALFORMED, OVERSIZED, WRONG_SHAPE or NOT_FINITE.
    """
    if encoding.compression == "zlib":
        inflater = zlib.decompressobj()
        try:
            body = inflater.decompress(body, max_bytes)
        except zlib.error as error:
            raise WireError(
                RejectReason.MALFORMED, f"tensor body is not zlib data: {error}"
            ) from error
        if inflater.unconsumed_tail:
            raise WireError(
                RejectReason.OVERSIZED,
                f"compressed tensor body inflates beyond {max_bytes} bytes",
            )
    try:
        arrays = load_safetensors(body)
    except (SafetensorError, ValueError) as error:
        raise WireError(
            RejectReason.MALFORMED, f"tensor body is not safetensors: {error}"
        ) from error
    except KeyError as error:  # safetensors.numpy has no numpy dtype for it (BF16, F8_*)
        raise WireError(
            RejectReason.WRONG_SHAPE,
            f"tensor body holds dtype {error.args[0]!r}; the header declares {encoding.dtype}",
        ) from error
    if set(arrays) != set(expected):
        raise WireError(
            RejectReason.WRONG_SHAPE,
            f"expected tensors {sorted(expected)}, got {sorted(arrays)}",
        )
    decoded: dict[str, FloatArray] = {}
    want = np.dtype(_DTYPES[encoding.dtype])
    for name, length in expected.items():
        array = arrays[name]
        if array.dtype != want:
            raise WireError(
                RejectReason.WRONG_SHAPE,
                f"tensor {name!r} is {array.dtype}, the header declares {encoding.dtype}",
            )
        if array.shape != (length,):
            raise WireError(
                RejectReason.WRONG_SHAPE,
                f"tensor {name!r} has shape {array.shape}, the model needs ({length},)",
            )
        # safetensors already handed over a private copy: convert without copying again.
        values = array.astype(np.float32, copy=False)
        exponent = exponents.get(name, 0) if exponents else 0
        if exponent:
            with np.errstate(over="ignore"):
                values = np.ldexp(values, exponent).astype(np.float32, copy=False)
        # A float64 sum of float32 values cannot overflow, so it is finite exactly when every
        # value is: one pass without a temporary boolean array (+inf and -inf sum to NaN).
        with np.errstate(invalid="ignore"):
            total = float(values.sum(dtype=np.float64))
        if not math.isfinite(total):
            bad = int((~np.isfinite(values)).sum())
            raise WireError(
                RejectReason.NOT_FINITE, f"tensor {name!r} holds {bad} NaN or infinite values"
            )
        decoded[name] = values
    return decoded


def tensor_bytes(n_values: int, encoding: TensorEncoding) -> int:
    """Raw size of ``n_values`` numbers in ``encoding``'s dtype (before compression)."""
    return n_values * _WIDTH[encoding.dtype]
