"""The diagnosis encoder writes what the pydantic model writes, byte for byte, and refuses
what the model refuses."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from faultfleet.wire.diagnosis_json import DiagnosisEncoder
from faultfleet.wire.messages import Diagnosis

EDGE_FLOATS: tuple[float, ...] = (
    0.0,
    -0.0,
    1e-4,
    9.5e-5,
    -9.5e-5,
    1e-5,
    9.99e-6,
    1e-6,
    1.234e-7,
    5e-324,
    0.3,
)
EDGE_FLOATS += (0.1 + 0.2, 1e15, 1e16, -1.5e16, 1e22, 1.7976931348623157e308)
"""Where Python's ``repr`` and pydantic differ or might (exponents), and a long repr."""
CLASSES = ("normal", 'inner "race"', "outer_race\n", "ball é", "cage\u2028")


def model_json(
    encoder: DiagnosisEncoder,
    window_index: int,
    class_id: int,
    probability: float,
    timestamp: float,
    latency_s: float,
    true_label: int | None,
    origin: str,
) -> bytes:
    """What the agent published before the encoder: the model's own JSON."""
    return (
        Diagnosis(
            agent_id=encoder.agent_id,
            window_index=window_index,
            class_id=class_id,
            class_name=encoder.class_names[class_id],
            probability=probability,
            model_version=encoder.model_version,
            cluster_id=encoder.cluster_id,
            timestamp=timestamp,
            latency_s=latency_s,
            true_label=true_label,
            origin=origin,
        )
        .model_dump_json()
        .encode()
    )


@settings(max_examples=400, deadline=None)
@given(
    window_index=st.integers(0, 2**63),
    class_id=st.integers(0, len(CLASSES) - 1),
    probability=st.floats(0.0, 1.0),
    timestamp=st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.floats(-2e-4, 2e-4)),
    latency_s=st.one_of(st.floats(0.0, 10.0), st.floats(0.0, 2e-4), st.floats(min_value=0.0)),
    true_label=st.one_of(st.none(), st.integers(-(2**70), 2**70)),
    origin=st.text(),
)
def test_the_json_is_the_models_byte_for_byte(
    window_index: int,
    class_id: int,
    probability: float,
    timestamp: float,
    latency_s: float,
    true_label: int | None,
    origin: str,
) -> None:
    # Prepare
    encoder = DiagnosisEncoder("m07", 3, "cluster-1", CLASSES)
    values = (window_index, class_id, probability, timestamp, latency_s, true_label, origin)

    # Execute
    try:
        expected: bytes | type[Exception] = model_json(encoder, *values)
    except ValueError as error:  # ValidationError, or a text UTF-8 cannot encode
        expected = type(error)
    if isinstance(expected, bytes):
        encoded = encoder.encode(*values)
    else:
        with pytest.raises(expected):
            encoder.encode(*values)
        return

    # Assert: the same bytes, and the model reads them back as the diagnosis it would make
    assert encoder.fast
    assert encoded == expected
    assert Diagnosis.model_validate_json(encoded) == Diagnosis.model_validate_json(expected)


@pytest.mark.parametrize(
    "value",
    EDGE_FLOATS,
)
def test_floats_at_the_edges_of_pythons_exponent_form(value: float) -> None:
    # Prepare
    encoder = DiagnosisEncoder("m07", 3, "cluster-1", CLASSES)
    values = (1, 2, min(1.0, abs(value)), value, abs(value), None, "w1")

    # Execute / Assert
    assert encoder.encode(*values) == model_json(encoder, *values)


@pytest.mark.parametrize(
    ("probability", "timestamp", "latency_s"),
    [
        (0.5, 1.7e9, 9.5e-5),  # a small model's latency, the common case
        (9.5e-5, 1.7e9, 0.001),
        (0.5, 1e-5, 0.001),
        (0.5, 1e22, 1e-6),
        (1e-7, 1.7e9, 9.99e-6),
    ],
)
def test_one_value_in_exponent_form_among_others_that_are_not(
    probability: float, timestamp: float, latency_s: float
) -> None:
    # Prepare
    encoder = DiagnosisEncoder("m07", 3, "cluster-1", CLASSES)
    values = (1, 2, probability, timestamp, latency_s, None, "w1")

    # Execute / Assert
    assert encoder.encode(*values) == model_json(encoder, *values)


@pytest.mark.parametrize(
    ("timestamp", "latency_s", "probability"),
    [(math.nan, 0.001, 0.5), (math.inf, 0.001, 0.5), (1.0, -0.001, 0.5), (1.0, 0.001, 1.5)],
)
def test_what_the_model_refuses_is_refused(
    timestamp: float, latency_s: float, probability: float
) -> None:
    encoder = DiagnosisEncoder("m07", 3, "cluster-1", CLASSES)
    with pytest.raises(ValidationError):
        encoder.encode(1, 0, probability, timestamp, latency_s, None, "w1")


def test_values_of_other_types_go_through_the_model() -> None:
    # Prepare: an int timestamp, a bool label: the model converts both
    encoder = DiagnosisEncoder("m07", 3, "cluster-1", CLASSES)
    values = (1, 0, 1.0, 1700000000, 0.001, True, "w1")

    # Execute / Assert
    assert encoder.encode(*values) == model_json(encoder, *values)


def test_an_invalid_agent_or_cluster_id_is_refused_when_the_encoder_is_built() -> None:
    with pytest.raises(ValidationError, match="cluster_id"):
        DiagnosisEncoder("m07", 3, "cluster 1", CLASSES)
    with pytest.raises(ValidationError, match="agent_id"):
        DiagnosisEncoder("m/07", 3, "cluster-1", CLASSES)


def test_a_class_id_beyond_the_models_classes_is_refused() -> None:
    encoder = DiagnosisEncoder("m07", 3, "cluster-1", CLASSES)
    with pytest.raises(IndexError):
        encoder.encode(1, len(CLASSES), 0.5, 1.0, 0.001, None, "w1")


def test_an_origin_utf8_cannot_encode_fails_as_with_the_model() -> None:
    # Prepare: a lone surrogate (a file name Python decoded with surrogateescape)
    encoder = DiagnosisEncoder("m07", 3, "cluster-1", CLASSES)
    values = (1, 0, 0.5, 1.0, 0.001, None, "pump-3\udcff.wav")
    with pytest.raises(ValueError, match="surrogates not allowed") as expected:
        model_json(encoder, *values)

    # Execute / Assert
    with pytest.raises(type(expected.value), match="surrogates not allowed"):
        encoder.encode(*values)
