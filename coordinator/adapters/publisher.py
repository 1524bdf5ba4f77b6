"""Per-cluster ONNX models and cluster assignments, published retained over MQTT.

Each publication exports every cluster model that serves at least one agent, checks ONNX
Runtime against torch on probe windows (max abs difference ≤ 1e-5, see
:mod:`coordinator.adapters.onnx_export`) and only then publishes the frame — a signed
:class:`~faultfleet.wire.messages.ModelAnnouncement` header with version, SHA-256 and size
plus the ONNX bytes — retained on ``clusters/{cluster}/model``. Then every agent's retained
assignment, signed as well, names its cluster, the model version and digest
(:mod:`faultfleet.wire.signing`). Clusters that no longer exist get their retained model
cleared, so a new subscriber never receives a stale model.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from coordinator.adapters.mqtt_answers import DISPATCH_BACKLOG_BYTES
from coordinator.adapters.onnx_export import export_weights
from faultfleet.types import FloatArray
from faultfleet.wire.codec import encode_frame
from faultfleet.wire.messages import ClusterAssignment, ModelAnnouncement, ModelSpec
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.signing import SigningKey
from faultfleet.wire.topics import Topics

logger = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")

BACKLOG_WAIT_S = 30.0
"""Longest wait for the broker to take earlier messages before a model is announced,
seconds; the model goes out after it in any case (paho keeps it until the broker takes it).
"""


def cluster_id(model_key: str) -> str:
    """A topic-safe cluster id for a strategy's model key (``cluster-3`` stays ``cluster-3``).

    A key that had to be changed (characters replaced, or cut to 64) gets a short hash of
    the original appended, so two different keys never share a topic.
    """
    safe = _UNSAFE.sub("_", model_key)
    if safe == model_key and 0 < len(safe) <= 64:
        return safe
    digest = hashlib.sha256(model_key.encode("utf-8")).hexdigest()[:8]
    return f"{safe[:55]}-{digest}"


@dataclass(frozen=True)
class Publication:
    """What one publication sent."""

    version: int
    clusters: dict[str, list[str]]
    """Cluster id → its agents."""
    bytes_sent: int
    max_abs_diff: float
    """Worst ONNX Runtime vs torch difference over the exported models."""


class ModelPublisher:
    """Exports and publishes cluster models; remembers what it published.

    Parameters
    ----------
    connection : MqttConnection
    topics : Topics
    model : ModelSpec
    class_names : tuple of str
    run_id : str
    signer : SigningKey
        Signs every model announcement and assignment.
    clock : callable
        Unix time, seconds.
    max_backlog_bytes : int
        Before announcing a model, wait (at most :data:`BACKLOG_WAIT_S`) until at most this
        many bytes published on the connection wait for the broker's acknowledgement, so
        that a publication of many clusters' models holds about this much plus one model
        in paho, not every model at once.
    """

    def __init__(
        self,
        connection: MqttConnection,
        topics: Topics,
        model: ModelSpec,
        class_names: tuple[str, ...],
        run_id: str,
        signer: SigningKey,
        clock: Callable[[], float] = time.time,
        max_backlog_bytes: int = DISPATCH_BACKLOG_BYTES,
    ) -> None:
        self.connection = connection
        self.max_backlog_bytes = max_backlog_bytes
        self.signer = signer
        self.topics = topics
        self.model = model
        self.class_names = class_names
        self.run_id = run_id
        self.clock = clock
        self.published_clusters: set[str] = set()

    def publish(
        self,
        version: int,
        server_round: int,
        models: Mapping[str, FloatArray],
        serving: Mapping[str, str],
    ) -> Publication:
        """Export and publish the models of ``serving`` (agent → model key) as ``version``.

        Every cluster is announced and every agent assigned; clusters published before and
        serving nobody now are cleared.

        Raises
        ------
        coordinator.adapters.onnx_export.OnnxVerificationError
            When ONNX Runtime disagrees with torch; nothing of this version is published.
        """
        members: dict[str, list[str]] = {}
        for agent, key in sorted(serving.items()):
            members.setdefault(key, []).append(agent)
        exported = {
            key: export_weights(
                models[key], self.model.name, self.model.sample_shape, self.model.n_classes
            )
            for key in members
        }
        sent = 0
        for key, export in exported.items():
            sent += self.announce(
                cluster_id(key),
                version,
                server_round,
                export.onnx_bytes,
                export.sha256,
                members=len(members[key]),
                max_abs_diff=export.max_abs_diff,
            )
        for agent, key in sorted(serving.items()):
            sent += self.assign(agent, cluster_id(key), version, exported[key].sha256, server_round)
        sent += self.clear_stale({cluster_id(key) for key in members})
        worst = max((e.max_abs_diff for e in exported.values()), default=0.0)
        logger.info(
            "published model version %d: %d cluster(s), max |ORT - torch| = %.2e",
            version,
            len(members),
            worst,
        )
        return Publication(
            version=version,
            clusters={cluster_id(k): v for k, v in members.items()},
            bytes_sent=sent,
            max_abs_diff=worst,
        )

    def announce(
        self,
        cid: str,
        version: int,
        server_round: int,
        onnx_bytes: bytes,
        sha256: str,
        *,
        members: int,
        max_abs_diff: float,
    ) -> int:
        """Publish one cluster's signed model frame, retained; returns the bytes sent."""
        header = ModelAnnouncement(
            cluster_id=cid,
            version=version,
            sha256=sha256,
            size_bytes=len(onnx_bytes),
            run_id=self.run_id,
            server_round=server_round,
            model=self.model,
            class_names=self.class_names,
            members=members,
            max_abs_diff=max_abs_diff,
            created_at=self.clock(),
        )
        payload = encode_frame(self.signer.sign(header), onnx_bytes)
        self._wait_for_broker(cid)
        self.published_clusters.add(cid)
        return self.connection.publish(self.topics.cluster_model(cid), payload, retain=True)

    def _wait_for_broker(self, cid: str) -> None:
        """Wait until the broker has taken most of what was published before (at most
        :data:`BACKLOG_WAIT_S`); not while disconnected, when nothing is taken."""
        if not self.connection.connected:
            return
        if not self.connection.wait_backlog(self.max_backlog_bytes, BACKLOG_WAIT_S):
            logger.warning(
                "the broker has not taken the messages published before cluster %s's model "
                "within %g s; publishing the model anyway (it waits in the client)",
                cid,
                BACKLOG_WAIT_S,
            )

    def assign(self, agent: str, cid: str, version: int, sha256: str, server_round: int) -> int:
        """Publish one agent's signed assignment, retained; returns the bytes sent."""
        assignment = ClusterAssignment(
            agent_id=agent,
            cluster_id=cid,
            model_version=version,
            sha256=sha256,
            run_id=self.run_id,
            server_round=server_round,
            timestamp=self.clock(),
        )
        return self.connection.publish(
            self.topics.assignment(agent),
            self.signer.sign(assignment).model_dump_json(),
            retain=True,
        )

    def clear_stale(self, current: set[str]) -> int:
        """Clear the retained models of published clusters not in ``current``."""
        sent = 0
        for stale in sorted(self.published_clusters - current):
            sent += self.connection.publish(self.topics.cluster_model(stale), b"", retain=True)
        self.published_clusters &= current
        return sent
