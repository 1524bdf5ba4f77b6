"""An edge agent's Prometheus metrics, all defined here and nowhere else.

One :class:`AgentMetrics` per agent process, built on a registry the caller passes (tests
pass a fresh one) and served by :func:`faultfleet.metrics_http.serve_metrics`. Names follow
``faultfleet_<noun>_<unit>[_total]`` in base units; the per-class diagnosis counter has one
series per class name from the start, never one per window or per machine.

Several agents may share one :class:`AgentMetrics` in one process (a lab host running many
simulated agents). Counters and histograms then add up over those agents, and the gauges
``faultfleet_model_version`` and ``faultfleet_broker_connected`` hold whatever the agent
that set them last reported. To see each agent on its own, run one process per agent, each
with its own ``metrics.port``.

``faultfleet_diagnosis_streak_windows{class_name}`` is what the fault-alarm rule
(``deploy/prometheus/faultfleet-rules.yml``) watches: for the class of the current streak, the
number of most recent windows in a row diagnosed as it with at least
``diagnosis.streak_min_probability``; 0 for every other class. One series per class name of
the model, never one per window: the alarm needs no per-window label, and the series count
is bounded by the model's classes (12 for mixed-fault), whatever the fleet's size. The
registry also holds the standard process, platform and GC collectors and
``faultfleet_build_info`` (:func:`faultfleet.metrics_http.register_standard_metrics`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from edge_agent.incoming import IncomingRefusal
from edge_agent.metrics.diagnosis_counts import DiagnosisCounts, StreakGauge
from edge_agent.model_intake import ModelRejectReason
from edge_agent.outbox import OutboxDrop
from edge_agent.supervision import AgentThread
from faultfleet.metrics_http import register_standard_metrics
from faultfleet.wire.codec import RejectReason

logger = logging.getLogger(__name__)

INFERENCE_LATENCY_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
)  # fmt: skip
"""0.1 ms (one window of the compact model on a desktop CPU) to 1 s (a batch on a slow ARM)."""

LOCAL_TRAINING_BUCKETS_S = (
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0,
)  # fmt: skip
"""0.1 s to 30 min: a few epochs of the compact model up to the paper model on a gateway CPU."""

NO_MODEL_VERSION = -1

TASK_REJECT_REASONS = (RejectReason.MALFORMED, RejectReason.OVERSIZED, RejectReason.SCHEMA)
"""Why an agent refuses a task frame: the codec's reasons (created from the start)."""
"""``faultfleet_model_version`` before the agent has loaded any model."""


class AgentMetrics:
    """Every metric an edge agent reports.

    Parameters
    ----------
    registry : CollectorRegistry, optional
        Where the metrics are registered; a fresh registry when None.
    class_names : Sequence[str]
        Names of the model's classes, in class-id order; one
        ``faultfleet_diagnoses_total{class_name=...}`` series is created for each. Empty
        until the agent knows them; see :meth:`set_class_names`.

    Attributes
    ----------
    registry : CollectorRegistry
        The registry to serve.
    """

    def __init__(
        self, registry: CollectorRegistry | None = None, class_names: Sequence[str] = ()
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        self.diagnosis_counts = DiagnosisCounts(reg, INFERENCE_LATENCY_BUCKETS_S)
        """``faultfleet_windows_processed_total``, ``faultfleet_inference_latency_seconds``
        and ``faultfleet_diagnoses_total``, counted per window without prometheus_client's
        objects (:mod:`edge_agent.metrics.diagnosis_counts`)."""
        self.model_version = Gauge(
            "faultfleet_model_version",
            "Version of the diagnosis model in use; -1 before any model is loaded.",
            registry=reg,
        )
        self.local_training_seconds = Histogram(
            "faultfleet_local_training_seconds",
            "Wall time of one local training task.",
            buckets=LOCAL_TRAINING_BUCKETS_S,
            registry=reg,
        )
        self.models_rejected = Counter(
            "faultfleet_models_rejected_total",
            "Model frames and cluster assignments refused, by reason (unsigned, unknown_key, "
            "bad_signature, digest, unloadable, ...).",
            ["reason"],
            registry=reg,
        )
        self.tasks_rejected = Counter(
            "faultfleet_tasks_rejected_total",
            "Task frames refused before any work: unreadable, oversized or not the schema.",
            ["reason"],
            registry=reg,
        )
        self.incoming_files_refused = Counter(
            "faultfleet_incoming_files_refused_total",
            "Files of a recordings folder's incoming/ not diagnosed, by reason (outside_folder, "
            "too_large, unreadable).",
            ["reason"],
            registry=reg,
        )
        self.tasks_queue_full = Counter(
            "faultfleet_tasks_queue_full_total",
            "Task frames answered task_failed on arrival because [tasks] max_queued tasks "
            "were already waiting.",
            registry=reg,
        )
        self.clock_skew_seconds = Gauge(
            "faultfleet_clock_skew_seconds",
            "This agent's clock minus the coordinator's at the last task (positive: the agent "
            "is ahead; includes the task's transit time).",
            registry=reg,
        )
        self.thread_errors = Counter(
            "faultfleet_thread_errors_total",
            "Exceptions caught in an agent thread, which carried on (tasks, diagnosis, "
            "models, handler).",
            ["thread"],
            registry=reg,
        )
        self.thread_restarts = Counter(
            "faultfleet_thread_restarts_total",
            "Agent threads found ended and started again.",
            ["thread"],
            registry=reg,
        )
        self.diagnosis_log_failures = Counter(
            "faultfleet_diagnosis_log_failures_total",
            "Diagnoses published but not written to the local log (a full or failing disk).",
            registry=reg,
        )
        self.broker_connected = Gauge(
            "faultfleet_broker_connected", "1 while connected to the MQTT broker.", registry=reg
        )
        self._add_delivery_metrics(reg)
        for thread in AgentThread:
            self.thread_errors.labels(thread=thread.value)
            self.thread_restarts.labels(thread=thread.value)
        self.model_version.set(NO_MODEL_VERSION)
        for model_reason in ModelRejectReason:
            self.models_rejected.labels(reason=model_reason.value)
        for task_reason in TASK_REJECT_REASONS:
            self.tasks_rejected.labels(reason=task_reason.value)
        for incoming_reason in IncomingRefusal:
            self.incoming_files_refused.labels(reason=incoming_reason.value)
        self._class_names: tuple[str, ...] = ()
        self._add_alarm_metrics(reg)
        self.set_class_names(class_names)

    def _add_delivery_metrics(self, reg: CollectorRegistry) -> None:
        """What a broker outage costs: the outbox, dropped diagnoses, tasks sent twice."""
        self.outbox_diagnoses = Gauge(
            "faultfleet_outbox_diagnoses",
            "Diagnoses waiting in the on-disk outbox for the broker to come back.",
            registry=reg,
        )
        self.diagnoses_dropped = Counter(
            "faultfleet_diagnoses_dropped_total",
            "Diagnoses never published, by reason: outbox_full (the oldest, beyond "
            "[diagnosis] outbox_max_diagnoses), unwritable (the outbox's disk failed), "
            "unreadable (found torn or corrupt in the outbox at start).",
            ["reason"],
            registry=reg,
        )
        for drop in OutboxDrop:
            self.diagnoses_dropped.labels(reason=drop.value)
        self.tasks_repeated = Counter(
            "faultfleet_tasks_repeated_total",
            "Task frames received again (the coordinator repeats unanswered tasks after a "
            "reconnection): answered from the answers kept, or dropped while the first copy "
            "waits or runs.",
            registry=reg,
        )

    def diagnoses_lost(self, reason: OutboxDrop, n: int = 1) -> None:
        """Count ``n`` diagnoses that will never be published."""
        self.diagnoses_dropped.labels(reason=OutboxDrop(reason).value).inc(n)

    def _add_alarm_metrics(self, reg: CollectorRegistry) -> None:
        """The fault streak, its probability bar, and the standard metrics."""
        self.diagnosis_streak_windows = StreakGauge(reg)
        """``faultfleet_diagnosis_streak_windows``, set per window without a gauge object."""
        self.diagnosis_streak_min_probability = Gauge(
            "faultfleet_diagnosis_streak_min_probability_ratio",
            "Probability (0 to 1) of its class a window needs to extend that class's streak.",
            registry=reg,
        )
        self.build_info = register_standard_metrics(reg)

    @property
    def class_names(self) -> tuple[str, ...]:
        """Class names in class-id order, as :meth:`observe_diagnoses` maps them."""
        return self._class_names

    def set_class_names(self, class_names: Sequence[str]) -> None:
        """Map class ids to ``class_names`` from now on and create their series.

        Series of names used before stay, with their counts: a counter never goes back.
        """
        names = tuple(class_names)
        if len(set(names)) != len(names) or not all(names):
            raise ValueError(f"class names {list(names)} must be non-empty and distinct")
        self.diagnosis_counts.set_class_names(names)
        self.diagnosis_streak_windows.add_names(names)
        self._class_names = names

    def observe_diagnoses(self, class_ids: Sequence[int], latency_s: float) -> None:
        """Record one ONNX Runtime call that diagnosed ``len(class_ids)`` windows.

        Parameters
        ----------
        class_ids : Sequence[int]
            Predicted class id of each window in the batch; each counts one window and one
            diagnosis of its class. An empty batch records nothing.
        latency_s : float
            Wall time of the whole call, seconds; observed once, whatever the batch size
            (``faultfleet_inference_latency_seconds`` is the latency of one call).
        """
        if not (math.isfinite(latency_s) and latency_s >= 0):
            raise ValueError(f"inference latency {latency_s!r} s must be a finite number >= 0")
        if len(class_ids) == 0:
            return
        n_classes = len(self._class_names)
        for class_id in class_ids:
            if not 0 <= class_id < n_classes:
                raise ValueError(
                    f"class id {class_id} is outside the {n_classes} known classes; "
                    "pass the model's class names to AgentMetrics or set_class_names first"
                )
        self.diagnosis_counts.observe_batch(class_ids, latency_s)

    def observe_diagnosis(self, class_id: int, latency_s: float) -> None:
        """:meth:`observe_diagnoses` of one window (the agent's diagnosis thread), without
        building a batch: its class id and the call's latency, seconds."""
        if not (0 <= class_id < len(self._class_names) and 0.0 <= latency_s < math.inf):
            self.observe_diagnoses([class_id], latency_s)  # raises, naming what is wrong
        self.diagnosis_counts.observe_one(class_id, latency_s)

    def set_model_version(self, version: int) -> None:
        """Record the version of the model now in use (0 or more)."""
        if version < 0:
            raise ValueError(f"model version {version} must be >= 0")
        self.model_version.set(version)

    def observe_training(self, seconds: float) -> None:
        """Record the wall time of one local training task, seconds."""
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"training time {seconds!r} s must be a finite number >= 0")
        self.local_training_seconds.observe(seconds)

    def model_rejected(self, reason: ModelRejectReason) -> None:
        """Count one refused model frame or assignment."""
        self.models_rejected.labels(reason=ModelRejectReason(reason).value).inc()

    def task_rejected(self, reason: RejectReason) -> None:
        """Count one task frame refused before any work."""
        self.tasks_rejected.labels(reason=RejectReason(reason).value).inc()

    def incoming_refused(self, reason: IncomingRefusal) -> None:
        """Count one file of ``incoming/`` refused or unreadable."""
        self.incoming_files_refused.labels(reason=IncomingRefusal(reason).value).inc()

    def thread_error(self, thread: AgentThread) -> None:
        """Count one exception caught in ``thread``."""
        self.thread_errors.labels(thread=AgentThread(thread).value).inc()

    def thread_restarted(self, thread: AgentThread) -> None:
        """Count one restart of ``thread``."""
        self.thread_restarts.labels(thread=AgentThread(thread).value).inc()

    def set_streak(self, class_name: str | None, windows: int) -> None:
        """Report the current streak: ``windows`` in a row of ``class_name`` (None: no streak).

        Every other class reads 0. A class name the metrics do not know raises ValueError
        instead of creating a series.
        """
        if windows < 0 or (class_name is None and windows != 0):
            raise ValueError(f"streak of {windows} windows of {class_name!r} is not a streak")
        known = self.diagnosis_streak_windows.names
        if class_name is not None and class_name not in known:
            raise ValueError(
                f"class {class_name!r} is not one of the model's classes "
                f"{sorted(known)}; call set_class_names first"
            )
        self.diagnosis_streak_windows.current = (class_name, windows)

    def set_streak_min_probability(self, probability: float) -> None:
        """Report the probability a window needs to extend its class's streak (0 to 1)."""
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"streak probability {probability!r} must be from 0 to 1")
        self.diagnosis_streak_min_probability.set(probability)

    def set_connected(self, connected: bool) -> None:
        """Record whether the agent is connected to the broker."""
        self.broker_connected.set(1 if connected else 0)
