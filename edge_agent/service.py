"""The edge-agent service: trains when asked, diagnoses every live window with ONNX Runtime.

:class:`AgentService` runs six activities around one MQTT connection:

* the network thread (paho) routes task frames to a queue, the retained cluster assignment
  to :meth:`_on_assignment` and the assigned cluster's retained model to :meth:`_on_model`;
  both must carry the coordinator's signature (:mod:`edge_agent.model_intake`);
* a loader thread loads the model the verified assignment names (ONNX Runtime session,
  warm-up) and hot-swaps it (:class:`~edge_agent.inference.OnnxDiagnoser`);
* a worker thread answers tasks one at a time from a bounded queue
  (:class:`~edge_agent.task_worker.TaskWorker`, :class:`~edge_agent.task_runner.TaskRunner`);
* a diagnosis thread takes windows from the source, runs the active ONNX model on each and
  hands the diagnosis's JSON to :class:`~edge_agent.diagnosis_delivery.DiagnosisDelivery`:
  handed to the outbox thread to publish at once while connected, kept in the bounded on-disk
  outbox while the broker is away, then written to the local log — a full disk stops the
  log, not the publishing. Windows that arrive before the first model wait in a bounded
  backlog; a model swap never drops a window;
* an outbox thread publishes the diagnoses handed to it and sends those kept during a
  broker outage once it is back, in order (:mod:`edge_agent.diagnosis_delivery`);
* a heartbeat thread publishes the retained heartbeat (last seen, last diagnosis, fault
  streak) every ``diagnosis.heartbeat_s`` (:class:`~edge_agent.activity.Activity`);
* a labels thread looks for new labels every ``labels.rescan_s`` (rows appended to a
  manifest, the labels file naming diagnosed windows kept in ``state_dir/windows``) and
  republishes the status with the new labelled-window count; training takes the new data
  at the first task of the next campaign (:mod:`edge_agent.labelled_data`).

No message can stop these threads (:mod:`edge_agent.supervision`): every loop catches the
exceptions of its iterations, counted per thread and logged once per kind, and a
supervisor starts again any thread that ended.

The agent announces itself with a retained ``online`` status and leaves a retained
``offline`` last will; the connection reconnects with backoff on its own. Its MQTT session
is persistent (client id ``faultfleet-agent-<agent id>``): the broker keeps its
subscriptions and queues its tasks while it is away, the tasks of a broker that lost them
are sent again by the coordinator when the agent's ``online`` status comes back, and a
repeated task is answered once (:mod:`edge_agent.task_worker`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager

from edge_agent.activity import Activity
from edge_agent.devices import device_name
from edge_agent.diagnosis_delivery import DiagnosisDelivery
from edge_agent.diagnosis_log import DiagnosisLog
from edge_agent.inference import LoadedModel, OnnxDiagnoser
from edge_agent.labelled_data import LabelledData
from edge_agent.metrics import AgentMetrics
from edge_agent.model_intake import ModelIntake, ModelRejectReason
from edge_agent.model_store import ModelStore
from edge_agent.model_updates import ModelUpdates
from edge_agent.outbox import DiagnosisOutbox
from edge_agent.settings import AgentSettings
from edge_agent.sources import Window, WindowSource
from edge_agent.supervision import AgentThread, ErrorReport, Supervisor
from edge_agent.task_runner import TaskLimits, TaskRunner
from edge_agent.task_worker import TaskWorker
from edge_agent.window_store import WindowStore
from faultfleet import __version__
from faultfleet.clock import SYSTEM_CLOCK, Clock
from faultfleet.wire.codec import RejectReason
from faultfleet.wire.diagnosis_json import DiagnosisEncoder
from faultfleet.wire.messages import (
    AgentStatus,
    ClusterAssignment,
    ModelAnnouncement,
    ModelSpec,
)
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
    compute_lock : context manager, optional
        Shared by agents of one host so they train one at a time.
    training_threads : callable, optional
        Torch threads for a task on a model of the given number of parameters
        (:class:`~edge_agent.task_runner.TaskRunner`).
    clock : Clock
        Status timestamps, task deadlines and the clock skew; paces the supervisor.
    """

    def __init__(
        self,
        settings: AgentSettings,
        source: WindowSource,
        *,
        metrics: AgentMetrics | None = None,
        compute_lock: AbstractContextManager[object] | None = None,
        training_threads: Callable[[int], int] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.settings = settings
        self.agent_id = settings.agent_id
        self.source = source
        self.metrics = metrics or AgentMetrics(class_names=source.class_names)
        self.clock = clock
        self.topics = Topics(settings.broker.topic_root)
        self.device = device_name(settings.device)
        """Where tasks train (``"cpu"``, ``"cuda"``); torch loads with the first task."""
        self.windows = WindowStore(
            settings.state_dir / "windows",
            sample_size=math.prod(source.sample_shape),
            max_bytes=settings.labels.keep_windows_bytes,
            flush_delay_s=settings.diagnosis.flush_delay_s,
            clock=clock,
        )
        self.labelled = LabelledData(
            self.agent_id,
            source,
            self.windows,
            settings.labels_file,
            split_seed=settings.labels.split_seed,
        )
        self._run_model: tuple[str, ModelSpec] | None = None
        """Run id and architecture of the last model loaded: tasks of that run must use it."""
        limits = settings.tasks
        self.runner = TaskRunner(
            self.agent_id,
            self.labelled.active,
            self.device,
            max_payload_bytes=settings.broker.max_payload_bytes,
            compute_lock=compute_lock,
            training_threads=training_threads,
            clock=clock,
            limits=TaskLimits(
                max_epochs=limits.max_epochs,
                max_classes=limits.max_classes,
                max_cached_models=limits.max_cached_models,
            ),
            run_model=lambda: self._run_model,
            data_for_task=self.labelled.for_task,
        )
        self.errors = ErrorReport(self.agent_id, self.metrics.thread_error)
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
            flush_delay_s=settings.diagnosis.flush_delay_s,
            clock=clock,
        )
        self.class_names: tuple[str, ...] = source.class_names
        self.windows_diagnosed = 0
        self._encoder: tuple[LoadedModel, DiagnosisEncoder] | None = None
        """The last model that diagnosed and the JSON encoder of its diagnoses."""
        self._lock = threading.Lock()
        offline = AgentStatus(agent_id=self.agent_id, state="offline").model_dump_json()
        self.connection = MqttConnection(
            client_id=f"faultfleet-agent-{self.agent_id}",
            settings=settings.broker.for_agent(self.agent_id),
            will=Will(self.topics.agent_status(self.agent_id), offline.encode()),
            persistent_session=True,
            on_connection_change=self._connection_changed,
            on_oversized=self._on_oversized,
            on_handler_error=lambda topic, error: self.errors(AgentThread.HANDLER, error, topic),
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
        self.worker = TaskWorker(
            self.runner,
            self.connection,
            self.topics.results(self.agent_id),
            self.metrics,
            self.errors,
            clock,
            max_queued=limits.max_queued,
            clock_skew_warn_s=limits.clock_skew_warn_s,
            answers_kept=limits.answers_kept,
        )
        outbox = DiagnosisOutbox(
            settings.state_dir / "outbox",
            max_records=settings.diagnosis.outbox_max_diagnoses,
            on_dropped=self.metrics.diagnoses_lost,
        )
        self.delivery = DiagnosisDelivery(
            self.agent_id,
            self.connection,
            self.topics.diagnoses(self.agent_id),
            self.log,
            outbox,
            self.metrics,
            publish=settings.diagnosis.publish,
            publish_delay_s=settings.diagnosis.publish_delay_s,
            on_error=lambda error: self.errors(AgentThread.OUTBOX, error),
            clock=clock,
            on_tick=lambda: self.windows.flush(only_due=True),
        )
        # The outbox thread writes the kept windows and the log lines whose batch is due.
        self.windows.wake_writer = self.log.wake_writer = self.delivery.wake
        self.connection.route(self.topics.tasks(self.agent_id), self.worker.on_task)
        self.activity = Activity(
            self.agent_id,
            self.metrics,
            self.diagnoser,
            streak_min_probability=settings.diagnosis.streak_min_probability,
            now=clock.time,
        )
        self.connection.route(self.topics.assignment(self.agent_id), self.models.on_assignment)
        self.connection.route(self.topics.coordinator_status(), self.labelled.on_coordinator_status)

    # -- lifecycle -------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set, then leave a clean ``offline`` status."""
        self._restore_model()
        self.connection.start()
        supervisor = Supervisor(self.agent_id, stop, self.metrics.thread_restarted, self.clock)
        supervisor.start(AgentThread.TASKS, self.worker.run)
        supervisor.start(AgentThread.DIAGNOSIS, self._diagnose)
        supervisor.start(AgentThread.MODELS, self._load_models)
        supervisor.start(AgentThread.OUTBOX, self.delivery.run)
        if self.settings.diagnosis.heartbeat_s > 0:  # 0: heartbeats switched off
            supervisor.start(AgentThread.HEARTBEAT, self._heartbeat)
        supervisor.start(AgentThread.LABELS, self._rescan_labels)
        try:
            supervisor.watch()
        finally:
            supervisor.join(timeout_s=30)
            self.connection.stop(
                final=[(self.topics.agent_status(self.agent_id), self._status("offline"), True)]
            )
            self.delivery.close()
            try:
                self.windows.close()
            except OSError as error:  # the last windows could not be flushed: a full disk
                logger.warning("%s: closing the kept windows: %s", self.agent_id, error)

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
        data, newest = self.labelled.active, self.labelled.newest
        status = AgentStatus(
            agent_id=self.agent_id,
            state="online" if state == "online" else "offline",
            timestamp=self.clock.time(),
            can_train=newest is not None and len(newest.train) > 0,
            num_train_samples=len(data.train) if data is not None else 0,
            labelled_windows=self.labelled.labelled_windows,
            device=self.device,
            model_version=active.version if active else None,
            software_version=__version__,
        )
        return status.model_dump_json().encode()

    def _connection_changed(self, connected: bool) -> None:
        self.metrics.set_connected(connected)
        self.delivery.connection_changed(connected)
        if connected:
            self.connection.publish(
                self.topics.agent_status(self.agent_id), self._status("online"), retain=True
            )

    # -- network-thread handlers -------------------------------------------------------------

    def _on_oversized(self, topic: str, size_bytes: int) -> None:
        # Dropped by the connection before any handler: counted here all the same.
        if topic == self.topics.tasks(self.agent_id):
            self.metrics.task_rejected(RejectReason.OVERSIZED)
        elif self.models.is_model_topic(topic):
            self.metrics.model_rejected(ModelRejectReason.OVERSIZED)

    def _model_loaded(self, header: ModelAnnouncement, loaded: LoadedModel) -> None:
        self._run_model = (header.run_id, header.model)
        self._use_class_names(loaded)
        self.connection.publish(
            self.topics.agent_status(self.agent_id), self._status("online"), retain=True
        )

    # -- worker threads ----------------------------------------------------------------------

    def _load_models(self, stop: threading.Event) -> None:
        try:
            self.models.run(stop)
        except Exception as error:  # the supervisor starts the loader again
            self.errors(AgentThread.MODELS, error)

    def _rescan_labels(self, stop: threading.Event) -> None:
        """The labels thread: rescans until ``stop``; a change republishes the status."""
        self.labelled.run(
            stop,
            interval_s=self.settings.labels.rescan_s,
            clock=self.clock,
            on_change=self._republish_status,
        )

    def _republish_status(self) -> None:
        self.connection.publish(
            self.topics.agent_status(self.agent_id), self._status("online"), retain=True
        )

    def _heartbeat(self, stop: threading.Event) -> None:
        """The heartbeat thread: :meth:`~edge_agent.activity.Activity.run` until ``stop``."""
        self.activity.run(
            stop,
            self.connection,
            self.topics.heartbeat(self.agent_id),
            interval_s=self.settings.diagnosis.heartbeat_s,
            clock=self.clock,
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
        except Exception as error:  # the supervisor starts the stream again
            self.errors(AgentThread.DIAGNOSIS, error, "the window source")

    def _diagnose_safely(self, window: Window) -> None:
        """One window; an error is counted and logged once per kind, the stream goes on."""
        try:
            self._diagnose_one(window)
        except Exception as error:
            self.errors(AgentThread.DIAGNOSIS, error, window.origin)

    def _diagnose_one(self, window: Window) -> None:
        started = time.perf_counter()
        model, class_id, probability = self.diagnoser.predict_top(window.samples)
        latency = time.perf_counter() - started
        names = self.class_names
        cached = self._encoder  # (model, its encoder), made again when either changes
        if cached is None or cached[0] is not model or cached[1].class_names is not names:
            cached = self._encoder = (model, self._encoder_for(model))
        encoder = cached[1]
        probability = min(1.0, max(0.0, probability))
        payload = encoder.encode(
            self.windows_diagnosed,
            class_id,
            probability,
            window.timestamp,
            latency,
            window.true_label,
            window.origin,
        )
        self.windows_diagnosed += 1
        self.windows.keep(window.samples, window.timestamp)
        self.metrics.observe_diagnosis(class_id, latency)
        self.activity.observe_json(encoder.class_names[class_id], probability, payload)
        self.delivery.deliver_json(payload)

    def _encoder_for(self, model: LoadedModel) -> DiagnosisEncoder:
        """The JSON encoder of the diagnoses of ``model``, named after its own classes."""
        if self.class_names != model.names():
            self._use_class_names(model)  # the model that answered names it
        return DiagnosisEncoder(self.agent_id, model.version, model.cluster_id, self.class_names)
