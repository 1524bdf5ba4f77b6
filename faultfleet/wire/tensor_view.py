"""Reading a safetensors body in place: tensors as numpy views of the received bytes.

The safetensors format is an 8-byte little-endian header length N, N bytes of UTF-8 JSON
naming each tensor's dtype, shape and ``data_offsets`` (begin and end, in bytes, relative
to the data that follows the header), and the raw little-endian data. The ``safetensors``
package copies every tensor out of the buffer it is given; a coordinator receiving
thousands of updates a minute would copy each one twice (body slice, then tensors). Here
the header is read with the same bounded JSON reader as the frame header
(:func:`faultfleet.wire.rejects.load_json`) and each tensor becomes a read-only
``numpy.frombuffer`` view of the body: no copy at all.

The checks are those of the ``safetensors`` package: a header that is a JSON object of
tensor entries (plus an optional ``__metadata__`` object of strings), every entry with a
dtype, a shape of non-negative integers and two offsets, the byte length of every tensor
equal to its shape's product times its dtype's width, and the tensors laid out back to
back from offset 0 to the end of the data without a gap or an overlap. Anything else is
MALFORMED; a dtype numpy cannot hold (``BF16``, ``F8_*``) is WRONG_SHAPE, as a tensor of
the wrong dtype is.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from faultfleet.errors import FaultfleetError

_LENGTH = struct.Struct("<Q")

NUMPY_DTYPES: dict[str, np.dtype[Any]] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"),
    "U16": np.dtype("<u2"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
"""safetensors dtype names numpy can hold, and their little-endian numpy dtypes."""

_OTHER_WIDTHS = {"BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}
"""Widths of dtypes safetensors knows and numpy does not (needed to check the layout)."""


class TensorFormatError(FaultfleetError, ValueError):
    """A body that is not safetensors; the codec turns it into a MALFORMED rejection."""


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors body: its dtype name, shape and place in the data."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    """Byte offset in the body where its data starts."""
    end: int

    def array(self, body: memoryview) -> np.ndarray[Any, Any]:
        """The tensor as a read-only view of ``body`` (flat), in its own dtype.

        Raises
        ------
        KeyError
            The dtype has no numpy counterpart.
        """
        dtype = NUMPY_DTYPES[self.dtype]
        count = (self.end - self.begin) // dtype.itemsize
        array = np.frombuffer(body, dtype=dtype, count=count, offset=self.begin)
        array.flags.writeable = False
        return array


def read_entries(
    body: memoryview, load_json: Callable[[bytes, str], dict[str, Any]]
) -> dict[str, TensorEntry]:
    """The tensor entries of the safetensors ``body``, checked, without touching the data.

    Parameters
    ----------
    body : memoryview
        The whole safetensors body (bytes of a frame, or inflated bytes).
    load_json : callable
        ``load_json(data, what)``: the bounded JSON reader, raising the codec's errors.

    Raises
    ------
    TensorFormatError
        The body is not a well-formed safetensors buffer.
    """
    if len(body) < _LENGTH.size:
        raise TensorFormatError(f"{len(body)} bytes cannot hold a safetensors header")
    (length,) = _LENGTH.unpack_from(body, 0)
    data_start = _LENGTH.size + length
    if length < 2 or data_start > len(body):
        raise TensorFormatError(f"header of {length} bytes does not fit the {len(body)}-byte body")
    header_bytes = bytes(body[_LENGTH.size : data_start])
    if not header_bytes.startswith(b"{"):
        raise TensorFormatError("header does not start with '{'")
    header = load_json(header_bytes, "tensor header")
    entries: dict[str, TensorEntry] = {}
    for name, info in header.items():
        if name == "__metadata__":
            _check_metadata(info)
            continue
        entries[name] = _entry(name, info, data_start)
    _check_layout(entries, data_start, len(body))
    return entries


def _entry(name: str, info: Any, data_start: int) -> TensorEntry:
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
        raise TensorFormatError(f"entry {name!r} lacks its dtype, shape or data_offsets")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or not (dtype in NUMPY_DTYPES or dtype in _OTHER_WIDTHS):
        raise TensorFormatError(f"entry {name!r} has unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(_natural(n) for n in shape):
        raise TensorFormatError(f"entry {name!r} has shape {shape!r}, not a list of sizes")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_natural, offsets))):
        raise TensorFormatError(f"entry {name!r} has data_offsets {offsets!r}")
    begin, end = offsets
    width = NUMPY_DTYPES[dtype].itemsize if dtype in NUMPY_DTYPES else _OTHER_WIDTHS[dtype]
    if end < begin or end - begin != math.prod(shape) * width:
        raise TensorFormatError(
            f"entry {name!r} spans {end - begin} bytes; its shape {shape} of {dtype} needs "
            f"{math.prod(shape) * width}"
        )
    return TensorEntry(dtype, tuple(shape), data_start + begin, data_start + end)


def _natural(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_metadata(metadata: Any) -> None:
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
    ):
        raise TensorFormatError("__metadata__ is not an object of strings")


def _check_layout(entries: dict[str, TensorEntry], data_start: int, size: int) -> None:
    """The tensors fill the data back to back, from its first byte to the body's last."""
    position = data_start
    for entry in sorted(entries.values(), key=lambda e: (e.begin, e.end)):
        if entry.begin != position:
            raise TensorFormatError("tensor data has a gap or an overlap")
        position = entry.end
    if position != size:
        raise TensorFormatError(f"tensor data ends at byte {position} of a {size}-byte body")
