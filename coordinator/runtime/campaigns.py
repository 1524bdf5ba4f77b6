"""The coordinator as a service: training campaigns, and serving between them.

:class:`CampaignRunner` is the service's loop once the run is set up. It runs the running
campaign's rounds through the :class:`~coordinator.runtime.round_loop.RoundLoop`, then
serves between campaigns: every ``[models] request_poll_s`` it publishes the operators'
pins and rollbacks (``faultfleet models``), serves newcomers, reads the campaign requests
(``faultfleet campaign start|stop``) and asks the :class:`CampaignBook` whether a campaign
is due (command, schedule, newly labelled windows; :mod:`coordinator.engine.campaigns`).

A campaign warm-starts from the strategy's current models and clusters: the engine, its
round counter and the strategy's state carry on, and the new versions it makes go through
the promotion gate with the campaign's id in their registry record. ``faultfleet campaign
start --recluster`` starts the strategy afresh instead (:func:`restart_strategy`), as at
the first start.

**Newcomers.** :attr:`CampaignRunner.serve_newcomers` is called between campaigns (every
poll) and before every round: a machine that joined is offered the cluster models and
served at once there (:mod:`coordinator.runtime.newcomers`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.adapters.campaign_store import CampaignRequest, CampaignStore, CampaignStoreError
from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.engine.campaigns import CampaignStatus, CampaignTrigger, ServicePhase
from coordinator.engine.rounds import RoundEngine
from coordinator.runtime.campaign_book import CampaignBook, LabelledCounts
from coordinator.runtime.round_loop import RoundHooks, RoundLoop
from coordinator.runtime.settings import RunSettings
from coordinator.strategies.registry import make_strategy
from faultfleet.clock import SYSTEM_CLOCK, Clock

logger = logging.getLogger(__name__)


def restart_strategy(engine: RoundEngine, run: RunSettings, clients: list[str]) -> None:
    """Replace the engine's strategy by a fresh one over ``clients``: new initial models
    and clusters learnt again, as at the first start (the round counter carries on)."""
    strategy = make_strategy(run.strategy, fraction=run.fraction, options=run.strategy_options)
    strategy.initialize(clients, engine.model_factory)
    engine.strategy = strategy


def _nothing() -> None:
    return None


@dataclass
class CampaignRunner:
    """Runs campaigns and serves between them until stopped.

    Attributes
    ----------
    loop : RoundLoop
    book : CampaignBook
    counts : LabelledCounts
    run : RunSettings
    metrics : CoordinatorMetrics
    poll_s : float
        Seconds between two looks at requests and triggers between campaigns.
    publish_status : callable
        Publishes the coordinator's retained status (called with ``"online"``).
    serve_newcomers : callable
        Called between campaigns and before every round (see the module docstring).
    clock : Clock
        Waits between two looks at requests and triggers.
    """

    loop: RoundLoop
    book: CampaignBook
    counts: LabelledCounts
    run: RunSettings
    metrics: CoordinatorMetrics
    poll_s: float
    publish_status: Callable[[str], None]
    serve_newcomers: Callable[[], None] = _nothing
    clock: Clock = SYSTEM_CLOCK

    @property
    def store(self) -> CampaignStore:
        return self.book.store

    def start(self) -> None:
        """Load or make the campaigns (after the run was set up) and report them."""
        if self.book.resume(self.loop.live.engine.server_round, self.counts.snapshot()):
            self.metrics.count_campaign(CampaignTrigger.FIRST_START)
        self._report()

    def serve(self, stop: threading.Event, *, exit_when_done: bool = False) -> None:
        """Campaigns and serving until ``stop``; with ``exit_when_done``, return once no
        campaign runs (after the running one, the first at a first start)."""
        while not stop.is_set():
            if self.book.current is None:
                if exit_when_done:
                    return
                self._between_campaigns()
                if self.book.current is None:
                    self.clock.wait(stop, self.poll_s)
                    continue
            self._campaign(stop)

    # -- one campaign ------------------------------------------------------------------------

    def _campaign(self, stop: threading.Event) -> None:
        campaign = self.book.current
        assert campaign is not None
        live = self.loop.live
        live.promotion.campaign_id = campaign.campaign_id
        live.summary.rounds = campaign.end_round
        live.summary.finished = False
        self._report()
        hooks = RoundHooks(between_rounds=self._between_rounds, after_round=self._refresh)
        ended_early = self.loop.train(stop, end_round=campaign.end_round, hooks=hooks)
        server_round = live.engine.server_round
        if ended_early:
            if campaign.rounds_done(server_round) > 0:
                self.loop.publish_last()
            self.book.finish(CampaignStatus.STOPPED, server_round)
        elif server_round >= campaign.end_round:
            self.book.finish(CampaignStatus.DONE, server_round)
        else:
            return  # stopped: the campaign goes on after a restart
        self._report()

    def _between_rounds(self) -> bool:
        self.serve_newcomers()
        self._observe_counts()
        pending = self._pending()
        if "stop" in pending:
            self.store.done("stop")
            logger.info("campaign stop requested; the campaign ends before its next round")
            return False
        return True

    def _refresh(self) -> None:
        """After a round: the campaign's progress into the summary (the status follows)."""
        self._set_summary()

    # -- between campaigns -------------------------------------------------------------------

    def _between_campaigns(self) -> None:
        serving = self.loop.serving
        version = serving.summary.model_version
        serving.apply_requests()
        if serving.summary.model_version != version:  # a pin or rollback: report it
            self.loop.checkpoint.write_summary(serving.summary)
            self.publish_status("online")
        self.serve_newcomers()
        changed = self._observe_counts()
        pending = self._pending()
        if "stop" in pending:
            self.store.done("stop")
            logger.info("campaign stop requested, but no campaign runs; nothing to stop")
        request = pending.get("start")
        counts = self.counts.snapshot()
        trigger = self.book.due(counts, commanded=request is not None)
        if trigger is None:
            if changed:
                self._report()
            return
        self._open(trigger, request, counts)

    def _open(
        self, trigger: CampaignTrigger, request: CampaignRequest | None, counts: dict[str, int]
    ) -> None:
        rounds = (request.rounds if request else None) or self.book.settings.rounds
        recluster = request is not None and request.recluster
        live = self.loop.live
        if recluster:
            restart_strategy(live.engine, self.run, list(live.summary.agents))
        self.book.start(
            trigger,
            live.engine.server_round,
            counts,
            rounds=rounds or self.run.rounds,
            recluster=recluster,
        )
        if recluster:
            self.loop.save()  # a restart continues with the fresh strategy
        if request is not None:
            self.store.done("start")
        self.metrics.count_campaign(trigger)

    def _pending(self) -> dict[str, CampaignRequest]:
        try:
            return self.store.pending()
        except CampaignStoreError as error:  # a corrupt request file: logged, serving goes on
            logger.error("campaign requests not read: %s", error)
            return {}

    def _observe_counts(self) -> bool:
        counts = self.counts.snapshot()
        changed = self.book.observe(counts)
        self.metrics.set_new_labelled_windows(self.book.new_windows(counts))
        return changed

    # -- reporting ---------------------------------------------------------------------------

    def _set_summary(self) -> None:
        live = self.loop.live
        note = self.book.note(live.engine.server_round, self.counts.snapshot())
        live.summary.campaign = None if note is None else note.model_dump(mode="json")
        live.summary.finished = self.book.current is None

    def _report(self) -> None:
        """Campaign state into the metrics, the summary and the retained status."""
        running = self.book.current is not None
        self.metrics.set_phase(ServicePhase.RUNNING if running else ServicePhase.IDLE)
        self._set_summary()
        self.loop.checkpoint.write_summary(self.loop.live.summary)
        self.publish_status("online")
