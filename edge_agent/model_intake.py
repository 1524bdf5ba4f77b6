"""Which model an agent may load: the coordinator's signed assignments and model frames.

The coordinator signs every cluster assignment and model announcement
(:mod:`faultfleet.wire.signing`). :class:`ModelIntake` keeps what verifies against the
agent's trusted keys and nothing else:

* an assignment counts when it is signed by a trusted key, names this agent, and is not
  older than the one the agent follows (same run: a lower model version; another run: an
  earlier timestamp), so a replayed assignment cannot roll the agent back;
* a model frame counts when it is signed, was published on the topic of the cluster it
  names, its body has the signed size and SHA-256, and it is not older than the frame kept
  for that cluster or than the assignment's version. One frame is kept per cluster.

The agent loads a frame only when it is exactly the one its assignment names: same run,
cluster, version and digest (:meth:`ModelIntake.candidate`). Whatever is refused raises
:class:`ModelRefusedError` with a :class:`ModelRejectReason` and changes nothing, so a forged or
broken frame — whatever version it claims — never keeps a later genuine one out.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import TypeAdapter

from faultfleet.errors import FaultfleetError
from faultfleet.wire.codec import RejectReason, WireError, load_json, parse_envelope, split_frame
from faultfleet.wire.messages import ClusterAssignment, ModelAnnouncement, SignedMessage
from faultfleet.wire.signing import SignatureError, TrustedKeys

_SIGNED = TypeAdapter(SignedMessage)
_ASSIGNMENT = TypeAdapter(ClusterAssignment)
_ANNOUNCEMENT = TypeAdapter(ModelAnnouncement)
MessageT = TypeVar("MessageT")


class ModelRejectReason(StrEnum):
    """Why an agent refused a model frame or an assignment (a metric label value)."""

    MALFORMED = "malformed"
    """Not a frame, not JSON, or nested or sized beyond the codec's limits."""
    OVERSIZED = "oversized"
    """Larger than ``broker.max_payload_bytes``."""
    SCHEMA = "schema"
    """A signed envelope or a signed message that does not validate."""
    UNSIGNED = "unsigned"
    """No signature at all (an unsigned announcement or assignment)."""
    UNKNOWN_KEY = "unknown_key"
    """Signed with a key not in ``signing.trusted_keys``."""
    BAD_SIGNATURE = "bad_signature"
    """The signature does not match: forged or altered."""
    NOT_OURS = "not_ours"
    """An assignment for another agent, or a model of another cluster than its topic's."""
    STALE = "stale"
    """Older than what the agent already follows (a replay, or a late delivery)."""
    DIGEST = "digest"
    """The model bytes differ from the signed size or SHA-256."""
    UNLOADABLE = "unloadable"
    """ONNX Runtime could not load or run the model, or its input or output do not fit."""


class ModelRefusedError(FaultfleetError, ValueError):
    """A model frame or assignment the agent does not accept; :attr:`reason` says why."""

    def __init__(self, reason: ModelRejectReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


_WIRE_REASONS = {
    RejectReason.OVERSIZED: ModelRejectReason.OVERSIZED,
    RejectReason.SCHEMA: ModelRejectReason.SCHEMA,
}


@dataclass(frozen=True)
class ModelFrame:
    """A verified model: its signed announcement and the ONNX bytes it describes."""

    announcement: ModelAnnouncement
    onnx_bytes: bytes


def _older(run: str, version: int, time: float, than: tuple[str, int, float]) -> bool:
    """Within a run a lower version is older; across runs an earlier coordinator time."""
    other_run, other_version, other_time = than
    return version < other_version if run == other_run else time < other_time


class ModelIntake:
    """The verified assignment of one agent and the verified model frames it may load.

    Parameters
    ----------
    agent_id : str
    trusted : TrustedKeys
        The coordinator keys the agent accepts.
    max_payload_bytes : int
        Larger frames are refused as oversized.

    Notes
    -----
    Thread-safe: the network thread hands messages in, the loader thread asks for the
    :meth:`candidate`.
    """

    def __init__(self, agent_id: str, trusted: TrustedKeys, *, max_payload_bytes: int) -> None:
        self.agent_id = agent_id
        self.trusted = trusted
        self.max_payload_bytes = max_payload_bytes
        self._assignment: ClusterAssignment | None = None
        self._assignment_payload = b""
        self._frames: dict[str, ModelFrame] = {}
        self._lock = threading.Lock()

    @property
    def assignment(self) -> ClusterAssignment | None:
        """The assignment the agent follows, None before the first."""
        with self._lock:
            return self._assignment

    @property
    def assignment_payload(self) -> bytes:
        """The signed message of :attr:`assignment`, as received (to save and restore)."""
        with self._lock:
            return self._assignment_payload

    def accept_assignment(self, payload: bytes) -> ClusterAssignment | None:
        """Follow the signed assignment in ``payload``; None when it is the current one.

        Raises
        ------
        ModelRefusedError
            Unsigned, not verifiable, for another agent, or older than the current one.
        """
        assignment = self._verified(payload, _ASSIGNMENT, "assignment")
        if assignment.agent_id != self.agent_id:
            raise ModelRefusedError(
                ModelRejectReason.NOT_OURS,
                f"a signed assignment for agent {assignment.agent_id!r} reached {self.agent_id}",
            )
        with self._lock:
            current = self._assignment
            if current == assignment:
                return None
            if current is not None and _older(
                assignment.run_id,
                assignment.model_version,
                assignment.timestamp,
                (current.run_id, current.model_version, current.timestamp),
            ):
                raise ModelRefusedError(
                    ModelRejectReason.STALE,
                    f"assignment to model v{assignment.model_version} of run {assignment.run_id} "
                    f"is older than the current v{current.model_version} of run "
                    f"{current.run_id}",
                )
            self._assignment = assignment
            self._assignment_payload = bytes(payload)
        return assignment

    def accept_model(self, cluster_id: str, payload: bytes) -> ModelAnnouncement:
        """Keep the signed model frame ``payload`` received on ``cluster_id``'s topic.

        Raises
        ------
        ModelRefusedError
            Unsigned, not verifiable, of another cluster, bytes that differ from the signed
            digest, or older than the frame kept or the assignment.
        """
        try:
            header, body = split_frame(payload, max_bytes=self.max_payload_bytes)
        except WireError as error:
            raise self._refusal(error, "model frame") from error
        announcement = self._verified(header, _ANNOUNCEMENT, "model frame")
        if announcement.cluster_id != cluster_id:
            raise ModelRefusedError(
                ModelRejectReason.NOT_OURS,
                f"a signed model of cluster {announcement.cluster_id!r} arrived on the topic "
                f"of cluster {cluster_id!r}",
            )
        digest = hashlib.sha256(body).hexdigest()
        if len(body) != announcement.size_bytes or digest != announcement.sha256:
            raise ModelRefusedError(
                ModelRejectReason.DIGEST,
                f"model v{announcement.version} of cluster {cluster_id}: {len(body)} bytes "
                f"with SHA-256 {digest[:12]}…, the signature names {announcement.size_bytes} "
                f"bytes with {announcement.sha256[:12]}…: altered on the way",
            )
        with self._lock:
            self._check_fresh(announcement)
            self._frames[cluster_id] = ModelFrame(announcement, body)
        return announcement

    @property
    def kept_clusters(self) -> list[str]:
        """The clusters whose model frame is kept, sorted."""
        with self._lock:
            return sorted(self._frames)

    def forget(self, cluster_id: str) -> None:
        """Drop the frame kept for ``cluster_id`` (a cluster the agent no longer follows)."""
        with self._lock:
            self._frames.pop(cluster_id, None)

    def candidate(self) -> tuple[ModelFrame, bytes] | None:
        """The kept frame the current assignment names (run, cluster, version, digest), and
        the assignment's signed message; None while there is no such frame."""
        with self._lock:
            assignment = self._assignment
            if assignment is None:
                return None
            frame = self._frames.get(assignment.cluster_id)
            payload = self._assignment_payload
        if frame is None:
            return None
        announcement = frame.announcement
        named = (
            announcement.run_id == assignment.run_id
            and announcement.version == assignment.model_version
            and announcement.sha256 == assignment.sha256
        )
        return (frame, payload) if named else None

    def _check_fresh(self, announcement: ModelAnnouncement) -> None:
        """Refuse a frame older than the kept one or than the assignment; lock held."""
        ours = (announcement.run_id, announcement.version, announcement.created_at)
        kept = self._frames.get(announcement.cluster_id)
        if kept is not None:
            old = kept.announcement
            if _older(*ours, (old.run_id, old.version, old.created_at)):
                raise ModelRefusedError(
                    ModelRejectReason.STALE,
                    f"model v{announcement.version} of cluster {announcement.cluster_id} "
                    f"(run {announcement.run_id}) is older than the kept v{old.version} "
                    f"(run {old.run_id})",
                )
        assignment = self._assignment
        if (
            assignment is not None
            and assignment.cluster_id == announcement.cluster_id
            and assignment.run_id == announcement.run_id
            and announcement.version < assignment.model_version
        ):
            raise ModelRefusedError(
                ModelRejectReason.STALE,
                f"model v{announcement.version} of cluster {announcement.cluster_id} is older "
                f"than the assigned v{assignment.model_version}",
            )

    def _verified(
        self, data: dict[str, Any] | bytes, adapter: TypeAdapter[MessageT], what: str
    ) -> MessageT:
        """The message inside a signed envelope, once its signature verified."""
        try:
            header = load_json(data, what) if isinstance(data, bytes) else data
            if header.get("kind") != "signed":
                raise ModelRefusedError(
                    ModelRejectReason.UNSIGNED,
                    f"unsigned {what} (kind {header.get('kind')!r}); only messages signed by "
                    "the coordinator are accepted",
                )
            signed = parse_envelope(_SIGNED, header)
            text = self.trusted.verify(signed)
            return parse_envelope(adapter, text)
        except WireError as error:
            raise self._refusal(error, what) from error
        except SignatureError as error:
            raise ModelRefusedError(
                ModelRejectReason(error.problem.value), f"{what}: {error}"
            ) from error

    @staticmethod
    def _refusal(error: WireError, what: str) -> ModelRefusedError:
        reason = _WIRE_REASONS.get(error.reason, ModelRejectReason.MALFORMED)
        return ModelRefusedError(reason, f"{what}: {error}")
