"""The service loop: campaigns one after another, started by labels, commands and restarts.

The rounds are a stand-in loop that counts them (the real rounds run in the integration
tests); the clock is a :class:`~tests.clocks.FakeClock`, so no test waits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from coordinator.adapters.campaign_store import CampaignRequest, CampaignStore
from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.engine.campaigns import CampaignStatus, CampaignTrigger
from coordinator.runtime.campaign_book import CampaignBook, LabelledCounts
from coordinator.runtime.campaigns import CampaignRunner
from coordinator.runtime.round_loop import RoundHooks, RoundLoop
from coordinator.runtime.run_summary import RunSummary
from coordinator.runtime.settings import CampaignSettings, RunSettings
from faultfleet.wire.messages import AgentStatus
from tests.clocks import FakeClock, Wait
from tests.coordinator.fakes import seeded_factory
from tests.faultfleet.scrape import value

RUN = RunSettings(strategy="fedavg", rounds=3, fraction=1.0)


class CountingLoop:
    """The parts of a RoundLoop the runner uses; a round only moves the round counter."""

    def __init__(self, summary: RunSummary, server_round: int = 0) -> None:
        strategy = SimpleNamespace(name="initial")
        engine = SimpleNamespace(
            server_round=server_round, strategy=strategy, model_factory=seeded_factory()
        )
        self.live = SimpleNamespace(
            engine=engine, summary=summary, promotion=SimpleNamespace(campaign_id=None)
        )
        self.serving = SimpleNamespace(summary=summary, apply_requests=lambda: None)
        self.checkpoint = SimpleNamespace(write_summary=lambda summary: None)
        self.rounds: list[tuple[str | None, int]] = []
        self.published_last: list[int] = []
        self.saves = 0
        self.on_round: Callable[[int], None] = lambda server_round: None

    def train(self, stop: threading.Event, *, end_round: int, hooks: RoundHooks) -> bool:
        engine = self.live.engine
        while engine.server_round < end_round and not stop.is_set():
            if not hooks.between_rounds():
                return True
            engine.server_round += 1
            hooks.after_round()
            self.rounds.append((self.live.promotion.campaign_id, engine.server_round))
            self.on_round(engine.server_round)
        return False

    def publish_last(self) -> None:
        self.published_last.append(self.live.engine.server_round)

    def save(self) -> None:
        self.saves += 1


def runner(
    tmp_path: Path,
    clock: FakeClock,
    loop: CountingLoop,
    counts: LabelledCounts | None = None,
    **settings: object,
) -> tuple[CampaignRunner, CoordinatorMetrics]:
    campaign_settings = CampaignSettings(**({"rounds": 2} | settings))  # type: ignore[arg-type]
    metrics = CoordinatorMetrics()
    book = CampaignBook(
        CampaignStore(tmp_path / "campaigns"),
        campaign_settings,
        first_rounds=RUN.rounds,
        clock=clock.time,
    )
    run = CampaignRunner(
        cast(RoundLoop, loop),
        book,
        counts or LabelledCounts(),
        RUN,
        metrics,
        poll_s=5.0,
        publish_status=lambda state: None,
        clock=clock,
    )
    run.start()
    return run, metrics


def campaigns_total(metrics: CoordinatorMetrics, trigger: CampaignTrigger) -> float:
    return value(metrics.registry, "faultfleet_campaigns_total", trigger=trigger.value)


def report(counts: LabelledCounts, agent: str, windows: int) -> None:
    counts.update(AgentStatus(agent_id=agent, state="online", labelled_windows=windows))


def test_the_first_start_runs_run_rounds_and_exit_when_done_returns_after_it(
    tmp_path: Path,
) -> None:
    # Prepare
    summary = RunSummary(run_id="r", strategy="fedavg")
    loop = CountingLoop(summary)
    campaigns, metrics = runner(tmp_path, FakeClock(), loop)

    # Execute
    campaigns.serve(threading.Event(), exit_when_done=True)

    # Assert
    assert loop.rounds == [("c1", 1), ("c1", 2), ("c1", 3)]
    assert summary.finished
    assert summary.campaign is not None
    assert (summary.campaign["status"], summary.campaign["rounds_done"]) == ("done", 3)
    assert campaigns_total(metrics, CampaignTrigger.FIRST_START) == 1
    assert value(metrics.registry, "faultfleet_campaign_state", state="idle") == 1


def test_new_labels_start_the_next_campaign_which_warm_starts(tmp_path: Path) -> None:
    # Prepare: m00 reports 600 more labelled windows during the first idle wait
    stop = threading.Event()
    counts = LabelledCounts()
    report(counts, "m00", 1_000)
    clock = FakeClock(on_wait=lambda wait: report(counts, "m00", 1_600))
    summary = RunSummary(run_id="r", strategy="fedavg")
    loop = CountingLoop(summary)
    loop.on_round = lambda server_round: stop.set() if server_round == 5 else None
    campaigns, metrics = runner(tmp_path, clock, loop, counts, min_new_labelled_windows=500)
    strategy = loop.live.engine.strategy

    # Execute
    campaigns.serve(stop)

    # Assert: c2 ran rounds 4 and 5 on the same strategy
    assert loop.rounds[3:] == [("c2", 4), ("c2", 5)]
    assert loop.live.engine.strategy is strategy
    last = campaigns.book.last
    assert last is not None
    assert (last.trigger, last.status) == (
        CampaignTrigger.LABELS,
        CampaignStatus.DONE,
    )
    assert campaigns.book.state.baseline == {"m00": 1_600}
    assert campaigns_total(metrics, CampaignTrigger.LABELS) == 1
    # new windows count from c2's start again
    assert value(metrics.registry, "faultfleet_new_labelled_windows") == 0


def test_a_command_starts_a_campaign_and_a_stop_ends_it_before_its_next_round(
    tmp_path: Path,
) -> None:
    # Prepare: after the first campaign, an operator asks for 5 rounds and stops after 2
    stop = threading.Event()
    summary = RunSummary(run_id="r", strategy="fedavg")
    loop = CountingLoop(summary)
    campaigns, metrics = runner(tmp_path, FakeClock(), loop)
    store = campaigns.store
    store.request(CampaignRequest(action="start", rounds=5, requested_at=0.0))

    def on_round(server_round: int) -> None:
        if server_round == 5:
            store.request(CampaignRequest(action="stop", requested_at=0.0))
        if server_round == 6:
            stop.set()

    loop.on_round = on_round

    def on_wait(wait: Wait) -> None:
        if campaigns.book.last is not None and campaigns.book.last.number == 2:
            stop.set()  # the stopped campaign is over: end the test

    campaigns.clock = FakeClock(on_wait=on_wait)

    # Execute
    campaigns.serve(stop)

    # Assert
    last = campaigns.book.last
    assert loop.rounds[3:] == [("c2", 4), ("c2", 5)]
    assert last is not None
    assert (last.trigger, last.status, last.end_round) == (
        CampaignTrigger.COMMAND,
        CampaignStatus.STOPPED,
        5,
    )
    assert loop.published_last == [5]
    assert store.pending() == {}
    assert campaigns_total(metrics, CampaignTrigger.COMMAND) == 1


def test_recluster_starts_the_strategy_afresh(tmp_path: Path) -> None:
    # Prepare
    stop = threading.Event()
    summary = RunSummary(run_id="r", strategy="fedavg", agents=["m00", "m01"])
    loop = CountingLoop(summary)
    loop.on_round = lambda server_round: stop.set() if server_round == 4 else None
    campaigns, _ = runner(tmp_path, FakeClock(), loop)
    campaigns.store.request(CampaignRequest(action="start", recluster=True, requested_at=0.0))
    before = loop.live.engine.strategy

    # Execute
    campaigns.serve(stop)

    # Assert: a fresh FedAvg over the federation, saved before its first round
    strategy: Any = loop.live.engine.strategy
    assert strategy is not before
    assert (strategy.name, strategy.client_ids_) == ("fedavg", ("m00", "m01"))
    assert loop.saves == 1
    last = campaigns.book.last
    assert last is not None
    assert last.recluster


def test_a_coordinator_stopped_mid_campaign_continues_it_after_a_restart(
    tmp_path: Path,
) -> None:
    # Prepare: a command campaign of 2 rounds; the service stops after its first
    stop = threading.Event()
    summary = RunSummary(run_id="r", strategy="fedavg")
    loop = CountingLoop(summary)
    loop.on_round = lambda server_round: stop.set() if server_round == 4 else None
    first, _ = runner(tmp_path, FakeClock(), loop)
    first.store.request(CampaignRequest(action="start", requested_at=0.0))
    first.serve(stop)

    # Execute: a new process on the same state directory, engine at round 4
    again = CountingLoop(RunSummary(run_id="r", strategy="fedavg"), server_round=4)
    second, metrics = runner(tmp_path, FakeClock(), again)
    current = second.book.current
    second.serve(threading.Event(), exit_when_done=True)

    # Assert
    assert current is not None
    assert (current.campaign_id, current.rounds_done(4)) == ("c2", 1)
    assert again.rounds == [("c2", 5)]
    last = second.book.last
    assert last is not None
    assert last.status is CampaignStatus.DONE
    assert campaigns_total(metrics, CampaignTrigger.FIRST_START) == 0
