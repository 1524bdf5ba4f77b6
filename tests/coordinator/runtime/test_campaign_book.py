"""The campaigns a coordinator keeps: the first at the first start, restarts, new labels."""

from __future__ import annotations

from pathlib import Path

from coordinator.adapters.campaign_store import CampaignStore
from coordinator.engine.campaigns import CampaignStatus, CampaignTrigger
from coordinator.runtime.campaign_book import CampaignBook, LabelledCounts
from coordinator.runtime.settings import CampaignSettings
from faultfleet.wire.messages import AgentStatus
from tests.clocks import FakeClock

DAY_S = 86_400.0


def book(
    path: Path, clock: FakeClock, *, first_rounds: int = 10, **settings: object
) -> CampaignBook:
    return CampaignBook(
        CampaignStore(path / "campaigns"),
        CampaignSettings(**settings),  # type: ignore[arg-type]
        first_rounds=first_rounds,
        clock=clock.time,
    )


def test_the_first_start_opens_the_first_campaign_with_run_rounds(tmp_path: Path) -> None:
    # Prepare
    clock = FakeClock()
    campaigns = book(tmp_path, clock)

    # Execute
    made = campaigns.resume(0, {"m00": 100})

    # Assert
    current = campaigns.current
    assert made
    assert current is not None
    assert (current.campaign_id, current.trigger, current.start_round, current.end_round) == (
        "c1",
        CampaignTrigger.FIRST_START,
        0,
        10,
    )
    assert campaigns.state.baseline == {"m00": 100}


def test_a_restart_mid_campaign_continues_it(tmp_path: Path) -> None:
    # Prepare: c1 done, c2 (labels) running from round 10 to 15, stopped at round 12
    clock = FakeClock()
    before = book(tmp_path, clock)
    before.resume(0, {})
    before.finish(CampaignStatus.DONE, 10)
    before.start(CampaignTrigger.LABELS, 10, {"m00": 700}, rounds=5)

    # Execute: a new coordinator process on the same state directory
    after = book(tmp_path, clock)
    made = after.resume(12, {})

    # Assert
    current = after.current
    assert not made
    assert current is not None
    assert (current.campaign_id, current.trigger, current.end_round) == (
        "c2",
        CampaignTrigger.LABELS,
        15,
    )
    assert current.rounds_done(12) == 2
    assert after.state.baseline == {"m00": 700}


def test_a_restart_after_the_last_round_of_a_campaign_closes_it(tmp_path: Path) -> None:
    # Prepare
    clock = FakeClock()
    before = book(tmp_path, clock)
    before.resume(0, {})
    before.finish(CampaignStatus.DONE, 10)
    before.start(CampaignTrigger.COMMAND, 10, {}, rounds=5)

    # Execute: the checkpoint of round 15 was written, the campaign's end was not
    after = book(tmp_path, clock)
    after.resume(15, {})

    # Assert
    assert after.current is None
    assert after.last is not None
    assert after.last.status is CampaignStatus.DONE


def test_a_state_directory_from_before_campaigns_gets_its_first_campaign_done(
    tmp_path: Path,
) -> None:
    # Execute: an engine checkpoint at round 10 of 10, no campaigns/state.json
    campaigns = book(tmp_path, FakeClock())
    campaigns.resume(10, {})

    # Assert
    last = campaigns.last
    assert campaigns.current is None
    assert last is not None
    assert (last.trigger, last.status) == (
        CampaignTrigger.FIRST_START,
        CampaignStatus.DONE,
    )


def test_raising_run_rounds_extends_the_first_campaign_as_before(tmp_path: Path) -> None:
    # Prepare: the first campaign of 10 rounds is done
    clock = FakeClock()
    book(tmp_path, clock, first_rounds=10).resume(10, {})

    # Execute: restarted with run.rounds = 20
    campaigns = book(tmp_path, clock, first_rounds=20)
    campaigns.resume(10, {})

    # Assert
    current = campaigns.current
    assert current is not None
    assert (current.campaign_id, current.end_round) == ("c1", 20)


def test_the_schedule_counts_from_the_last_start_on_the_injected_clock(tmp_path: Path) -> None:
    # Prepare
    clock = FakeClock()
    campaigns = book(tmp_path, clock, every="7d")
    campaigns.resume(0, {})
    campaigns.finish(CampaignStatus.DONE, 10)

    # Execute
    clock.advance(7 * DAY_S - 1)
    early = campaigns.due({}, commanded=False)
    clock.advance(1)
    on_time = campaigns.due({}, commanded=False)
    note = campaigns.note(10, {})

    # Assert
    assert (early, on_time) == (None, CampaignTrigger.SCHEDULE)
    assert note is not None
    assert note.next_scheduled_at == clock.time()


def test_labelled_windows_of_a_later_agent_count_from_its_first_report(tmp_path: Path) -> None:
    # Prepare: m00 was there at the start; m01 is first heard of later with 900 windows
    clock = FakeClock()
    campaigns = book(tmp_path, clock, min_new_labelled_windows=500)
    campaigns.resume(0, {"m00": 1_000})
    campaigns.finish(CampaignStatus.DONE, 10)

    # Execute
    campaigns.observe({"m00": 1_000, "m01": 900})
    before = campaigns.due({"m00": 1_000, "m01": 900}, commanded=False)
    counts = {"m00": 1_300, "m01": 1_100}
    changed = campaigns.observe(counts)
    after = campaigns.due(counts, commanded=False)

    # Assert: 300 + 200 new windows reach the threshold; the state file has them
    assert before is None
    assert changed
    assert campaigns.new_windows(counts) == 500
    assert after is CampaignTrigger.LABELS
    saved = CampaignStore(tmp_path / "campaigns").load()
    assert saved is not None
    assert saved.new_labelled_windows == 500


def test_labelled_counts_keep_an_agents_last_online_count() -> None:
    # Prepare
    counts = LabelledCounts()

    # Execute
    counts.update(AgentStatus(agent_id="m00", state="online", labelled_windows=640))
    counts.update(AgentStatus(agent_id="m00", state="offline"))

    # Assert
    assert counts.snapshot() == {"m00": 640}
