"""Envelopes between the coordinator and its ingest workers (MQTT 5 shared subscriptions).

Ingest workers (:mod:`coordinator.adapters.ingest_worker`) share the agents' results topic
through a shared subscription: each fit update reaches one of them, which checks, decodes
and journals it, folds it into its partial sums and forwards a compact summary. The
coordinator tells them what a round folds into with a retained :class:`IngestPlan` (body:
the round's models, safetensors, float32) and closes the round with :class:`IngestClose`;
a worker says it took the plan (:class:`IngestReady`), answers with one
:class:`UpdateSummary` per accepted update (body: the update's
unit sketch) and, at the close, one :class:`PartialSum` per model key (body: its weighted
mean update). Each worker keeps a retained :class:`IngestWorkerStatus` (last will:
``offline``), so the coordinator learns at once that a worker died mid-round.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from faultfleet.wire.messages import SCHEMA_VERSION

Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
NonNegative = Annotated[int, Field(ge=0)]
Finite = Annotated[float, Field(allow_inf_nan=False)]


class _Envelope(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    schema_version: Literal[5] = SCHEMA_VERSION
    run_id: Name
    server_round: NonNegative


class StreamBoundsNote(BaseModel):
    """Last round's lower medians of a model key (:class:`~coordinator.strategies.
    streaming.StreamBounds`); None: not measured."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    norm: Finite | None = None
    samples: Finite | None = None


class IngestPlan(_Envelope):
    """The round ingest workers fold updates for: its models (in the body, by key), the
    robust policy's rules and bounds, and the sketch every worker must draw alike."""

    kind: Literal["ingest_plan"] = "ingest_plan"
    model_keys: tuple[Name, ...]
    n_params: Annotated[int, Field(ge=1)]
    """Flat length of every model's weights."""
    clip_factor: Annotated[float, Field(ge=0)] = 0.0
    clip_norm: Annotated[float, Field(ge=0)] = 0.0
    weight_cap: Annotated[float, Field(ge=0)] = 0.0
    bounds: dict[Name, StreamBoundsNote] = Field(default_factory=dict)
    sketch_dim: NonNegative
    """The count sketch's dimension; 0: the strategy compares nothing, no sketch is drawn."""
    sketch_seed: NonNegative
    raw_means: bool = False
    """Also keep, per model key, the sample-weighted mean of the updates as sent (before
    the rules) and send it with the partial sums (CFL's ε₁ reads its norm)."""


class IngestClose(_Envelope):
    """The round is over: send its partial sums, after taking out of them the updates the
    coordinator refused (``refused``: worker id to task ids, e.g. a task whose answer
    another worker summarised first)."""

    kind: Literal["ingest_close"] = "ingest_close"
    refused: dict[Name, tuple[Name, ...]] = Field(default_factory=dict)
    closing: NonNegative = 0
    """Counts the closes of one round: a summary refused after a close (its worker had
    not yet seen it) makes the coordinator close again, and workers answer each close."""


class IngestReady(_Envelope):
    """A worker took the round's plan: updates it is handed from now on are folded."""

    kind: Literal["ingest_ready"] = "ingest_ready"
    worker_id: Name


class UpdateSummary(_Envelope):
    """One accepted update, journaled by ``worker_id``; the body holds its unit sketch
    (``sketch``; no tensor when the plan's sketch dimension is 0)."""

    kind: Literal["update_summary"] = "update_summary"
    worker_id: Name
    task_id: Name
    agent_id: Name
    model_key: Name
    num_samples: NonNegative
    train_loss: Finite
    norm: Annotated[float, Field(ge=0, allow_inf_nan=False)]


class PartialSum(_Envelope):
    """A worker's fold of one model key: ``weight`` = Σ w_i over its ``updates`` updates;
    the body holds Σ w_i s_i Δθ_i / Σ w_i (float32, ``mean``) and, when the plan asked for
    raw means and the rules change updates, Σ n_i Δθ_i / Σ n_i (``raw_mean``) with
    ``raw_weight`` = Σ n_i."""

    kind: Literal["partial_sum"] = "partial_sum"
    worker_id: Name
    model_key: Name
    weight: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    updates: NonNegative
    clipped: NonNegative = 0
    capped: NonNegative = 0
    closing: NonNegative = 0
    """The close this answers (:attr:`IngestClose.closing`)."""
    raw_weight: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    """Σ n_i of the updates as sent; set when the body holds ``raw_mean``."""


class IngestWorkerStatus(BaseModel):
    """Retained presence of an ingest worker on ``{root}/ingest/{worker}/status``: ``online``
    once connected, ``offline`` when it stops or (its last will) when it vanishes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[5] = SCHEMA_VERSION
    kind: Literal["ingest_worker_status"] = "ingest_worker_status"
    worker_id: Name
    state: Literal["online", "offline"]


PLAN_ADAPTER: TypeAdapter[IngestPlan | IngestClose] = TypeAdapter(
    Annotated[IngestPlan | IngestClose, Field(discriminator="kind")]
)
SUMMARY_ADAPTER: TypeAdapter[IngestReady | UpdateSummary | PartialSum] = TypeAdapter(
    Annotated[IngestReady | UpdateSummary | PartialSum, Field(discriminator="kind")]
)
WORKER_STATUS_ADAPTER: TypeAdapter[IngestWorkerStatus] = TypeAdapter(IngestWorkerStatus)
