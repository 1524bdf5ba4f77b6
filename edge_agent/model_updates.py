"""An agent's model delivery: follow the signed assignment, load the model it names, keep it.

:class:`ModelUpdates` is the part of :class:`~edge_agent.service.AgentService` that handles
the retained ``agents/{id}/assignment`` and ``clusters/{cluster}/model`` messages:

* on the network thread, every assignment and model frame goes through
  :class:`~edge_agent.model_intake.ModelIntake` (signature, agent, cluster, digest,
  freshness); what it refuses is counted in ``faultfleet_models_rejected_total{reason}`` and
  logged once per kind, and never displaces what was accepted;
* a loader thread (:meth:`ModelUpdates.run`) loads the frame the assignment names (ONNX
  Runtime session, warm-up), hot-swaps it, and saves it with its signed assignment in
  ``state_dir/model``, so a restarted agent diagnoses at once and still refuses a replayed
  older assignment.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from edge_agent.inference import LoadedModel, ModelIntegrityError, OnnxDiagnoser
from edge_agent.metrics import AgentMetrics
from edge_agent.model_intake import ModelIntake, ModelRefusedError, ModelRejectReason
from edge_agent.model_store import ModelStore
from faultfleet.files import atomic_write
from faultfleet.wire.messages import ClusterAssignment, ModelAnnouncement
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.topics import Topics

logger = logging.getLogger(__name__)

ASSIGNMENT_FILE = "assignment.json"


class ModelUpdates:
    """Follows one agent's verified assignment and keeps its diagnoser on the named model.

    Parameters
    ----------
    intake : ModelIntake
    diagnoser : OnnxDiagnoser
    store : ModelStore
        The saved model; the signed assignment is saved beside it.
    metrics : AgentMetrics
    connection : MqttConnection
        Model topics are routed on it as clusters are assigned.
    topics : Topics
    on_loaded : callable
        Called on the loader thread with the announcement of every model swapped in.
    """

    def __init__(
        self,
        intake: ModelIntake,
        diagnoser: OnnxDiagnoser,
        store: ModelStore,
        metrics: AgentMetrics,
        connection: MqttConnection,
        topics: Topics,
        on_loaded: Callable[[ModelAnnouncement, LoadedModel], None],
    ) -> None:
        self.agent_id = intake.agent_id
        self.intake = intake
        self.diagnoser = diagnoser
        self.store = store
        self.metrics = metrics
        self.connection = connection
        self.topics = topics
        self.on_loaded = on_loaded
        self.assignment_path = store.directory / ASSIGNMENT_FILE
        self._model_topics: dict[str, str] = {}
        """Model topic → cluster id of the cluster this agent follows (one at most)."""
        self._refusals_logged: set[tuple[str, ModelRejectReason]] = set()
        self._changed = threading.Event()
        self._lock = threading.Lock()

    def restore(self) -> LoadedModel | None:
        """Load the saved model and follow the saved assignment; the model, or None."""
        self._restore_assignment()
        try:
            saved = self.store.load()
            if saved is None:
                return None
            onnx_bytes, model = saved
            self.diagnoser.load(
                onnx_bytes,
                sha256=model.sha256,
                version=model.version,
                cluster_id=model.cluster_id,
                class_names=model.class_names,
            )
        except ModelIntegrityError as error:
            logger.warning(
                "%s: discarding the saved model (%s); waiting for the cluster's model",
                self.agent_id,
                error,
            )
            self.store.clear()
            return None
        return model

    def _restore_assignment(self) -> None:
        """Follow the saved assignment, verified again (the trusted keys may have changed)."""
        try:
            payload = self.assignment_path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as error:
            logger.warning("%s: cannot read %s: %s", self.agent_id, self.assignment_path, error)
            return
        try:
            assignment = self.intake.accept_assignment(payload)
        except ModelRefusedError as refusal:
            logger.warning(
                "%s: discarding the saved assignment (%s: %s)",
                self.agent_id,
                refusal.reason,
                refusal,
            )
            self.assignment_path.unlink(missing_ok=True)
            return
        if assignment is not None:
            self._follow(assignment)

    # -- network thread --------------------------------------------------------------------

    def on_assignment(self, topic: str, payload: bytes) -> None:
        """Handler of the retained ``agents/{id}/assignment``."""
        if not payload:
            return
        try:
            assignment = self.intake.accept_assignment(payload)
        except ModelRefusedError as refusal:
            self.refused("assignment", topic, refusal)
            return
        if assignment is not None:
            logger.info(
                "%s: assigned to cluster %s (model version %d)",
                self.agent_id,
                assignment.cluster_id,
                assignment.model_version,
            )
            self._follow(assignment)

    def _follow(self, assignment: ClusterAssignment) -> None:
        """Follow the assigned cluster's model topic only, and wake the loader.

        The topics and kept frames of clusters followed before are dropped: over years of
        campaigns an agent passes through many cluster ids, and every frame kept is a
        model's size (17.6 MB with the paper model) while the broker would go on sending
        each of their new versions.
        """
        model_topic = self.topics.cluster_model(assignment.cluster_id)
        with self._lock:
            left = {t: c for t, c in self._model_topics.items() if t != model_topic}
            new_route = model_topic not in self._model_topics
            self._model_topics = {model_topic: assignment.cluster_id}
        for topic, cluster_id in left.items():
            self.connection.unroute(topic, self.on_model)
            self.intake.forget(cluster_id)
        if new_route:
            self.connection.route(model_topic, self.on_model)
        self._changed.set()

    def on_model(self, topic: str, payload: bytes) -> None:
        """Handler of the followed ``clusters/{cluster}/model``: keep the frame if it verifies.

        An empty payload (the coordinator cleared a cluster it no longer serves) drops the
        kept frame.
        """
        with self._lock:
            cluster_id = self._model_topics.get(topic)
        if cluster_id is None:  # in flight when the agent moved on
            return
        if not payload:
            self.intake.forget(cluster_id)
            return
        try:
            self.intake.accept_model(cluster_id, payload)
        except ModelRefusedError as refusal:
            self.refused("model frame", topic, refusal)
            return
        self._changed.set()

    def is_model_topic(self, topic: str) -> bool:
        """Whether ``topic`` carries the agent's assignment or a followed cluster's model."""
        with self._lock:
            return topic in self._model_topics or topic == self.topics.assignment(self.agent_id)

    def refused(self, what: str, topic: str, refusal: ModelRefusedError) -> None:
        """Count a refusal; log the first of each kind as a warning, the rest at debug level."""
        self.metrics.model_rejected(refusal.reason)
        kind = (what, refusal.reason)
        with self._lock:
            first = kind not in self._refusals_logged
            self._refusals_logged.add(kind)
        logger.log(
            logging.WARNING if first else logging.DEBUG,
            "%s: refused %s on %s (%s): %s%s",
            self.agent_id,
            what,
            topic,
            refusal.reason,
            refusal,
            "; later refusals of this kind are only counted (faultfleet_models_rejected_total)"
            if first
            else "",
        )

    # -- loader thread ---------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Loader thread: swap in the model the assignment names whenever it may have come.

        Kept off the network thread (session build, warm-up and the store's writes take a
        while) and off the task worker (a training task may run for minutes).
        """
        while not stop.is_set():
            if self._changed.wait(0.2):
                self._changed.clear()
                self.apply()

    def apply(self) -> LoadedModel | None:
        """Load the frame the assignment names unless it is active; the new model, or None."""
        candidate = self.intake.candidate()
        if candidate is None:
            return None
        frame, assignment_payload = candidate
        active = self.diagnoser.active
        header = frame.announcement
        if active is not None and (active.sha256, active.version) == (
            header.sha256,
            header.version,
        ):
            return None  # a rollback republishes old bytes as a new version: load it too
        body = frame.onnx_bytes
        try:
            loaded = self.diagnoser.load(
                body,
                sha256=header.sha256,
                version=header.version,
                cluster_id=header.cluster_id,
                class_names=header.class_names,
            )
        except ModelIntegrityError as error:
            refusal = ModelRefusedError(ModelRejectReason.UNLOADABLE, str(error))
            self.refused("model frame", self.topics.cluster_model(header.cluster_id), refusal)
            return None
        self.store.save(body, loaded)
        atomic_write(self.assignment_path, lambda handle: handle.write(assignment_payload))
        self.metrics.set_model_version(loaded.version)
        self.on_loaded(header, loaded)
        logger.info(
            "%s: now diagnosing with cluster %s model version %d",
            self.agent_id,
            loaded.cluster_id,
            loaded.version,
        )
        return loaded
