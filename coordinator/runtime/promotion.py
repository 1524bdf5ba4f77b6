"""Registering new cluster model versions, gating them, and publishing the ones that pass.

:class:`ModelPromotion` runs at every publication of the round loop. The gate
(:func:`coordinator.engine.promotion.decide`) compares each cluster's new model with the
cluster's serving version, both evaluated by the cluster's online agents on their
validation split through the ordinary evaluate task. Then, one cluster at a time, the new
model is exported to ONNX and kept in the registry
(:class:`~coordinator.adapters.model_registry.ModelRegistry`) as a new version with the
gate's figures, and published if it was promoted, so the coordinator holds one cluster's
ONNX model at a time however many clusters there are. A rejected version is kept with its
figures, and a pinned cluster keeps its pinned version. Every agent is then assigned its
cluster's serving version (nothing is sent to an agent that already has it).

Operators' pins and rollbacks (``faultfleet models``) are requests in the registry that
:meth:`ModelPromotion.apply_requests` publishes as new versions that restore the chosen
one (agents refuse a version number older than the one they hold).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.model_registry import (
    GateRecord,
    ModelRecord,
    ModelRegistry,
    RegistryError,
    ServingEntry,
    ServingTable,
)
from coordinator.adapters.mqtt_fleet import MqttFleet
from coordinator.adapters.onnx_export import OnnxVerificationError, export_weights
from coordinator.adapters.publisher import ModelPublisher, cluster_id
from coordinator.engine.promotion import Decision, GateFigures, decide
from faultfleet.tasks import EvaluateResult, EvaluateTask, Split
from faultfleet.types import FloatArray
from faultfleet.wire.campaign_messages import PromotionNote

logger = logging.getLogger(__name__)


class ModelPromotion:
    """The registry, the gate and the publisher, for one run.

    Parameters
    ----------
    registry : ModelRegistry
    publisher : ModelPublisher
    fleet : MqttFleet
        Its online members evaluate candidates and serving versions.
    metrics : CoordinatorMetrics
    margin : float
        The gate's margin (ratio from 0 to 1).
    keep_versions : int
        Versions kept per cluster (serving and restored-from versions always are).
    clock : callable
        Unix time, seconds.

    Attributes
    ----------
    campaign_id : str or None
        The running campaign: recorded in every version it makes.
    decisions : list of PromotionNote
        The decisions of the last :meth:`publish` or :meth:`apply_requests`.
    """

    def __init__(
        self,
        registry: ModelRegistry,
        publisher: ModelPublisher,
        fleet: MqttFleet,
        metrics: CoordinatorMetrics,
        *,
        margin: float,
        keep_versions: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry = registry
        self.publisher = publisher
        self.fleet = fleet
        self.metrics = metrics
        self.margin = margin
        self.keep_versions = keep_versions
        self.clock = clock
        self.campaign_id: str | None = None
        self.decisions: list[PromotionNote] = []

    def next_version(self, at_least: int) -> int:
        """A version number above every registered one and above ``at_least``."""
        return max(at_least, self.registry.latest_version()) + 1

    def publish(
        self,
        version: int,
        server_round: int,
        models: Mapping[str, FloatArray],
        serving: Mapping[str, str],
        *,
        train_loss: float | None = None,
        test_accuracy: Mapping[str, float] | None = None,
    ) -> int:
        """Register every serving model as ``version``, gate it, publish what passes.

        Parameters
        ----------
        models : mapping of str to array of shape (n_params,)
            The strategy's models by key.
        serving : mapping of str to str
            Agent → the model key that should serve it.
        test_accuracy : mapping of str to float, optional
            Cluster id → mean test accuracy of its agents (recorded).

        Returns
        -------
        int
            Bytes published.
        """
        self.decisions = []
        members: dict[str, list[str]] = {}
        for agent, key in sorted(serving.items()):
            members.setdefault(key, []).append(agent)
        table = self.registry.serving()
        keys = {cluster_id(k): k for k in members}
        by_cluster = {cluster_id(k): m for k, m in members.items()}
        figures = self._gate(server_round, table, by_cluster, models, keys)
        clusters = dict(table.clusters)
        sent = 0
        spec = self.publisher.model
        unpublished: set[str] = set()  # new model failed the ONNX check: nothing changes
        for cid, key in keys.items():
            # One cluster's ONNX model at a time: exported, kept, announced, let go.
            try:
                exported = export_weights(models[key], spec.name, spec.sample_shape, spec.n_classes)
            except OnnxVerificationError as error:
                serving_now = table.clusters.get(cid)
                kept = f"keeps v{serving_now.version}" if serving_now else "has no model yet"
                logger.error(
                    "cluster %s v%d not published: %s; the cluster %s", cid, version, error, kept
                )
                unpublished.add(cid)
                continue
            entry = table.clusters.get(cid)
            gate = figures[cid]
            record = ModelRecord(
                cluster_id=cid,
                version=version,
                sha256=exported.sha256,
                size_bytes=len(exported.onnx_bytes),
                parent_version=entry.version if entry else None,
                run_id=self.publisher.run_id,
                campaign_id=self.campaign_id,
                server_round=server_round,
                created_at=self.clock(),
                members=tuple(members[key]),
                train_loss=train_loss,
                test_accuracy=(test_accuracy or {}).get(cid),
                max_abs_diff=exported.max_abs_diff,
                gate=GateRecord(**{**asdict(gate), "decision": gate.decision.value}),
            )
            self.registry.add(record, exported.onnx_bytes, models[key])
            self.decisions.append(promotion_note(record))
            self.metrics.count_promotion(gate.decision)
            logger.info("cluster %s v%d %s: %s", cid, version, gate.decision.value, gate.reason)
            if gate.decision is Decision.PROMOTED:
                sent += self._announce(record, exported.onnx_bytes)
                clusters[cid] = ServingEntry(version=version)
        agents = dict(table.agents)
        for agent, key in sorted(serving.items()):
            if cluster_id(key) not in unpublished:  # else it keeps what it was assigned
                agents[agent] = cluster_id(key)
        sent += self._settle(ServingTable(clusters=clusters, agents=agents), table)
        self.metrics.payload_sent_bytes.inc(sent)
        return sent

    def _gate(
        self,
        server_round: int,
        table: ServingTable,
        members: Mapping[str, Sequence[str]],
        models: Mapping[str, FloatArray],
        keys: Mapping[str, str],
    ) -> dict[str, GateFigures]:
        """The gate's figures for every cluster's candidate (cluster id → model key in
        ``keys``; two evaluate calls in all)."""
        figures: dict[str, GateFigures] = {}
        online = set(self.fleet.online_clients())
        candidate_tasks: list[EvaluateTask] = []
        serving_tasks: list[EvaluateTask] = []
        compared: dict[str, int] = {}
        for cid, key in keys.items():
            entry = table.clusters.get(cid)
            if entry is not None and entry.pinned:
                reason = f"the cluster is pinned to v{entry.version}"
                figures[cid] = GateFigures(
                    Decision.PINNED, reason, self.margin, serving_version=entry.version
                )
                continue
            if entry is None:
                figures[cid] = decide([], None, margin=self.margin)
                continue
            compared[cid] = entry.version
            weights = self.registry.weights(cid, entry.version)
            for agent in members[cid]:
                if agent in online:
                    candidate_tasks.append(EvaluateTask(agent, {key: models[key]}, Split.VAL))
                    serving_key = f"{cid}@v{entry.version}"
                    serving_tasks.append(EvaluateTask(agent, {serving_key: weights}, Split.VAL))
        candidate = self._evaluate(server_round, candidate_tasks)
        incumbent = self._evaluate(server_round, serving_tasks)
        for cid, serving_version in compared.items():
            ids = set(members[cid])
            figures[cid] = decide(
                [r for r in candidate if r.client_id in ids],
                [r for r in incumbent if r.client_id in ids],
                margin=self.margin,
                serving_version=serving_version,
            )
        return figures

    def _evaluate(self, server_round: int, tasks: list[EvaluateTask]) -> tuple[EvaluateResult, ...]:
        if not tasks:
            return ()
        outcome = self.fleet.evaluate(server_round, tasks)
        for failure in outcome.failures:
            logger.warning("gate evaluation by %s failed: %s", failure.client_id, failure.reason)
        return outcome.results

    def _announce(self, record: ModelRecord, onnx_bytes: bytes) -> int:
        self.metrics.models_published.inc()
        return self.publisher.announce(
            record.cluster_id,
            record.version,
            record.server_round,
            onnx_bytes,
            record.sha256,
            members=len(record.members),
            max_abs_diff=record.max_abs_diff,
        )

    def _settle(self, table: ServingTable, before: ServingTable) -> int:
        """Assign every agent its cluster's serving version; clear clusters serving nobody."""
        sent = 0
        agents = {a: c for a, c in table.agents.items() if c in table.clusters}
        for agent, cid in sorted(agents.items()):
            entry = table.clusters[cid]
            old = before.clusters.get(before.agents.get(agent, ""))
            if before.agents.get(agent) == cid and old is not None and old == entry:
                continue
            record = self.registry.record(cid, entry.version)
            sent += self.publisher.assign(
                agent, cid, entry.version, record.sha256, record.server_round
            )
        used = set(agents.values())
        clusters = {c: e for c, e in table.clusters.items() if c in used or e.pinned}
        sent += self.publisher.clear_stale(used)
        self.registry.set_serving(ServingTable(clusters=clusters, agents=agents))
        for cid in self.registry.clusters():
            self.registry.prune(cid, self.keep_versions)
        self.metrics.set_serving_versions({c: e.version for c, e in clusters.items()})
        return sent

    def assign(self, agents: Mapping[str, str]) -> int:
        """Serve ``agents`` (agent → cluster id) their cluster's serving version at once: a
        signed assignment to each whose cluster or version changed; the bytes sent.

        Raises
        ------
        RegistryError
            A cluster has no serving version.
        """
        table = self.registry.serving()
        unknown = sorted(set(agents.values()) - set(table.clusters))
        if unknown:
            raise RegistryError(f"no version serves cluster(s) {', '.join(unknown)}")
        wanted = ServingTable(clusters=table.clusters, agents={**table.agents, **agents})
        sent = self._settle(wanted, table)
        self.metrics.payload_sent_bytes.inc(sent)
        return sent

    def report_serving(self) -> None:
        """Set the serving-version metric from the registry (at start, after a restart)."""
        try:
            table = self.registry.serving()
        except RegistryError as error:
            logger.error("%s", error)
            return
        self.metrics.set_serving_versions({c: e.version for c, e in table.clusters.items()})

    def apply_requests(self, at_least: int) -> int | None:
        """Publish pending pins and rollbacks; the last version used, None if none was.

        A request that cannot be applied (unknown version, corrupt record) is logged with
        the reason and dropped; the serving versions stay as they were.
        """
        self.decisions = []
        last: int | None = None
        for cid, request in self.registry.pending().items():
            try:
                last = self._apply(cid, request.action, request.version, at_least) or last
            except RegistryError as error:
                logger.error("cannot %s cluster %s: %s", request.action, cid, error)
            self.registry.done(cid)
        return last

    def _apply(self, cid: str, action: str, version: int | None, at_least: int) -> int | None:
        table = self.registry.serving()
        entry = table.clusters.get(cid)
        if entry is None:
            raise RegistryError(f"no version serves cluster {cid}; nothing to {action}")
        clusters = dict(table.clusters)
        target = entry.version if version is None else version
        if action == "unpin" or (action == "pin" and target == entry.version):
            clusters[cid] = ServingEntry(version=entry.version, pinned=action == "pin")
            self.registry.set_serving(ServingTable(clusters=clusters, agents=table.agents))
            logger.info("cluster %s v%d %sned", cid, entry.version, action)
            return None
        old = self.registry.record(cid, target)
        onnx_bytes = self.registry.onnx_bytes(cid, target)
        new = self.next_version(at_least)
        record = old.model_copy(
            update={
                "version": new,
                "parent_version": entry.version,
                "created_at": self.clock(),
                "origin": "pin" if action == "pin" else "rollback",
                "restores": old.restores or target,
                "gate": GateRecord(
                    decision="rollback", reason=f"{action} to v{target}", margin=self.margin
                ),
            }
        )
        self.registry.add(record, onnx_bytes, self.registry.weights(cid, target))
        self.decisions.append(promotion_note(record))
        self.metrics.count_promotion(Decision.ROLLBACK)
        sent = self._announce(record, onnx_bytes)
        clusters[cid] = ServingEntry(version=new, pinned=action == "pin")
        sent += self._settle(ServingTable(clusters=clusters, agents=table.agents), table)
        self.metrics.payload_sent_bytes.inc(sent)
        logger.info("cluster %s: v%d publishes v%d again (%s)", cid, new, target, action)
        return new


def promotion_note(record: ModelRecord) -> PromotionNote:
    """The decision about ``record`` as the coordinator's status reports it."""
    gate = record.gate
    return PromotionNote(
        cluster_id=record.cluster_id,
        version=record.version,
        decision=gate.decision,
        candidate_accuracy=gate.candidate_accuracy,
        serving_accuracy=gate.serving_accuracy,
        campaign_id=record.campaign_id,
        server_round=record.server_round,
        created_at=record.created_at,
    )
