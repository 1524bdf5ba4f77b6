"""Which model serves each agent, the clusters that makes, and publishing their models.

The strategy names the models that may serve an agent (``predict_models``); an agent gets
the one it was last evaluated with while that is still a candidate (IFCA's choice), else
the strategy's own answer (``model_key_for``: IFCA's latest choice, the cluster a newcomer
was placed on) when it is a candidate, and the first candidate otherwise.
Agents served by the same model form a cluster (:func:`~coordinator.adapters.publisher.cluster_id`):
:class:`ModelServing` writes the clusters and their test accuracy to the run summary and the
metrics — each the agents' self-reported accuracies averaged with the highest and lowest
dropped (:func:`~faultfleet.scoring.trimmed_client_accuracy`), so that one agent cannot
carry a figure — and hands the models to :class:`~coordinator.runtime.promotion.ModelPromotion`,
which registers them as new versions, gates them and publishes those that pass.
"""

from __future__ import annotations

import logging
import math

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.model_registry import RegistryError
from coordinator.adapters.mqtt_fleet import MqttFleet
from coordinator.adapters.publisher import cluster_id
from coordinator.engine.rounds import EvaluationReport, RoundEngine
from coordinator.runtime.promotion import ModelPromotion
from coordinator.runtime.run_summary import RunSummary
from faultfleet.scoring import trimmed_client_accuracy
from faultfleet.tasks import Split
from faultfleet.wire.campaign_messages import MAX_RECENT_PROMOTIONS

logger = logging.getLogger(__name__)


class ModelServing:
    """The models that serve the agents of a run, between its rounds.

    Parameters
    ----------
    engine : RoundEngine
    fleet : MqttFleet
        Evaluations ask the federation's agents that are online.
    promotion : ModelPromotion
    summary : RunSummary
        Updated in place: accuracies, clusters and the model version.
    metrics : CoordinatorMetrics
    """

    def __init__(
        self,
        engine: RoundEngine,
        fleet: MqttFleet,
        promotion: ModelPromotion,
        summary: RunSummary,
        metrics: CoordinatorMetrics,
    ) -> None:
        self.engine = engine
        self.fleet = fleet
        self.promotion = promotion
        self.summary = summary
        self.metrics = metrics
        self._chosen_keys: dict[str, str] = {}

    def serving(self) -> dict[str, str]:
        """Agent → model key that serves it (IFCA: the candidate it chose when evaluated).

        An agent whose model was never trained (a FAACL newcomer) is left out: it keeps
        the model it was placed on (:mod:`coordinator.runtime.newcomers`) until then.
        """
        strategy = self.engine.strategy
        serving: dict[str, str] = {}
        for agent in self.summary.agents:
            if not strategy.model_ready(agent):
                continue
            candidates = strategy.predict_models(agent)
            chosen = self._chosen_keys.get(agent, strategy.model_key_for(agent))
            serving[agent] = chosen if chosen in candidates else candidates[0]
        return serving

    def evaluate(self) -> None:
        """Evaluate on the online agents' test splits; remember every agent's choice.

        An agent that is served no model yet (see :meth:`serving`) is not scored either.
        """
        ready = [a for a in self.fleet.online_clients() if self.engine.strategy.model_ready(a)]
        report: EvaluationReport = self.engine.evaluate(Split.TEST, ready)
        self._chosen_keys = {r.client_id: r.model_key for r in report.results}
        self.summary.accuracy_by_agent = report.accuracy_by_client()
        accuracies = list(self.summary.accuracy_by_agent.values())
        self.summary.accuracy = trimmed_client_accuracy(accuracies) if accuracies else None

    def update_clusters(self) -> None:
        """The clusters and their mean accuracy, into the summary and the metrics."""
        clusters: dict[str, list[str]] = {}
        for agent, key in sorted(self.serving().items()):
            clusters.setdefault(cluster_id(key), []).append(agent)
        self.summary.clusters = clusters
        accuracy = self.summary.accuracy_by_agent
        by_cluster = {}
        for cid, members in clusters.items():
            known = [accuracy[a] for a in members if a in accuracy]
            if known:
                by_cluster[cid] = trimmed_client_accuracy(known)
        self.summary.accuracy_by_cluster = by_cluster
        self.metrics.set_clusters({cid: len(m) for cid, m in clusters.items()})
        self.metrics.set_cluster_accuracy(by_cluster)

    def publish(self, server_round: int, train_loss: float | None = None) -> None:
        """Register the serving models as the next version; publish those the gate passes."""
        loss = train_loss if train_loss is not None and math.isfinite(train_loss) else None
        try:
            version = self.promotion.next_version(self.summary.model_version)
            self.promotion.publish(
                version,
                server_round,
                self.engine.strategy.models,
                self.serving(),
                train_loss=loss,
                test_accuracy=self.summary.accuracy_by_cluster,
            )
        except RegistryError as error:
            logger.error(
                "round %d: no model published: %s (or `faultfleet models rollback` the "
                "cluster to a readable version)",
                server_round,
                error,
            )
            return
        finally:
            self._remember()
        self.summary.model_version = version

    def apply_requests(self) -> None:
        """Publish the operators' pending pins and rollbacks (``faultfleet models``)."""
        try:
            version = self.promotion.apply_requests(self.summary.model_version)
        except RegistryError as error:
            logger.error("pins and rollbacks not applied: %s", error)
            return
        finally:
            self._remember()
        if version is not None:
            self.summary.model_version = version

    def _remember(self) -> None:
        """The promotion's last decisions into the summary's recent promotions."""
        notes = [note.model_dump(mode="json") for note in self.promotion.decisions]
        if notes:
            recent = [*self.summary.recent_promotions, *notes]
            self.summary.recent_promotions = recent[-MAX_RECENT_PROMOTIONS:]
        self.promotion.decisions = []
