"""An ingest worker's Prometheus metrics (``faultfleet ingest-worker``, one per process).

A worker reports what it did with the messages the shared subscription handed it, under
the names the coordinator uses for the same things where there is one (an operator's query
over ``faultfleet_updates_rejected_total`` or ``faultfleet_answers_held_bytes`` then covers
the coordinator and its workers, told apart by ``job`` and ``instance``):

- ``faultfleet_ingest_messages_total{outcome}``: ``accepted`` (journaled, folded and
  summarised), ``forwarded`` (answers other than fit updates, passed on to the coordinator),
  ``retracted`` (taken out of the sums again at the coordinator's word), ``unfolded`` (a
  second task of one agent and model), ``unjournaled`` (the journal could not write them);
- ``faultfleet_updates_rejected_total{reason}``: refused, by
  :class:`~faultfleet.wire.codec.RejectReason`;
- ``faultfleet_answers_held_bytes`` and ``faultfleet_answers_backpressure_seconds_total``:
  the bytes between arriving and being journaled, and the time the network thread waited at
  their bound (:mod:`coordinator.adapters.byte_budget`);
- ``faultfleet_ingest_round``: the round whose plan the worker folds (0 before the first);
- ``faultfleet_ingest_partial_sums_total``: partial sums sent at the rounds' closes;
- ``faultfleet_broker_connected``.

Every labelled series exists from the first scrape. The registry also holds the standard
process collectors and ``faultfleet_build_info``
(:func:`faultfleet.metrics_http.register_standard_metrics`).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from faultfleet.metrics_http import register_standard_metrics
from faultfleet.wire.codec import RejectReason

OUTCOMES = ("accepted", "forwarded", "retracted", "unfolded", "unjournaled")
"""Label values of ``faultfleet_ingest_messages_total``."""


class IngestWorkerMetrics:
    """Every metric an ingest worker reports.

    Parameters
    ----------
    registry : CollectorRegistry, optional
        Where the metrics are registered; a fresh registry when None.

    Attributes
    ----------
    registry : CollectorRegistry
        The registry to serve.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = registry if registry is not None else CollectorRegistry()
        self.registry = reg
        register_standard_metrics(reg)
        self.messages = Counter(
            "faultfleet_ingest_messages",
            "Messages of the shared results subscription this worker took, by outcome: "
            "accepted (journaled, folded, summarised), forwarded (other answers, passed on "
            "to the coordinator), retracted (taken out of the sums at the coordinator's "
            "word), unfolded (a second task of one agent and model), unjournaled.",
            ["outcome"],
            registry=reg,
        )
        self.updates_rejected = Counter(
            "faultfleet_updates_rejected",
            "Messages this worker refused, by reason.",
            ["reason"],
            registry=reg,
        )
        self.answers_held_bytes = Gauge(
            "faultfleet_answers_held_bytes",
            "Bytes of messages received and not yet journaled, forwarded or refused; at the "
            "bound the worker stops reading from the broker until its journal catches up.",
            registry=reg,
        )
        self.answers_backpressure_seconds = Counter(
            "faultfleet_answers_backpressure_seconds",
            "Time the worker waited, with messages held at the bound, before reading the "
            "next message from the broker.",
            registry=reg,
        )
        self.round = Gauge(
            "faultfleet_ingest_round",
            "The round whose plan this worker folds updates for (0 before its first plan).",
            registry=reg,
        )
        self.partial_sums = Counter(
            "faultfleet_ingest_partial_sums",
            "Partial sums (one per model key and round close) sent to the coordinator.",
            registry=reg,
        )
        self.broker_connected = Gauge(
            "faultfleet_broker_connected", "1 while connected to the MQTT broker.", registry=reg
        )
        for outcome in OUTCOMES:
            self.messages.labels(outcome=outcome)
        for reason in RejectReason:
            self.updates_rejected.labels(reason=reason.value)

    def count(self, outcome: str, n: int = 1) -> None:
        """``n`` more messages of ``outcome``: one of :data:`OUTCOMES` or a
        :class:`~faultfleet.wire.codec.RejectReason`'s value."""
        if outcome in OUTCOMES:
            self.messages.labels(outcome=outcome).inc(n)
        else:
            self.updates_rejected.labels(reason=outcome).inc(n)
