"""Training campaigns: what one is, and when the next one starts. Pure logic.

The coordinator runs as a service and trains in *campaigns*: a number of rounds, warm-started
from the strategy's current models and clusters. A campaign starts

* at the first start of a coordinator (``first_start``: ``run.rounds`` rounds, as a plain run);
* on a schedule (``schedule``): once ``every_s`` seconds have passed since the last campaign
  started, whatever started it;
* when the agents report enough newly labelled windows (``labels``): the sum over agents of
  the growth of each agent's labelled-window count since the last campaign started
  (:func:`new_labelled_windows`) reaches ``min_new_labelled_windows``;
* on an operator's command (``command``: ``faultfleet campaign start``).

An operator's command goes first, then the schedule, then labels (:func:`due_trigger`).
No clock and no files here: the time comes in as ``now`` (Unix seconds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum


class CampaignTrigger(StrEnum):
    """What started a campaign (a metric label value)."""

    FIRST_START = "first_start"
    SCHEDULE = "schedule"
    LABELS = "labels"
    COMMAND = "command"


class CampaignStatus(StrEnum):
    """Where a campaign stands."""

    RUNNING = "running"
    DONE = "done"
    """All its rounds ran."""
    STOPPED = "stopped"
    """Ended early by ``faultfleet campaign stop``."""


class ServicePhase(StrEnum):
    """What the coordinator service does (a metric label value)."""

    IDLE = "idle"
    """Between campaigns: serving models, waiting for a trigger."""
    RUNNING = "running"
    """A campaign runs its rounds."""


@dataclass(frozen=True)
class Campaign:
    """One training campaign.

    Attributes
    ----------
    number : int
        1 for the first campaign of a state directory; its id is ``c<number>``.
    trigger : CampaignTrigger
    start_round : int
        The server round before its first round.
    end_round : int
        Its last round; the campaign runs ``end_round - start_round`` rounds.
    started_at, ended_at : float
        Unix time, seconds; ``ended_at`` is None while it runs.
    recluster : bool
        The strategy was started afresh for it (``faultfleet campaign start --recluster``).
    """

    number: int
    trigger: CampaignTrigger
    start_round: int
    end_round: int
    started_at: float
    status: CampaignStatus = CampaignStatus.RUNNING
    ended_at: float | None = None
    recluster: bool = False

    def __post_init__(self) -> None:
        if self.number < 1 or self.start_round < 0 or self.end_round < self.start_round:
            raise ValueError(
                f"campaign {self.number}: rounds {self.start_round}..{self.end_round} are not "
                "a campaign (number >= 1, 0 <= start_round <= end_round)"
            )

    @property
    def campaign_id(self) -> str:
        return f"c{self.number}"

    @property
    def rounds(self) -> int:
        return self.end_round - self.start_round

    @property
    def running(self) -> bool:
        return self.status is CampaignStatus.RUNNING

    def rounds_done(self, server_round: int) -> int:
        """Rounds of this campaign completed when the engine stands at ``server_round``."""
        return min(self.rounds, max(0, server_round - self.start_round))

    def ended(self, status: CampaignStatus, at: float, server_round: int) -> Campaign:
        """This campaign ended at Unix time ``at`` after round ``server_round``."""
        end = self.end_round if status is CampaignStatus.DONE else server_round
        return replace(self, status=status, ended_at=at, end_round=max(self.start_round, end))


def new_labelled_windows(counts: Mapping[str, int], baseline: Mapping[str, int]) -> int:
    """Labelled windows added since the baseline, summed over agents.

    Parameters
    ----------
    counts : mapping of str to int
        Agent → labelled windows it reports now.
    baseline : mapping of str to int
        Agent → its count when the last campaign started (or when it was first heard of,
        for an agent that appeared later). An agent missing here has added nothing yet.

    Returns
    -------
    int
        Sum of each agent's growth; a count that fell (recordings removed) adds 0.
    """
    return sum(max(0, n - baseline.get(agent, n)) for agent, n in counts.items())


def next_scheduled(last_started_at: float | None, every_s: float | None) -> float | None:
    """Unix time the schedule starts the next campaign; None without a schedule.

    Without any campaign yet the schedule is due at once (``0.0``).
    """
    if every_s is None:
        return None
    return 0.0 if last_started_at is None else last_started_at + every_s


def due_trigger(
    *,
    now: float,
    commanded: bool,
    every_s: float | None,
    last_started_at: float | None,
    new_windows: int,
    min_new_windows: int,
) -> CampaignTrigger | None:
    """Which trigger starts a campaign now, if any (call it only between campaigns).

    Parameters
    ----------
    now : float
        Unix time, seconds.
    commanded : bool
        An operator asked for a campaign (``faultfleet campaign start``).
    every_s : float or None
        The schedule's period, seconds; None: no schedule.
    last_started_at : float or None
        When the last campaign started; None if none did.
    new_windows : int
        :func:`new_labelled_windows` now.
    min_new_windows : int
        Threshold for ``labels``; 0 switches that trigger off.
    """
    if commanded:
        return CampaignTrigger.COMMAND
    due = next_scheduled(last_started_at, every_s)
    if due is not None and now >= due:
        return CampaignTrigger.SCHEDULE
    if min_new_windows > 0 and new_windows >= min_new_windows:
        return CampaignTrigger.LABELS
    return None
