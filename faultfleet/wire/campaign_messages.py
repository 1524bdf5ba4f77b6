"""The campaign, promotion and placement notes the coordinator's retained status carries.

:class:`~faultfleet.wire.messages.CoordinatorStatus` (schema version 5) tells agents and
``faultfleet status`` which training campaign runs (:class:`CampaignNote`), what the
promotion gate decided lately (:class:`PromotionNote`) and where machines that joined were
placed (:class:`PlacementNote`). Agents read the campaign id only:
newly labelled data joins an agent's training at the first task of a new campaign, never in
the middle of one (:mod:`edge_agent.labelled_data`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

NonNegative = Annotated[int, Field(ge=0)]
Ratio = Annotated[float, Field(ge=0, le=1)]
CampaignId = Annotated[str, Field(pattern="^c[0-9]{1,9}$")]
"""``c1``, ``c2``, …: the campaign's number in the coordinator's state directory."""
CampaignTriggerName = Literal["first_start", "schedule", "labels", "command"]
CampaignStatusName = Literal["running", "done", "stopped"]
MAX_RECENT_PROMOTIONS = 10
MAX_PLACEMENTS = 100
"""Placements the status carries: every unverified one, then the newest, up to this many."""
MAX_SCORES = 3
"""Candidates of a placement the status lists, best first (the state directory keeps all)."""


class _Note(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class CampaignNote(_Note):
    """The current campaign (running) or, between campaigns, the last one."""

    campaign_id: CampaignId
    trigger: CampaignTriggerName
    """What started it: the first start, the schedule, new labelled windows, an operator."""
    status: CampaignStatusName
    start_round: NonNegative
    """The server round before its first round: its rounds are start_round+1 … end_round."""
    end_round: NonNegative
    rounds_done: NonNegative
    """Rounds of the campaign completed so far (``round x`` of ``end_round - start_round``)."""
    started_at: float
    ended_at: float | None = None
    next_scheduled_at: float | None = None
    """Unix time the schedule starts the next campaign; None without a schedule."""
    new_labelled_windows: NonNegative = 0
    """Labelled windows the agents reported since this campaign started."""
    min_new_labelled_windows: NonNegative = 0
    """How many start the next campaign; 0 when new labels start none."""


class PromotionNote(_Note):
    """One decision about a cluster model version (newest last in the status)."""

    cluster_id: Annotated[str, Field(min_length=1, max_length=200)]
    version: Annotated[int, Field(ge=1)]
    decision: Literal["promoted", "rejected", "pinned", "rollback"]
    candidate_accuracy: Ratio | None = None
    serving_accuracy: Ratio | None = None
    campaign_id: CampaignId | None = None
    server_round: NonNegative = 0
    created_at: float = 0.0


class CandidateNote(_Note):
    """One serving cluster model as a machine scored it on its validation windows."""

    cluster_id: Annotated[str, Field(min_length=1, max_length=200)]
    loss: Annotated[float, Field(ge=0)]
    """Mean cross-entropy, nats."""
    accuracy: Ratio
    windows: NonNegative = 0


class PlacementNote(_Note):
    """Where the coordinator placed a machine that joined (or whose data changed), and why.

    ``basis`` is ``evaluation`` when the machine's own validation windows chose the cluster
    (lowest loss, ``scores`` best first), ``most_members`` when it had no labelled windows
    or no evaluation came back (``note`` says why): then it is *unverified*.
    """

    agent_id: Annotated[str, Field(min_length=1, max_length=200)]
    cluster_id: Annotated[str, Field(min_length=1, max_length=200)]
    model_version: Annotated[int, Field(ge=1)]
    basis: Literal["evaluation", "most_members"]
    verified: bool
    scores: tuple[CandidateNote, ...] = Field(default=(), max_length=1000)
    note: Annotated[str, Field(max_length=500)] = ""
    member: bool = False
    """Already a member of the federation (its labelled data changed)."""
    labelled_windows: NonNegative = 0
    seen_at: float = 0.0
    """When the coordinator first found it needed placing: the start of the pass that
    placed it the first time (its Unix time)."""
    placed_at: float = 0.0
    """When its latest placement was decided, after its evaluations came back."""
    server_round: NonNegative = 0
    joined_round: NonNegative | None = None
    """The first round it trains in, once it joined the federation; None before."""
