"""Tensor bodies of the wire protocol: named flat vectors in the safetensors format.

Task and update bodies hold named flat weight vectors as safetensors — a header of names,
dtypes and shapes followed by raw little-endian data, parsed without executing anything
(never pickle, never ``torch.load`` of bytes from the network; the header is read by
:mod:`faultfleet.wire.tensor_view`). Bodies can be float16 and zlib-compressed
(:class:`~faultfleet.wire.messages.TensorEncoding`); receivers always get float32 back.
Gradients travel scaled by a power of two per tensor (:func:`scale_exponents`), so that
float16 keeps their precision whatever their magnitude. :mod:`faultfleet.wire.codec`
re-exports these functions.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
from safetensors.numpy import save as save_safetensors

from faultfleet.types import FloatArray
from faultfleet.wire.messages import TensorEncoding
from faultfleet.wire.rejects import RejectReason, WireError, load_json
from faultfleet.wire.tensor_view import NUMPY_DTYPES, TensorFormatError, read_entries

_DTYPES = {"float32": np.float32, "float16": np.float16}
_WIDTH = {"float32": 4, "float16": 2}
_FLOAT16_TOP_EXPONENT = 15
"""A scaled float16 tensor's largest magnitude lies in [2**14, 2**15), below float16's
maximum (65504) with room for rounding up, and 2**29 above its smallest normal number."""


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
    body: bytes | memoryview,
    encoding: TensorEncoding,
    expected: Mapping[str, int],
    *,
    max_bytes: int,
    exponents: Mapping[str, int] | None = None,
    copy: bool = True,
) -> dict[str, FloatArray]:
    """The float32 vectors of a safetensors body, checked against ``expected`` lengths.

    Parameters
    ----------
    body : bytes or memoryview
    encoding : TensorEncoding
        As the frame header declares it.
    expected : mapping of tensor name to its length (number of parameters)
    max_bytes : int
        Limit on the inflated size of a compressed body.
    exponents : mapping of name to int, optional
        Multiply each tensor by ``2**exponents[name]`` (0 if absent) after decoding, undoing
        the sender's :func:`scale_exponents`; values it pushes beyond float32 are refused
        as not finite.
    copy : bool
        True: every vector is a writable array of its own. False: a float32 vector that
        needs no conversion is a read-only view of ``body`` (or of the inflated body), no
        copy made (:mod:`faultfleet.wire.tensor_view`); the caller must not need to write
        to it, and keeps ``body``'s memory alive as long as it holds the vector.

    Raises
    ------
    WireError
        MALFORMED, OVERSIZED, WRONG_SHAPE or NOT_FINITE.
    """
    view = memoryview(body).cast("B")
    if encoding.compression == "zlib":
        view = memoryview(_inflate(view, max_bytes))
    try:
        entries = read_entries(view, load_json)
    except (TensorFormatError, WireError) as error:
        raise WireError(
            RejectReason.MALFORMED, f"tensor body is not safetensors: {error}"
        ) from error
    if set(entries) != set(expected):
        raise WireError(
            RejectReason.WRONG_SHAPE,
            f"expected tensors {sorted(expected)}, got {sorted(entries)}",
        )
    decoded: dict[str, FloatArray] = {}
    want = np.dtype(_DTYPES[encoding.dtype])
    for name, length in expected.items():
        entry = entries[name]
        if entry.dtype not in NUMPY_DTYPES:
            raise WireError(
                RejectReason.WRONG_SHAPE,
                f"tensor body holds dtype {entry.dtype!r}; the header declares {encoding.dtype}",
            )
        if NUMPY_DTYPES[entry.dtype] != want:
            raise WireError(
                RejectReason.WRONG_SHAPE,
                f"tensor {name!r} is {NUMPY_DTYPES[entry.dtype].name}, the header declares "
                f"{encoding.dtype}",
            )
        if entry.shape != (length,):
            raise WireError(
                RejectReason.WRONG_SHAPE,
                f"tensor {name!r} has shape {entry.shape}, the model needs ({length},)",
            )
        values = _float32(entry.array(view), exponents.get(name, 0) if exponents else 0, copy)
        _check_finite(name, values)
        decoded[name] = values
    return decoded


def _inflate(body: memoryview, max_bytes: int) -> bytes:
    inflater = zlib.decompressobj()
    try:
        inflated = inflater.decompress(body, max_bytes)
    except zlib.error as error:
        raise WireError(RejectReason.MALFORMED, f"tensor body is not zlib data: {error}") from error
    if inflater.unconsumed_tail:
        raise WireError(
            RejectReason.OVERSIZED,
            f"compressed tensor body inflates beyond {max_bytes} bytes",
        )
    return inflated


def _float32(stored: np.ndarray[Any, Any], exponent: int, copy: bool) -> FloatArray:
    """``stored`` as float32 times ``2**exponent``: a view when nothing changes and not
    ``copy``, else one new array (never two: conversion and scaling share it)."""
    if exponent:
        with np.errstate(over="ignore"):
            scaled: FloatArray = np.ldexp(stored, exponent, dtype=np.float32)
        return scaled
    if stored.dtype == np.float32 and not copy:
        return stored
    return stored.astype(np.float32)  # a writable copy, converted if float16


def _check_finite(name: str, values: FloatArray) -> None:
    """Refuse NaN and infinities in one pass over ``values``, without a temporary array.

    The float32 dot product of the vector with itself (BLAS, vectorised) is NaN or infinite
    whenever a value is; it may also overflow for finite values above ~1e19 · n^-1/2, so
    only a non-finite result is checked value by value.
    """
    if values.size == 0:
        return
    with np.errstate(over="ignore", invalid="ignore"):
        square = float(np.dot(values, values))
    if math.isfinite(square):
        return
    bad = int(values.size - np.count_nonzero(np.isfinite(values)))
    if bad:
        raise WireError(
            RejectReason.NOT_FINITE, f"tensor {name!r} holds {bad} NaN or infinite values"
        )


def tensor_bytes(n_values: int, encoding: TensorEncoding) -> int:
    """Raw size of ``n_values`` numbers in ``encoding``'s dtype (before compression)."""
    return n_values * _WIDTH[encoding.dtype]
