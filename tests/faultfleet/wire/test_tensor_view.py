"""Tests of decoding tensors where they lie: views of the received frame, checked as the
safetensors package checks them."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from safetensors import SafetensorError
from safetensors.numpy import load as load_safetensors
from safetensors.numpy import save as save_safetensors

from faultfleet.types import FloatArray
from faultfleet.wire.codec import (
    RejectReason,
    WireError,
    decode_tensors,
    encode_frame,
    encode_tensors,
    split_frame_view,
)
from faultfleet.wire.messages import FitUpdateMessage, TensorEncoding

LIMIT = 1 << 20
PLAIN = TensorEncoding()


def update(task_id: str) -> FitUpdateMessage:
    return FitUpdateMessage(
        task_id=task_id,
        run_id="r1",
        server_round=1,
        agent_id="m07",
        model_key="global",
        num_samples=10,
        train_loss=0.5,
    )


def body_of(header: dict[str, Any], data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


@pytest.mark.parametrize("task_id", ["t", "t1", "task-with-a-longer-id", "x" * 37])
def test_a_frame_body_starts_aligned_and_decodes_as_a_read_only_view_of_the_frame(
    task_id: str,
) -> None:
    weights = np.arange(100, dtype=np.float32)
    payload = encode_frame(update(task_id), encode_tensors({"weights": weights}, PLAIN))

    _, body = split_frame_view(payload, max_bytes=LIMIT)
    decoded = decode_tensors(body, PLAIN, {"weights": 100}, max_bytes=LIMIT, copy=False)

    view = decoded["weights"]
    np.testing.assert_array_equal(view, weights)
    assert view.flags.aligned
    assert not view.flags.writeable
    assert np.shares_memory(view, np.frombuffer(payload, dtype=np.uint8))
    assert (len(payload) - len(body)) % 8 == 0


def test_copy_true_gives_writable_arrays_of_their_own() -> None:
    payload = encode_frame(update("t"), encode_tensors({"w": np.ones(8, np.float32)}, PLAIN))
    _, body = split_frame_view(payload, max_bytes=LIMIT)

    decoded = decode_tensors(body, PLAIN, {"w": 8}, max_bytes=LIMIT)["w"]

    assert decoded.flags.writeable
    assert not np.shares_memory(decoded, np.frombuffer(payload, dtype=np.uint8))


@pytest.mark.parametrize("compression", ["none", "zlib"])
def test_float16_is_converted_into_one_new_float32_array(compression: str) -> None:
    encoding = TensorEncoding(dtype="float16", compression=compression)  # type: ignore[arg-type]
    body = encode_tensors({"w": np.full(5, 0.5, np.float32)}, encoding)

    decoded = decode_tensors(body, encoding, {"w": 5}, max_bytes=LIMIT, copy=False)["w"]

    assert decoded.dtype == np.float32
    np.testing.assert_array_equal(decoded, np.full(5, 0.5, np.float32))


def test_large_finite_values_whose_squares_overflow_are_accepted() -> None:
    values = np.full(4, 3e38, dtype=np.float32)  # finite; the dot product overflows

    decoded = decode_tensors(encode_tensors({"w": values}, PLAIN), PLAIN, {"w": 4}, max_bytes=LIMIT)

    np.testing.assert_array_equal(decoded["w"], values)


@given(
    hnp.arrays(np.float32, st.integers(0, 200)),
    st.sampled_from(["none", "zlib"]),
)
def test_the_view_decoder_accepts_and_refuses_exactly_what_the_copying_one_did(
    values: FloatArray, compression: str
) -> None:
    encoding = TensorEncoding(compression=compression)  # type: ignore[arg-type]
    body = encode_tensors({"w": values}, encoding)
    finite = bool(np.isfinite(values).all())

    if finite:
        decoded = decode_tensors(body, encoding, {"w": len(values)}, max_bytes=LIMIT, copy=False)
        assert decoded["w"].tobytes() == values.tobytes()
    else:
        with pytest.raises(WireError) as error:
            decode_tensors(body, encoding, {"w": len(values)}, max_bytes=LIMIT, copy=False)
        assert error.value.reason is RejectReason.NOT_FINITE


LAYOUTS: dict[str, tuple[dict[str, Any], bytes]] = {
    "gap": ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8)),
    "overlap": (
        {
            "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
        },
        bytes(8),
    ),
    "trailing bytes": ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, bytes(8)),
    "short data": ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, bytes(4)),
    "length against shape": (
        {"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}},
        bytes(8),
    ),
    "negative offset": ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}}, b""),
    "unknown dtype": ({"w": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}}, bytes(4)),
    "missing key": ({"w": {"dtype": "F32", "shape": [1]}}, bytes(4)),
    "entry not an object": ({"w": [1, 2, 3]}, bytes(4)),
    "metadata not strings": ({"__metadata__": {"a": 1}}, b""),
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_bodies_the_safetensors_package_refuses_are_malformed(name: str) -> None:
    header, data = LAYOUTS[name]
    body = body_of(header, data)
    with pytest.raises(SafetensorError):  # the reference refuses them too
        load_safetensors(body)

    with pytest.raises(WireError, match="not safetensors") as error:
        decode_tensors(body, PLAIN, {"w": 1}, max_bytes=LIMIT, copy=False)

    assert error.value.reason is RejectReason.MALFORMED


def test_a_body_with_metadata_and_several_tensors_decodes_like_the_safetensors_package() -> None:
    arrays: dict[str, np.ndarray[Any, Any]] = {
        "b": np.arange(3, dtype=np.float32),
        "a": np.arange(5, dtype=np.float32) / 7,
    }
    body = save_safetensors(arrays, metadata={"format": "np"})

    decoded = decode_tensors(body, PLAIN, {"a": 5, "b": 3}, max_bytes=LIMIT, copy=False)
    reference = load_safetensors(body)

    for name in arrays:
        np.testing.assert_array_equal(decoded[name], reference[name])
