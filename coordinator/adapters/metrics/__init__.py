"""The coordinator's Prometheus metrics, defined here and in :mod:`.clusters` only (an
ingest worker's, a process of its own, in :mod:`.ingest_worker`).

One :class:`CoordinatorMetrics` per coordinator process, built on a registry the caller
passes (tests pass a fresh one) and served by :func:`faultfleet.metrics_http.serve_metrics`.
Names follow ``faultfleet_<noun>_<unit>[_total]`` in base units. Every labelled series
exists from the first scrape: one ``faultfleet_updates_rejected_total`` series per
:class:`~faultfleet.wire.codec.RejectReason`, so a rate over a reason that never happened
reads 0 rather than "no data". Cluster series are the exception: the set of clusters
changes while the coordinator runs, and :meth:`CoordinatorMetrics.set_clusters` replaces
the whole set so that clusters which no longer exist stop being reported. Cluster quality
(:mod:`coordinator.strategies.quality`) is reported as run-level summaries only, without
labels, so its cardinality does not grow with the fleet. The cluster families and their
setters are written in the sibling :mod:`coordinator.adapters.metrics.clusters`, which
:class:`CoordinatorMetrics` derives from; nothing else builds them.

The registry also holds the standard process, platform and GC collectors and
``faultfleet_build_info`` (:func:`faultfleet.metrics_http.register_standard_metrics`).
``faultfleet_agents_by_state`` counts the agents by their last status, so that an agent that
stopped shows as ``offline`` instead of vanishing from the dashboard.
"""

from __future__ import annotations

import logging
import math

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from coordinator.adapters.metrics.clusters import ClusterMetrics
from coordinator.engine.campaigns import CampaignTrigger, ServicePhase
from coordinator.engine.promotion import Decision
from faultfleet.metrics_http import register_standard_metrics
from faultfleet.wire.codec import RejectReason

logger = logging.getLogger(__name__)

ROUND_DURATION_BUCKETS_S = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
"""Round durations from a fast lab fleet (under a second) to slow gateways (half an hour)."""

AGENT_STATES = ("online", "offline", "retired")
"""Label values of ``faultfleet_agents_by_state``: an agent status's states."""

CLIP_RULES = ("norm", "weight")
"""Label values of ``faultfleet_updates_clipped_total``: the averaging's bounds
(:mod:`coordinator.strategies.robust`)."""


class CoordinatorMetrics(ClusterMetrics):
    """Every metric the coordinator reports.

    Parameters
    ----------
    registry : CollectorRegistry, optional
        Where the metrics are registered; a fresh registry when None (not the
        prometheus_client default one, so two instances never collide).

    Attributes
    ----------
    registry : CollectorRegistry
        The registry to serve.
    updates_received, payload_received_bytes, payload_sent_bytes, models_published : Counter
        Incremented directly by the service (``.inc()``, ``.inc(n_bytes)``).
    broker_connected : Gauge
        1 while connected to the broker, 0 otherwise; see :meth:`set_connected`.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        self.rounds = Counter(
            "faultfleet_rounds_total", "Federated rounds completed.", registry=reg
        )
        self.round = Gauge("faultfleet_round", "Number of the last completed round.", registry=reg)
        self.round_duration_seconds = Histogram(
            "faultfleet_round_duration_seconds",
            "Wall time of one round, from sending its tasks to aggregating its results.",
            buckets=ROUND_DURATION_BUCKETS_S,
            registry=reg,
        )
        self.updates_received = Counter(
            "faultfleet_updates_received_total",
            "Fit updates accepted from agents.",
            registry=reg,
        )
        self.updates_rejected = Counter(
            "faultfleet_updates_rejected_total",
            "Results from agents refused, by reason.",
            ["reason"],
            registry=reg,
        )
        self.payload_received_bytes = Counter(
            "faultfleet_payload_received_bytes_total",
            "Bytes of MQTT payload received from agents.",
            registry=reg,
        )
        self.payload_sent_bytes = Counter(
            "faultfleet_payload_sent_bytes_total",
            "Bytes of MQTT payload published (tasks, models, assignments).",
            registry=reg,
        )
        self.agents_online = Gauge(
            "faultfleet_agents_online", "Agents whose last status is online.", registry=reg
        )
        self.agents_registered = Gauge(
            "faultfleet_agents_registered", "Agents the coordinator has heard of.", registry=reg
        )
        self.federation_agents = Gauge(
            "faultfleet_federation_agents",
            "Agents in the run's federation (joined and not retired).",
            registry=reg,
        )
        self.membership_changes = Counter(
            "faultfleet_membership_changes_total",
            "Agents that joined or left the run's federation after it started.",
            ["change"],
            registry=reg,
        )
        self.models_published = Counter(
            "faultfleet_models_published_total",
            "Cluster models published as ONNX to the broker.",
            registry=reg,
        )
        self.promotions = Counter(
            "faultfleet_promotions",
            "Decisions about new cluster model versions: promoted or rejected by the gate, "
            "kept back by a pin, or an operator's rollback.",
            ["decision"],
            registry=reg,
        )
        self.broker_connected = Gauge(
            "faultfleet_broker_connected", "1 while connected to the MQTT broker.", registry=reg
        )
        self.answers_held_bytes = Gauge(
            "faultfleet_answers_held_bytes",
            "Bytes of agents' answers received and not yet journaled or refused; at the "
            "bound the coordinator stops reading from the broker until the journal catches up.",
            registry=reg,
        )
        self.answers_backpressure_seconds = Counter(
            "faultfleet_answers_backpressure_seconds",
            "Time the coordinator waited, with answers held at the bound, before reading the "
            "next message from the broker.",
            registry=reg,
        )
        self._add_clusters(reg)
        for reason in RejectReason:
            self.updates_rejected.labels(reason=reason.value)
        for decision in Decision:
            self.promotions.labels(decision=decision.value)
        for change in ("joined", "left"):
            self.membership_changes.labels(change=change)
        self._add_fleet_health(reg)
        self._add_campaigns(reg)

    def _add_fleet_health(self, reg: CollectorRegistry) -> None:
        """Agents by state, rounds without quorum, standard metrics."""
        self.agents_by_state = Gauge(
            "faultfleet_agents_by_state",
            "Agents the coordinator has heard of, by their last status: online, offline "
            "(stopped or unreachable) or retired.",
            ["state"],
            registry=reg,
        )
        self.updates_clipped = Counter(
            "faultfleet_updates_clipped_total",
            "Accepted updates the averaging bounded, by rule: norm (scaled down to the norm "
            "bound) or weight (sample count cut to the weight cap).",
            ["rule"],
            registry=reg,
        )
        for rule in CLIP_RULES:
            self.updates_clipped.labels(rule=rule)
        self.rounds_without_quorum = Counter(
            "faultfleet_rounds_without_quorum_total",
            "Rounds rolled back because fewer agents answered than the quorum (run.min_quorum); "
            "each is tried again after run.retry_wait_s.",
            registry=reg,
        )
        self.tasks_resent = Counter(
            "faultfleet_tasks_resent_total",
            "Tasks of the round in flight sent again, unanswered, when their agent's online "
            "status arrived (after a broker restart or a reconnection).",
            registry=reg,
        )
        self.ingest_workers_missing = Counter(
            "faultfleet_ingest_workers_missing_total",
            "Ingest workers missing from a fit round, by stage: plan (did not take it in "
            "time) or close (sent no partial sums; their updates were left out).",
            ["stage"],
            registry=reg,
        )
        for stage in ("plan", "close"):
            self.ingest_workers_missing.labels(stage=stage)
        for state in AGENT_STATES:
            self.agents_by_state.labels(state=state).set(0)
        self.build_info = register_standard_metrics(reg)

    def _add_campaigns(self, reg: CollectorRegistry) -> None:
        """What the service does (a campaign or idle), campaigns by trigger, new labels."""
        self.campaign_state = Gauge(
            "faultfleet_campaign_state",
            "1 for what the coordinator does now: running a training campaign, or idle "
            "between campaigns (serving models); 0 for the other.",
            ["state"],
            registry=reg,
        )
        self.campaigns = Counter(
            "faultfleet_campaigns",
            "Training campaigns started, by what started them: the first start, the schedule, "
            "newly labelled windows or an operator's command.",
            ["trigger"],
            registry=reg,
        )
        self.new_labelled_windows = Gauge(
            "faultfleet_new_labelled_windows",
            "Labelled windows the agents reported beyond their counts when the last campaign "
            "started (summed over agents).",
            registry=reg,
        )
        for trigger in CampaignTrigger:
            self.campaigns.labels(trigger=trigger.value)
        self.set_phase(ServicePhase.IDLE)

    def set_phase(self, phase: ServicePhase) -> None:
        """Record whether a campaign runs (one state 1, the others 0)."""
        current = ServicePhase(phase)
        for state in ServicePhase:
            self.campaign_state.labels(state=state.value).set(1 if state is current else 0)

    def count_campaign(self, trigger: CampaignTrigger) -> None:
        """Count one campaign started by ``trigger``."""
        self.campaigns.labels(trigger=CampaignTrigger(trigger).value).inc()

    def set_new_labelled_windows(self, windows: int) -> None:
        """Set the labelled windows that are new since the last campaign started."""
        if windows < 0:
            raise ValueError(f"new labelled windows {windows} must be >= 0")
        self.new_labelled_windows.set(windows)

    def observe_round(self, duration_s: float, server_round: int) -> None:
        """Count a completed round and record how long it took.

        Parameters
        ----------
        duration_s : float
            Wall time of the round, seconds (not negative).
        server_round : int
            The round's number (1 for the first).
        """
        if not (math.isfinite(duration_s) and duration_s >= 0):
            raise ValueError(f"round duration {duration_s!r} s must be a finite number >= 0")
        self.rounds.inc()
        self.round.set(server_round)
        self.round_duration_seconds.observe(duration_s)

    def reject(self, reason: RejectReason, n: int = 1) -> None:
        """Count ``n`` refused results under ``reason``.

        A string that is not a :class:`RejectReason` value raises ValueError instead of
        creating a new series.
        """
        if n < 0:
            raise ValueError(f"cannot count {n} rejected updates; n must be >= 0")
        self.updates_rejected.labels(reason=RejectReason(reason).value).inc(n)

    def count_clipped(self, *, norm: int, weight: int) -> None:
        """Count updates a round's averaging scaled to its norm bound and capped in weight."""
        if norm < 0 or weight < 0:
            raise ValueError(f"clipped counts must be >= 0 (got norm={norm}, weight={weight})")
        self.updates_clipped.labels(rule="norm").inc(norm)
        self.updates_clipped.labels(rule="weight").inc(weight)

    def set_agents(self, online: int, registered: int, retired: int = 0) -> None:
        """Set how many agents are online, retired and known; the rest are offline."""
        if min(online, registered, retired) < 0 or online + retired > registered:
            raise ValueError(
                f"agent counts must be >= 0 with online + retired <= registered (got "
                f"online={online}, retired={retired}, registered={registered})"
            )
        self.agents_online.set(online)
        self.agents_registered.set(registered)
        self.agents_by_state.labels(state="online").set(online)
        self.agents_by_state.labels(state="retired").set(retired)
        self.agents_by_state.labels(state="offline").set(registered - online - retired)

    def count_promotion(self, decision: Decision) -> None:
        """Count one decision about a cluster model version."""
        self.promotions.labels(decision=Decision(decision).value).inc()

    def set_connected(self, connected: bool) -> None:
        """Record whether the coordinator is connected to the broker."""
        self.broker_connected.set(1 if connected else 0)
