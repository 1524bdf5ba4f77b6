"""The edge-agent service: trains when asked, diagnoses every live window with ONNX Runtime.

:class:`AgentService` runs four activities around one MQTT connection:

* the network thread (paho) routes task frames to a queue, the retained cluster assignment
  to :meth:`_on_assignment` and the assigned cluster's retained model to :meth:`_on_model`;
  both must carry the coordinator's signature (:mod:`edge_agent.model_intake`);
* a loader thread loads the model the verified assignment names (ONNX Runtime session,
  warm-up) and hot-swaps it (:class:`~edge_agent.inference.OnnxDiagnoser`);
* a worker thread answers tasks one at a time (:class:`~edge_agent.task_runner.TaskRunner`);
* a diagnosis thread takes windows from the source, runs the active ONNX model on each and
  publishes and logs the diagnosis. Windows that arrive before the first model wait in a
  bounded backlog; a model swap never drops a window.

The agent announces itself with a retained ``online`` status and leaves a retained
``offline`` last will; the connection reconnects with backoff on its own.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable

from edge_agent.batching import select_device
from edge_agent.diagnosis_log import DiagnosisLog
from edge_agent.inference import LoadedModel, ModelStore, OnnxDiagnoser
from edge_agent.metrics import AgentMetrics
from edge_agent.model_intake import ModelIntake, ModelRejectReason
from edge_agent.model_updates import ModelUpdates
from edge_agent.settings import AgentSettings
from edge_agent.sources import Window, WindowSource
from edge_agent.task_runner import TaskRunner
from faultfleet import __version__
from faultfleet.wire.codec import RejectReason, WireError
from faultfleet.wire.messages import AgentStatus, ClusterAssignment, Diagnosis, ModelAnnouncement
from faultfleet.wire.mqtt import MqttConnection, Will
from faultfleet.wire.signing import TrustedKeys
from faultfleet.wire.topics import Topics

logger = logging.getLogger(__name__)


class AgentService:
    """One edge agent.

    Parameters
    ----------
    settings : AgentSettings
    source : WindowSource
        Training data and live windows of the machine.
    metrics : AgentMetrics, optional
        Shared by the agents of one process; a fresh registry by default.
    compute_lock : threading.Lock, optional
        Shared by agents of one host so they train one at a time.
    clock : callable
        Unix time, seconds.
    """

    def __init__(
        self,
        settings: AgentSettings,
        source: WindowSource,
        *,
        metrics: AgentMetrics | None = None,
        compute_lock: threading.Lock | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.agent_id = settings.agent_id
        self.source = source
        self.metrics = metrics or AgentMetrics(class_names=source.class_names)
        self.clock = clock
        self.topics = Topics(settings.broker.topic_root)
        self.device = select_device(settings.device)
        self.data = source.training_data()
        self.runner = TaskRunner(
            self.agent_id,
            self.data,
            self.device,
            max_payload_bytes=settings.broker.max_payload_bytes,
            compute_lock=compute_lock,
            clock=clock,
        )
        self.diagnoser = OnnxDiagnoser(source.sample_shape)
        self.store = ModelStore(settings.state_dir / "model")
        self.intake = ModelIntake(
            self.agent_id,
            TrustedKeys(settings.signing.trusted_keys),
            max_payload_bytes=settings.broker.max_payload_bytes,
        )
        self.log = DiagnosisLog(
            settings.state_dir / "diagnoses.jsonl",
            max_bytes=settings.diagnosis.log_max_bytes,
            backups=settings.diagnosis.log_backups,
        )
        self.class_names: tuple[str, ...] = source.class_names
        self.tasks: queue.Queue[bytes] = queue.Queue()
        self.windows_diagnosed = 0
        self.window_errors = 0
        self._lock = threading.Lock()
        offline = AgentStatus(agent_id=self.agent_id, state="offline").model_dump_json()
        self.connection = MqttConnection(
            client_id=f"faultfleet-agent-{self.agent_id}",
            settings=settings.broker.for_agent(self.agent_id),
            will=Will(self.topics.agent_status(self.agent_id), offline.encode()),
            on_connection_change=self._connection_changed,
            on_oversized=self._on_oversized,
        )
        self.models = ModelUpdates(
            self.intake,
            self.diagnoser,
            self.store,
            self.metrics,
            self.connection,
            self.topics,
            on_loaded=self._model_loaded,
        )
        self.connection.route(self.topics.tasks(self.agent_id), self._on_task)
        self.connection.route(self.topics.assignment(self.agent_id), self.models.on_assignment)

    # -- lifecycle -------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set, then leave a clean ``offline`` status."""
        self._restore_model()
        self.connection.start()
        threads = [
            threading.Thread(target=self._work, args=(stop,), name=f"{self.agent_id}-tasks"),
            threading.Thread(
                target=self._diagnose, args=(stop,), name=f"{self.agent_id}-diagnosis"
            ),
            threading.Thread(target=self.models.run, args=(stop,), name=f"{self.agent_id}-models"),
        ]
        for thread in threads:
            thread.start()
        try:
            stop.wait()
        finally:
            for thread in threads:
                thread.join(timeout=30)
            self.connection.stop(
                final=[(self.topics.agent_status(self.agent_id), self._status("offline"), True)]
            )
            self.log.close()

    @property
    def assignment(self) -> ClusterAssignment | None:
        """The verified assignment the agent follows."""
        return self.intake.assignment

    def _restore_model(self) -> None:
        model = self.models.restore()
        if model is not None:
            self._use_class_names(model)
            self.metrics.set_model_version(model.version)
            logger.info("%s: diagnosing with saved model version %d", self.agent_id, model.version)

    def _use_class_names(self, model: LoadedModel) -> None:
        """Name diagnoses after the model's own classes (announced with it and saved beside
        it), never after the local manifest, whose labels may be fewer."""
        if len(model.class_names) != model.n_classes:
            logger.warning(
                "%s: model version %d names %d classes for %d outputs; diagnoses are named "
                "'class <i>' until the next model arrives",
                self.agent_id,
                model.version,
                len(model.class_names),
                model.n_classes,
            )
        self.class_names = model.names()
        self.metrics.set_class_names(self.class_names)

    def _status(self, state: str) -> bytes:
        active = self.diagnoser.active
        status = AgentStatus(
            agent_id=self.agent_id,
            state="online" if state == "online" else "offline",
            timestamp=self.clock(),
            can_train=self.data is not None and len(self.data.train) > 0,
            num_train_samples=len(self.data.train) if self.data is not None else 0,
            device=str(self.device),
            model_version=active.version if active else None,
            software_version=__version__,
        )
        return status.model_dump_json().encode()

    def _connection_changed(self, connected: bool) -> None:
        self.metrics.set_connected(connected)
        if connected:
            self.connection.publish(
                self.topics.agent_status(self.agent_id), self._status("online"), retain=True
            )

    # -- network-thread handlers -------------------------------------------------------------

    def _on_task(self, topic: str, payload: bytes) -> None:
        self.tasks.put(payload)

    def _on_oversized(self, topic: str, size_bytes: int) -> None:
        # Dropped by the connection before any handler: counted here all the same.
        if topic == self.topics.tasks(self.agent_id):
            self.metrics.task_rejected(RejectReason.OVERSIZED)
        elif self.models.is_model_topic(topic):
            self.metrics.model_rejected(ModelRejectReason.OVERSIZED)

    def _model_loaded(self, header: ModelAnnouncement, loaded: LoadedModel) -> None:
        self._use_class_names(loaded)
        self.connection.publish(
            self.topics.agent_status(self.agent_id), self._status("online"), retain=True
        )

    # -- worker threads ----------------------------------------------------------------------

    def _work(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                payload = self.tasks.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                task, body = self.runner.parse(payload)
            except WireError as error:
                self.metrics.task_rejected(error.reason)
                logger.warning(
                    "%s: refused a task frame (%s): %s", self.agent_id, error.reason, error
                )
                continue
            try:
                answer = self.runner.run(task, body)
            except Exception as error:
                logger.exception("%s: task %s failed", self.agent_id, task.task_id)
                answer = self.runner.failed(task, f"{type(error).__name__}: {error}")
            if answer.kind == "fit_update":
                self.metrics.observe_training(answer.train_seconds)
            try:
                self.connection.publish(self.topics.results(self.agent_id), answer.payload)
            except (ValueError, RuntimeError) as error:
                logger.error(
                    "%s: could not send the answer to %s: %s", self.agent_id, task.task_id, error
                )

    def _diagnose(self, stop: threading.Event) -> None:
        backlog: deque[Window] = deque(maxlen=self.settings.diagnosis.backlog_windows)
        try:
            for window in self.source.stream(stop):
                backlog.append(window)
                if self.diagnoser.active is None:
                    continue
                while backlog:
                    self._diagnose_safely(backlog.popleft())
        except Exception:
            logger.exception("%s: the window source failed; diagnosis stopped", self.agent_id)

    def _diagnose_safely(self, window: Window) -> None:
        """One window; an error is logged (first and every 1000th) and the stream goes on."""
        try:
            self._diagnose_one(window)
        except Exception:
            self.window_errors += 1
            if self.window_errors == 1 or self.window_errors % 1000 == 0:
                logger.exception(
                    "%s: could not diagnose %s (%d windows failed so far)",
                    self.agent_id,
                    window.origin,
                    self.window_errors,
                )

    def _diagnose_one(self, window: Window) -> None:
        started = time.perf_counter()
        prediction = self.diagnoser.predict(window.samples)
        latency = time.perf_counter() - started
        class_id = int(prediction.class_ids[0])
        names = self.class_names
        diagnosis = Diagnosis(
            agent_id=self.agent_id,
            window_index=self.windows_diagnosed,
            class_id=class_id,
            class_name=names[class_id] if class_id < len(names) else f"class {class_id}",
            probability=float(min(1.0, max(0.0, prediction.probabilities[0, class_id]))),
            model_version=prediction.model.version,
            cluster_id=prediction.model.cluster_id,
            timestamp=window.timestamp,
            latency_s=latency,
            true_label=window.true_label,
            origin=window.origin,
        )
        self.windows_diagnosed += 1
        self.metrics.observe_diagnoses([class_id], latency)
        self.log.append(diagnosis.model_dump())
        if self.settings.diagnosis.publish:
            # QoS 0: a diagnosis is news and the local log keeps it; during a broker outage
            # diagnoses are dropped instead of filling the client's queue.
            self.connection.publish(
                self.topics.diagnoses(self.agent_id), diagnosis.model_dump_json(), qos=0
            )
