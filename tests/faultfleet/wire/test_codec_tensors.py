"""Tests of tensor bodies: round trips in every encoding, and every way a receiver refuses one.

No pickle anywhere: a pickled body is refused and never unpickled.
"""

from __future__ import annotations

import json
import pathlib
import pickle
import struct
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from safetensors.numpy import save as save_safetensors

from faultfleet.types import FloatArray
from faultfleet.wire.codec import (
    RejectReason,
    WireError,
    decode_tensors,
    encode_tensors,
    tensor_bytes,
)
from faultfleet.wire.messages import TensorEncoding

LIMIT = 1 << 20
PLAIN = TensorEncoding()
ENCODINGS = [
    TensorEncoding(dtype=dtype, compression=compression)
    for dtype in ("float32", "float16")
    for compression in ("none", "zlib")
]


def reason_of(error: pytest.ExceptionInfo[WireError]) -> RejectReason:
    return error.value.reason


def vectors(seed: int) -> dict[str, FloatArray]:
    rng = np.random.default_rng(seed)
    return {
        "cluster-0": rng.standard_normal(1000).astype(np.float32),
        "cluster-1": (100 * rng.standard_normal(37)).astype(np.float32),
    }


# -- tensors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ENCODINGS, ids=lambda e: f"{e.dtype}-{e.compression}")
def test_tensors_round_trip(encoding: TensorEncoding) -> None:
    tensors = vectors(0)
    expected = {name: len(v) for name, v in tensors.items()}

    decoded = decode_tensors(encode_tensors(tensors, encoding), encoding, expected, max_bytes=LIMIT)

    assert set(decoded) == set(tensors)
    for name, value in tensors.items():
        assert decoded[name].dtype == np.float32
        assert decoded[name].shape == value.shape
        if encoding.dtype == "float32":
            np.testing.assert_array_equal(decoded[name], value)
        else:
            # float16 keeps 11 significant bits: round to nearest is within 2^-11 relative.
            np.testing.assert_allclose(decoded[name], value, rtol=2**-11, atol=2**-25)
            assert not np.array_equal(decoded[name], value)


def test_float16_halves_the_raw_size() -> None:
    tensors = {"weights": np.ones(1000, dtype=np.float32)}

    body32 = encode_tensors(tensors, TensorEncoding(dtype="float32"))
    body16 = encode_tensors(tensors, TensorEncoding(dtype="float16"))

    assert tensor_bytes(1000, TensorEncoding(dtype="float32")) == 4000
    assert tensor_bytes(1000, TensorEncoding(dtype="float16")) == 2000
    assert len(body32) - len(body16) == 2000


def test_zlib_compresses_and_is_declared_by_the_encoding() -> None:
    tensors = {"weights": np.zeros(10_000, dtype=np.float32)}
    zipped = TensorEncoding(compression="zlib")

    body = encode_tensors(tensors, zipped)

    assert len(body) < 1000
    with pytest.raises(WireError) as error:
        decode_tensors(body, PLAIN, {"weights": 10_000}, max_bytes=LIMIT)
    assert reason_of(error) is RejectReason.MALFORMED


@given(
    hnp.arrays(
        np.float32,
        st.integers(0, 300),
        elements=st.floats(allow_nan=False, allow_infinity=False, width=32),
    ),
    st.sampled_from(["none", "zlib"]),
)
def test_any_finite_float32_vector_round_trips_exactly(
    values: FloatArray, compression: str
) -> None:
    encoding = TensorEncoding(dtype="float32", compression=compression)  # type: ignore[arg-type]

    body = encode_tensors({"w": values}, encoding)
    decoded = decode_tensors(body, encoding, {"w": len(values)}, max_bytes=LIMIT)["w"]

    assert decoded.tobytes() == values.tobytes()  # bit for bit, signed zeros included


@pytest.mark.parametrize(
    ("expected", "message"),
    [
        (
            {"cluster-0": 1000},
            r"expected tensors \['cluster-0'\], got \['cluster-0', 'cluster-1'\]",
        ),
        ({"cluster-0": 1000, "cluster-1": 37, "cluster-2": 5}, "expected tensors"),
        ({"cluster-0": 1000, "other": 37}, "expected tensors"),
        ({"cluster-0": 999, "cluster-1": 37}, r"'cluster-0' has shape \(1000,\), the model needs"),
    ],
)
def test_wrong_names_or_lengths_are_wrong_shape(expected: dict[str, int], message: str) -> None:
    body = encode_tensors(vectors(1), PLAIN)

    with pytest.raises(WireError, match=message) as error:
        decode_tensors(body, PLAIN, expected, max_bytes=LIMIT)

    assert reason_of(error) is RejectReason.WRONG_SHAPE


def test_a_matrix_is_wrong_shape() -> None:
    body = save_safetensors({"w": np.zeros((2, 3), dtype=np.float32)})

    with pytest.raises(WireError, match=r"shape \(2, 3\), the model needs \(6,\)") as error:
        decode_tensors(body, PLAIN, {"w": 6}, max_bytes=LIMIT)

    assert reason_of(error) is RejectReason.WRONG_SHAPE


@pytest.mark.parametrize(
    ("stored", "declared"),
    [
        (np.float32, "float16"),
        (np.float16, "float32"),
        (np.float64, "float32"),
        (np.int32, "float32"),
    ],
)
def test_a_dtype_other_than_the_declared_one_is_wrong_shape(
    stored: type[np.generic], declared: str
) -> None:
    body = save_safetensors({"w": np.zeros(4, dtype=stored)})
    encoding = TensorEncoding(dtype=declared)  # type: ignore[arg-type]

    with pytest.raises(WireError, match=f"the header declares {declared}") as error:
        decode_tensors(body, encoding, {"w": 4}, max_bytes=LIMIT)

    assert reason_of(error) is RejectReason.WRONG_SHAPE


def test_a_dtype_numpy_cannot_hold_is_refused_not_crashing() -> None:
    header = json.dumps({"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}).encode()
    body = struct.pack("<Q", len(header)) + header + bytes(4)

    with pytest.raises(WireError, match="BF16") as error:
        decode_tensors(body, PLAIN, {"w": 2}, max_bytes=LIMIT)

    assert reason_of(error) is RejectReason.WRONG_SHAPE


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("encoding", ENCODINGS, ids=lambda e: f"{e.dtype}-{e.compression}")
def test_non_finite_values_are_refused(bad: float, encoding: TensorEncoding) -> None:
    values = np.ones(10, dtype=np.float32)
    values[[2, 7]] = bad
    body = encode_tensors({"w": values}, encoding)

    with pytest.raises(WireError, match="'w' holds 2 NaN or infinite values") as error:
        decode_tensors(body, encoding, {"w": 10}, max_bytes=LIMIT)

    assert reason_of(error) is RejectReason.NOT_FINITE


@pytest.mark.parametrize(
    ("body", "encoding", "message"),
    [
        (b"", PLAIN, "not safetensors"),
        (b"garbage" * 10, PLAIN, "not safetensors"),
        (struct.pack("<Q", 10) + b"{not json}", PLAIN, "not safetensors"),
        (b"garbage" * 10, TensorEncoding(compression="zlib"), "not zlib data"),
        (zlib.compress(b"garbage" * 10), TensorEncoding(compression="zlib"), "not safetensors"),
    ],
)
def test_garbage_bodies_are_malformed(body: bytes, encoding: TensorEncoding, message: str) -> None:
    with pytest.raises(WireError, match=message) as error:
        decode_tensors(body, encoding, {"w": 4}, max_bytes=LIMIT)

    assert reason_of(error) is RejectReason.MALFORMED


def test_a_truncated_body_is_malformed() -> None:
    body = encode_tensors({"w": np.ones(100, dtype=np.float32)}, PLAIN)

    with pytest.raises(WireError) as error:
        decode_tensors(body[:-8], PLAIN, {"w": 100}, max_bytes=LIMIT)

    assert reason_of(error) is RejectReason.MALFORMED


class _Trap:
    """Unpickling this touches a file: proof that a body was (or was not) unpickled."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return pathlib.Path.touch, (self.path,)


@pytest.mark.parametrize("compression", ["none", "zlib"])
def test_pickled_bodies_are_malformed_and_never_unpickled(compression: str, tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"
    encoding = TensorEncoding(compression=compression)  # type: ignore[arg-type]
    for payload in (pickle.dumps({"w": np.ones(4, dtype=np.float32)}), pickle.dumps(_Trap(marker))):
        body = zlib.compress(payload) if compression == "zlib" else payload

        with pytest.raises(WireError) as error:
            decode_tensors(body, encoding, {"w": 4}, max_bytes=LIMIT)

        assert reason_of(error) is RejectReason.MALFORMED
    assert not marker.exists()


@pytest.fixture(scope="module")
def zlib_bomb() -> bytes:
    """A safetensors body declaring one 100 MB tensor of zeros, deflated to ~100 kB.

    Built one MiB at a time, so the test itself never holds the 100 MB either.
    """
    n_values = 25 * (1 << 20)
    header = json.dumps(
        {"w": {"dtype": "F32", "shape": [n_values], "data_offsets": [0, 4 * n_values]}}
    ).encode()
    deflate = zlib.compressobj(9)
    parts = [deflate.compress(struct.pack("<Q", len(header)) + header)]
    chunk = bytes(1 << 20)
    parts.extend(deflate.compress(chunk) for _ in range(100))
    parts.append(deflate.flush())
    return b"".join(parts)


def test_a_zlib_bomb_is_oversized_without_inflating_it(zlib_bomb: bytes) -> None:
    encoding = TensorEncoding(compression="zlib")
    assert len(zlib_bomb) < 200_000

    tracemalloc.start()
    try:
        with pytest.raises(WireError, match="inflates beyond 1048576 bytes") as error:
            decode_tensors(zlib_bomb, encoding, {"w": 25 * (1 << 20)}, max_bytes=LIMIT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert reason_of(error) is RejectReason.OVERSIZED
    assert peak < 8 * LIMIT


def test_a_compressed_body_that_inflates_to_exactly_the_limit_is_accepted() -> None:
    tensors = {"w": np.zeros(1000, dtype=np.float32)}
    zipped = TensorEncoding(compression="zlib")
    body = encode_tensors(tensors, zipped)
    inflated = len(zlib.decompress(body))

    decoded = decode_tensors(body, zipped, {"w": 1000}, max_bytes=inflated)

    np.testing.assert_array_equal(decoded["w"], tensors["w"])
    with pytest.raises(WireError) as error:
        decode_tensors(body, zipped, {"w": 1000}, max_bytes=inflated - 1)
    assert reason_of(error) is RejectReason.OVERSIZED


def test_float16_refuses_values_beyond_its_range_at_the_sender() -> None:
    values = np.ones(4, dtype=np.float32)
    values[1] = 70_000.0

    with pytest.raises(ValueError, match=r"'w' holds 7e\+04, beyond float16's range"):
        encode_tensors({"w": values}, TensorEncoding(dtype="float16"))
