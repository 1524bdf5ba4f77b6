"""What an agent accepts as its assignment and its model: signed, its own, intact, not stale."""

from __future__ import annotations

import hashlib
import json

import pytest

from edge_agent.model_intake import ModelIntake, ModelRefusedError, ModelRejectReason
from faultfleet.wire.codec import MAGIC, encode_frame
from faultfleet.wire.messages import ClusterAssignment, ModelAnnouncement, ModelSpec
from faultfleet.wire.signing import SigningKey, TrustedKeys

KEY = SigningKey.generate()
ATTACKER = SigningKey.generate()
SPEC = ModelSpec(name="compact", sample_shape=(1, 1024), n_classes=3)
LIMIT = 1 << 20


def announcement(body: bytes, *, version: int = 1, run: str = "run-1", cluster: str = "c0",
                 created_at: float = 100.0) -> ModelAnnouncement:  # fmt: skip
    return ModelAnnouncement(
        cluster_id=cluster,
        version=version,
        sha256=hashlib.sha256(body).hexdigest(),
        size_bytes=len(body),
        run_id=run,
        server_round=version * 10,
        model=SPEC,
        class_names=("a", "b", "c"),
        members=2,
        max_abs_diff=1e-6,
        created_at=created_at,
    )


def assignment(body: bytes, *, version: int = 1, run: str = "run-1", cluster: str = "c0",
               agent: str = "m07", timestamp: float = 101.0) -> ClusterAssignment:  # fmt: skip
    return ClusterAssignment(
        agent_id=agent,
        cluster_id=cluster,
        model_version=version,
        sha256=hashlib.sha256(body).hexdigest(),
        run_id=run,
        server_round=version * 10,
        timestamp=timestamp,
    )


def model_frame(header: ModelAnnouncement, body: bytes, key: SigningKey = KEY) -> bytes:
    return encode_frame(key.sign(header), body)


def signed(message: ClusterAssignment, key: SigningKey = KEY) -> bytes:
    return key.sign(message).model_dump_json().encode()


def intake() -> ModelIntake:
    return ModelIntake("m07", TrustedKeys([KEY.public_text]), max_payload_bytes=LIMIT)


def refusal(call: object, *args: object) -> ModelRejectReason:
    assert callable(call)
    with pytest.raises(ModelRefusedError) as error:
        call(*args)
    return error.value.reason


def test_the_assigned_signed_model_is_the_candidate() -> None:
    # Prepare
    models = intake()
    body = b"onnx v1"

    # Execute
    models.accept_assignment(signed(assignment(body)))
    models.accept_model("c0", model_frame(announcement(body), body))
    candidate = models.candidate()

    # Assert
    assert candidate is not None
    frame, payload = candidate
    assert (frame.announcement.version, frame.onnx_bytes) == (1, body)
    assert payload == signed(assignment(body))


def test_a_forged_model_with_a_huge_version_never_keeps_the_genuine_one_out() -> None:
    # Prepare: the forgeries an attacker on an anonymous broker can make
    models = intake()
    fake = b"attacker's onnx"
    forged_header = announcement(fake, version=10**9, created_at=1e12)
    unsigned = encode_frame(forged_header, fake)
    other_key = model_frame(forged_header, fake, ATTACKER)
    stolen_id = encode_frame(
        ATTACKER.sign(forged_header).model_copy(update={"key_id": KEY.key_id}), fake
    )
    genuine = b"genuine onnx v2"

    # Execute
    reasons = [
        refusal(models.accept_model, "c0", frame) for frame in (unsigned, other_key, stolen_id)
    ]
    models.accept_assignment(signed(assignment(genuine, version=2)))
    models.accept_model("c0", model_frame(announcement(genuine, version=2), genuine))

    # Assert
    assert reasons == [
        ModelRejectReason.UNSIGNED,
        ModelRejectReason.UNKNOWN_KEY,
        ModelRejectReason.BAD_SIGNATURE,
    ]
    candidate = models.candidate()
    assert candidate is not None
    assert candidate[0].onnx_bytes == genuine


def test_forged_assignments_change_nothing() -> None:
    # Prepare
    models = intake()
    body = b"onnx"
    models.accept_assignment(signed(assignment(body)))
    forged = assignment(b"attacker's onnx", version=10**9, timestamp=1e12)

    # Execute
    reasons = [
        refusal(models.accept_assignment, forged.model_dump_json().encode()),
        refusal(models.accept_assignment, signed(forged, ATTACKER)),
        refusal(models.accept_assignment, signed(forged.model_copy(update={"agent_id": "m08"}))),
    ]

    # Assert
    assert reasons == [
        ModelRejectReason.UNSIGNED,
        ModelRejectReason.UNKNOWN_KEY,
        ModelRejectReason.NOT_OURS,
    ]
    assert models.assignment == assignment(body)


def test_a_signed_header_on_other_bytes_is_refused_and_the_kept_frame_stays() -> None:
    # Prepare
    models = intake()
    body = b"genuine onnx"
    header = announcement(body)
    models.accept_assignment(signed(assignment(body)))
    models.accept_model("c0", model_frame(header, body))
    tampered = encode_frame(KEY.sign(header), b"genuine onny")

    # Execute
    reason = refusal(models.accept_model, "c0", tampered)

    # Assert
    assert reason is ModelRejectReason.DIGEST
    candidate = models.candidate()
    assert candidate is not None
    assert candidate[0].onnx_bytes == body


def test_a_model_replayed_on_another_clusters_topic_is_not_ours() -> None:
    body = b"onnx"

    reason = refusal(intake().accept_model, "c1", model_frame(announcement(body), body))

    assert reason is ModelRejectReason.NOT_OURS


def test_replayed_older_assignments_and_models_are_stale() -> None:
    # Prepare: the agent follows v3 of run-2
    models = intake()
    v3 = b"onnx v3"
    models.accept_assignment(signed(assignment(v3, version=3, run="run-2", timestamp=500.0)))
    models.accept_model("c0", model_frame(announcement(v3, version=3, run="run-2"), v3))
    v2 = b"onnx v2"

    # Execute
    reasons = [
        refusal(models.accept_assignment, signed(assignment(v2, version=2, run="run-2"))),
        refusal(models.accept_assignment, signed(assignment(v2, version=9, timestamp=400.0))),
        refusal(
            models.accept_model, "c0", model_frame(announcement(v2, version=2, run="run-2"), v2)
        ),
    ]

    # Assert
    assert reasons == [ModelRejectReason.STALE] * 3
    candidate = models.candidate()
    assert candidate is not None
    assert candidate[0].onnx_bytes == v3


def test_a_later_run_is_followed() -> None:
    # Prepare
    models = intake()
    old, new = b"run 1 model", b"run 2 model"
    models.accept_assignment(signed(assignment(old, version=7, timestamp=100.0)))

    # Execute
    followed = models.accept_assignment(
        signed(assignment(new, version=1, run="run-2", timestamp=200.0))
    )
    repeated = models.accept_assignment(
        signed(assignment(new, version=1, run="run-2", timestamp=200.0))
    )

    # Assert
    assert followed is not None
    assert followed.run_id == "run-2"
    assert repeated is None


def test_a_frame_newer_than_the_assignment_waits_for_its_assignment() -> None:
    # Prepare
    models = intake()
    v1, v2 = b"onnx v1", b"onnx v2"
    models.accept_assignment(signed(assignment(v1)))

    # Execute
    models.accept_model("c0", model_frame(announcement(v2, version=2), v2))
    before = models.candidate()
    models.accept_assignment(signed(assignment(v2, version=2)))
    after = models.candidate()

    # Assert
    assert before is None
    assert after is not None
    assert after[0].onnx_bytes == v2


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"[" * 400_000, ModelRejectReason.MALFORMED),
        (b'{"kind": "signed"' + b" " * (2 << 20) + b"}", ModelRejectReason.OVERSIZED),
        (json.dumps({"kind": "signed", "schema_version": 5}).encode(), ModelRejectReason.SCHEMA),
        (b"\xff\xfe", ModelRejectReason.MALFORMED),
    ],
)
def test_unreadable_assignments_are_refused_with_the_codecs_reason(
    payload: bytes, reason: ModelRejectReason
) -> None:
    assert refusal(intake().accept_assignment, payload) is reason


def test_an_unreadable_model_frame_is_malformed() -> None:
    bomb = MAGIC + (400_000).to_bytes(4, "big") + b"[" * 400_000

    assert refusal(intake().accept_model, "c0", bomb) is ModelRejectReason.MALFORMED
