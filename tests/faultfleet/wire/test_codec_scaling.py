"""Tests of scaled tensors: gradients keep their precision in float16 whatever their size."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from faultfleet.types import FloatArray
from faultfleet.wire.codec import (
    RejectReason,
    WireError,
    decode_tensors,
    encode_tensors,
    scale_exponents,
)
from faultfleet.wire.messages import TensorEncoding

LIMIT = 1 << 20
HALF = TensorEncoding(dtype="float16")
HALF_ZLIB = TensorEncoding(dtype="float16", compression="zlib")


def gradient(magnitude: float, seed: int = 0, n: int = 2000) -> FloatArray:
    """Entries spread over six decades below ``magnitude``, random signs."""
    rng = np.random.default_rng(seed)
    decades = rng.uniform(-6, 0, n)
    signs = rng.choice([-1.0, 1.0], n)
    return (magnitude * signs * 10.0**decades).astype(np.float32)


def round_trip(tensors: dict[str, FloatArray], encoding: TensorEncoding) -> dict[str, FloatArray]:
    exponents = scale_exponents(tensors, encoding)
    body = encode_tensors(tensors, encoding, exponents=exponents)
    expected = {name: len(value) for name, value in tensors.items()}
    return decode_tensors(body, encoding, expected, max_bytes=LIMIT, exponents=exponents)


def test_float32_needs_no_scale() -> None:
    tensors = {"a": gradient(1e-9), "b": gradient(1e3)}

    assert scale_exponents(tensors, TensorEncoding()) == {"a": 0, "b": 0}


@pytest.mark.parametrize("magnitude", [1e-9, 3e-6, 1.0, 5e3])
def test_the_largest_float16_entry_lands_in_the_top_binade(magnitude: float) -> None:
    tensors = {"g": gradient(magnitude)}

    exponent = scale_exponents(tensors, HALF)["g"]

    top = np.abs(tensors["g"]).max() / 2.0**exponent
    assert 2.0**14 <= top < 2.0**15


def test_a_zero_tensor_has_exponent_zero() -> None:
    assert scale_exponents({"g": np.zeros(5, np.float32)}, HALF) == {"g": 0}


@pytest.mark.parametrize("magnitude", [1e-9, 3e-6, 1e-2, 5e3])
@pytest.mark.parametrize("encoding", [HALF, HALF_ZLIB], ids=["none", "zlib"])
def test_scaled_float16_keeps_eleven_significant_bits_at_any_magnitude(
    magnitude: float, encoding: TensorEncoding
) -> None:
    tensors = {"g": gradient(magnitude)}

    decoded = round_trip(tensors, encoding)["g"]

    np.testing.assert_allclose(decoded, tensors["g"], rtol=2.0**-11)


def test_unscaled_float16_would_lose_small_gradients() -> None:
    small = gradient(1e-5)
    body = encode_tensors({"g": small}, HALF)

    unscaled = decode_tensors(body, HALF, {"g": len(small)}, max_bytes=LIMIT)["g"]

    relative = np.abs(unscaled - small) / np.abs(small)
    assert relative.max() > 0.5  # subnormal or flushed to zero
    assert round_trip({"g": small}, HALF)["g"] == pytest.approx(small, rel=2.0**-11)


@given(
    exponent=st.integers(-140, 100),
    mantissas=st.lists(st.floats(-1, 1, width=32), min_size=1, max_size=50),
)
def test_float32_with_exponents_round_trips_exactly(exponent: int, mantissas: list[float]) -> None:
    values = np.ldexp(np.array(mantissas, dtype=np.float32), exponent // 4)
    body = encode_tensors({"g": values}, TensorEncoding(), exponents={"g": exponent})

    decoded = decode_tensors(
        body, TensorEncoding(), {"g": len(values)}, max_bytes=LIMIT, exponents={"g": exponent}
    )

    expected = np.ldexp(np.ldexp(values, -exponent), exponent)
    np.testing.assert_array_equal(decoded["g"], expected)


def test_an_exponent_that_overflows_float32_is_not_finite() -> None:
    body = encode_tensors({"g": np.full(4, 30000.0, np.float32)}, HALF)

    with pytest.raises(WireError, match="'g' holds 4 NaN or infinite values") as error:
        decode_tensors(body, HALF, {"g": 4}, max_bytes=LIMIT, exponents={"g": 120})

    assert error.value.reason is RejectReason.NOT_FINITE


def test_exponents_of_other_tensors_are_ignored_by_the_codec() -> None:
    values = np.arange(4, dtype=np.float32)
    body = encode_tensors({"g": values}, TensorEncoding())

    decoded = decode_tensors(
        body, TensorEncoding(), {"g": 4}, max_bytes=LIMIT, exponents={"other": 3}
    )

    np.testing.assert_array_equal(decoded["g"], values)
