"""The coordinator's campaigns as the service keeps them: in memory and in ``state_dir``.

:class:`CampaignBook` holds the campaigns (:mod:`coordinator.engine.campaigns`), saves them
through :class:`~coordinator.adapters.campaign_store.CampaignStore` whenever they change,
and answers the questions of the campaign runner: which campaign runs, is one due, how many
labelled windows are new. :class:`LabelledCounts` collects the agents' labelled-window
counts from their retained status (the MQTT network thread writes, the service loop reads).

**The first campaign** is made at the first start, ``first_start`` with ``run.rounds``
rounds, exactly the run a coordinator without campaigns ran. While it is the only campaign
its last round follows ``run.rounds``, so raising ``run.rounds`` and restarting trains on as
before. A state directory of a coordinator without campaigns (an engine checkpoint, no
``campaigns/state.json``) gets the same first campaign, done if its rounds are.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from coordinator.adapters.campaign_store import CampaignRecord, CampaignState, CampaignStore
from coordinator.engine.campaigns import (
    Campaign,
    CampaignStatus,
    CampaignTrigger,
    due_trigger,
    new_labelled_windows,
    next_scheduled,
)
from coordinator.runtime.settings import CampaignSettings
from faultfleet.wire.campaign_messages import CampaignNote
from faultfleet.wire.messages import AgentStatus

logger = logging.getLogger(__name__)


class LabelledCounts:
    """Agent → labelled windows, from the agents' ``online`` statuses; thread-safe.

    An offline status (a last will) carries no count: the agent's last known count stays.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def update(self, status: AgentStatus) -> None:
        if status.state != "online":
            return
        with self._lock:
            self._counts[status.agent_id] = status.labelled_windows

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


class CampaignBook:
    """The campaigns of one coordinator.

    Parameters
    ----------
    store : CampaignStore
    settings : CampaignSettings
    first_rounds : int
        ``run.rounds``: the rounds of the first campaign.
    clock : callable
        Unix time, seconds.
    """

    def __init__(
        self,
        store: CampaignStore,
        settings: CampaignSettings,
        *,
        first_rounds: int,
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self.settings = settings
        self.first_rounds = first_rounds
        self.clock = clock
        self.state = CampaignState()

    # -- reading -----------------------------------------------------------------------------

    @property
    def last(self) -> Campaign | None:
        """The running campaign, or the last one; None before the first."""
        return self.state.last

    @property
    def current(self) -> Campaign | None:
        """The running campaign; None between campaigns."""
        last = self.last
        return last if last is not None and last.running else None

    def new_windows(self, counts: dict[str, int]) -> int:
        return new_labelled_windows(counts, self.state.baseline)

    def note(self, server_round: int, counts: dict[str, int]) -> CampaignNote | None:
        """The campaign as the coordinator's status reports it; None before the first."""
        last = self.last
        if last is None:
            return None
        return CampaignNote(
            campaign_id=last.campaign_id,
            trigger=last.trigger.value,
            status=last.status.value,
            start_round=last.start_round,
            end_round=last.end_round,
            rounds_done=last.rounds_done(server_round),
            started_at=last.started_at,
            ended_at=last.ended_at,
            next_scheduled_at=next_scheduled(last.started_at, self.settings.every_s),
            new_labelled_windows=self.new_windows(counts),
            min_new_labelled_windows=self.settings.min_new_labelled_windows,
        )

    def due(self, counts: dict[str, int], *, commanded: bool) -> CampaignTrigger | None:
        """Which trigger starts a campaign now (call between campaigns only)."""
        last = self.last
        return due_trigger(
            now=self.clock(),
            commanded=commanded,
            every_s=self.settings.every_s,
            last_started_at=last.started_at if last is not None else None,
            new_windows=self.new_windows(counts),
            min_new_windows=self.settings.min_new_labelled_windows,
        )

    # -- changing ----------------------------------------------------------------------------

    def resume(self, server_round: int, counts: dict[str, int]) -> bool:
        """Load the saved campaigns, or make the first; settle a campaign whose rounds ran.

        ``server_round`` is the engine's round after setting up (0 at a first start).
        True when it made the first campaign.
        """
        saved = self.store.load()
        self.state = saved if saved is not None else CampaignState()
        last = self.last
        made = last is None
        if last is None:
            self._put(
                Campaign(1, CampaignTrigger.FIRST_START, 0, self.first_rounds, self.clock()),
                baseline=counts,
            )
            last = self.last
            assert last is not None
        if len(self.state.campaigns) == 1 and last.trigger is CampaignTrigger.FIRST_START:
            last = self._follow_run_rounds(last, server_round)
        if last.running and server_round >= last.end_round:
            self.finish(CampaignStatus.DONE, server_round)
        elif last.running and not made:
            logger.info(
                "continuing campaign %s (%s) at round %d of %d",
                last.campaign_id,
                last.trigger.value,
                last.rounds_done(server_round),
                last.rounds,
            )
        return made

    def _follow_run_rounds(self, first: Campaign, server_round: int) -> Campaign:
        """The first campaign ends at ``run.rounds``, also after it was changed."""
        end = max(first.start_round, self.first_rounds)
        if first.end_round == end:
            return first
        running = server_round < end
        updated = Campaign(
            first.number,
            first.trigger,
            first.start_round,
            end,
            first.started_at,
            status=CampaignStatus.RUNNING if running else first.status,
            ended_at=None if running else first.ended_at,
        )
        self._put(updated, replace_last=True)
        return updated

    def start(
        self,
        trigger: CampaignTrigger,
        server_round: int,
        counts: dict[str, int],
        *,
        rounds: int,
        recluster: bool = False,
    ) -> Campaign:
        """Open the next campaign at ``server_round``; the counts become the baseline."""
        campaign = Campaign(
            self.state.next_number,
            trigger,
            server_round,
            server_round + rounds,
            self.clock(),
            recluster=recluster,
        )
        self._put(campaign, baseline=counts)
        logger.info(
            "campaign %s started (%s): rounds %d to %d%s",
            campaign.campaign_id,
            trigger.value,
            campaign.start_round + 1,
            campaign.end_round,
            ", strategy started afresh" if recluster else "",
        )
        return campaign

    def finish(self, status: CampaignStatus, server_round: int) -> Campaign:
        """End the running campaign after ``server_round``."""
        current = self.current
        if current is None:
            raise RuntimeError("no campaign runs; nothing to finish")
        ended = current.ended(status, self.clock(), server_round)
        self._put(ended, replace_last=True)
        logger.info(
            "campaign %s %s after %d round(s)",
            ended.campaign_id,
            status.value,
            ended.rounds_done(server_round),
        )
        return ended

    def observe(self, counts: dict[str, int]) -> bool:
        """Take the first count of agents heard of since the last campaign started as their
        baseline, and remember the new windows; True (and saved) when something changed."""
        baseline = dict(self.state.baseline)
        for agent, count in counts.items():
            baseline.setdefault(agent, count)
        new = new_labelled_windows(counts, baseline)
        if baseline == self.state.baseline and new == self.state.new_labelled_windows:
            return False
        self.state = self.state.model_copy(
            update={"baseline": baseline, "new_labelled_windows": new}
        )
        self.store.save(self.state)
        return True

    def _put(
        self,
        campaign: Campaign,
        *,
        replace_last: bool = False,
        baseline: dict[str, int] | None = None,
    ) -> None:
        records = list(self.state.campaigns)
        if replace_last:
            records[-1] = CampaignRecord.of(campaign)
        else:
            records.append(CampaignRecord.of(campaign))
        update: dict[str, object] = {"campaigns": tuple(records)}
        if baseline is not None:
            update |= {"baseline": dict(baseline), "new_labelled_windows": 0}
        self.state = self.state.model_copy(update=update)
        self.store.save(self.state)
