"""The coordinator's ``[ingest]`` section, which makes its fit rounds go through ingest
workers (docs/deploy.md, "Ingest workers"); the workers' own settings are in
:mod:`coordinator.runtime.ingest_worker_settings`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from coordinator.adapters.ingest_coordinator import IngestCoordinator
from coordinator.adapters.ingest_fleet import WorkerIngest
from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.runtime.ingest_worker_settings import Name
from coordinator.strategies.registry import make_strategy
from coordinator.strategies.streaming import StreamingStrategy
from faultfleet.clock import Clock
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.topics import Topics

logger = logging.getLogger(__name__)


class IngestSettings(BaseModel):
    """The coordinator's ``[ingest]`` section: the ingest workers its fit rounds go through.

    With no workers (the default) the coordinator checks, journals and folds every update
    itself. With workers, the strategy must stream its rounds (FLACC, FL+HC, CFL, FAACL,
    IFCA or JGL with ``pairwise = "sketch"``, FedAvg or fixed clusters with ``streaming =
    "on"``), and a trimmed mean and differential privacy must be off
    (:func:`check_ingest_strategy`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    workers: tuple[Name, ...] = ()
    """The ``worker_id`` of every ``faultfleet ingest-worker`` of the share group."""
    ready_timeout_s: Annotated[float, Field(gt=0)] = 10.0
    """How long a round's plan waits for every worker to take it; the round goes on with
    those that did (none: the round is tried again after ``run.retry_wait_s``)."""
    close_timeout_s: Annotated[float, Field(gt=0)] = 30.0
    """How long a round's close waits for the workers' partial sums; a worker that sends
    none is left out of the round with the updates it took (their tasks fail)."""

    @field_validator("workers")
    @classmethod
    def _distinct(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        repeated = sorted({w for w in value if value.count(w) > 1})
        if repeated:
            raise ValueError(f"ingest workers are listed more than once: {', '.join(repeated)}")
        return value


INGEST_STRATEGIES = ("cfl", "faacl", "flacc", "flhc", "ifca", "jgl")
"""Strategies whose fit rounds stream under sketches (``pairwise = "sketch"``) into sums
ingest workers can carry (CFL's with the mean of the updates as sent beside them, which its
ε₁ reads)."""
INGEST_AVERAGING = ("fedavg", "fixed")
"""Strategies that compare nothing and stream under ``streaming = "on"``: the workers fold
their updates without sketching them."""


def check_ingest_strategy(
    strategy: str,
    fraction: float,
    options: Mapping[str, Any],
    noise_multiplier: float,
    trim_fraction: float = 0.0,
) -> None:
    """Refuse a run that ingest workers cannot serve.

    Raises
    ------
    ValueError
        The strategy does not stream its rounds into partial sums, a trimmed mean is asked
        for (it needs every update at once), or differential privacy is on (its noise is
        drawn once, over every update).
    """
    built = make_strategy(strategy, fraction=fraction, options=options)
    if built.name in INGEST_AVERAGING:
        option, wanted = "streaming", "on"
    else:
        option, wanted = "pairwise", "sketch"
    value = getattr(built, option, None)
    known = built.name in INGEST_STRATEGIES + INGEST_AVERAGING
    if not (known and isinstance(built, StreamingStrategy)) or value != wanted:
        got = strategy if value is None else f"{strategy} with {option} = {value!r}"
        names = ", ".join(repr(name) for name in INGEST_STRATEGIES)
        raise ValueError(
            "ingest.workers needs a strategy that streams its rounds: strategy = "
            f"{names} with strategy_options.pairwise = 'sketch', or 'fedavg' or 'fixed' "
            f"with strategy_options.streaming = 'on' (got {got}); or leave ingest.workers "
            "empty"
        )
    if trim_fraction > 0:
        raise ValueError(
            "ingest.workers cannot serve a trimmed mean (aggregation.trim_fraction = "
            f"{trim_fraction:g}): it needs every update at once; set it to 0 or leave "
            "ingest.workers empty"
        )
    if noise_multiplier > 0:
        raise ValueError(
            "ingest.workers cannot serve differential privacy (aggregation.noise_multiplier "
            f"= {noise_multiplier:g}): its noise is drawn once over every update; set it to 0 "
            "or leave ingest.workers empty"
        )


def worker_ingest(
    settings: IngestSettings,
    connection: MqttConnection,
    metrics: CoordinatorMetrics,
    clock: Clock,
) -> WorkerIngest | None:
    """The coordinator's end of ``settings.workers`` on ``connection`` (whose settings give
    the topic root and payload bound); None when no worker is listed."""
    if not settings.workers:
        return None
    broker = connection.settings
    link = IngestCoordinator(
        connection,
        Topics(broker.topic_root),
        max_payload_bytes=broker.max_payload_bytes,
        clock=clock,
    )
    logger.info("fit rounds go through ingest workers %s", ", ".join(settings.workers))
    return WorkerIngest(
        link,
        settings.workers,
        metrics,
        ready_timeout_s=settings.ready_timeout_s,
        close_timeout_s=settings.close_timeout_s,
    )
