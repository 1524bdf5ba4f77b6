"""When a campaign starts: schedule, newly labelled windows, an operator's command."""

from __future__ import annotations

import pytest

from coordinator.engine.campaigns import (
    Campaign,
    CampaignStatus,
    CampaignTrigger,
    due_trigger,
    new_labelled_windows,
    next_scheduled,
)

WEEK_S = 7 * 86_400.0
STARTED = 1_700_000_000.0


def due(**changes: object) -> CampaignTrigger | None:
    arguments: dict[str, object] = {
        "now": STARTED + 1.0,
        "commanded": False,
        "every_s": None,
        "last_started_at": STARTED,
        "new_windows": 0,
        "min_new_windows": 500,
    }
    return due_trigger(**(arguments | changes))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (STARTED + WEEK_S - 1.0, None),
        (STARTED + WEEK_S, CampaignTrigger.SCHEDULE),
        (STARTED + 3 * WEEK_S, CampaignTrigger.SCHEDULE),  # missed periods: one campaign
    ],
)
def test_the_schedule_is_due_a_period_after_the_last_start(
    now: float, expected: CampaignTrigger | None
) -> None:
    assert due(now=now, every_s=WEEK_S) is expected


def test_without_a_schedule_time_starts_nothing() -> None:
    assert due(now=STARTED + 100 * WEEK_S) is None
    assert next_scheduled(STARTED, None) is None
    assert next_scheduled(STARTED, WEEK_S) == STARTED + WEEK_S
    assert next_scheduled(None, WEEK_S) == 0.0


@pytest.mark.parametrize(
    ("new", "threshold", "expected"),
    [
        (499, 500, None),
        (500, 500, CampaignTrigger.LABELS),
        (10_000, 0, None),  # 0 switches the trigger off
    ],
)
def test_new_labelled_windows_start_a_campaign_from_the_threshold(
    new: int, threshold: int, expected: CampaignTrigger | None
) -> None:
    assert due(new_windows=new, min_new_windows=threshold) is expected


def test_a_command_goes_before_the_schedule_and_the_schedule_before_labels() -> None:
    late = STARTED + 2 * WEEK_S
    assert due(commanded=True, now=late, every_s=WEEK_S, new_windows=900) is CampaignTrigger.COMMAND
    assert due(now=late, every_s=WEEK_S, new_windows=900) is CampaignTrigger.SCHEDULE


def test_new_windows_count_each_agents_growth_since_its_baseline() -> None:
    # Prepare: m00 grew by 300, m01 shrank (a recording removed), m02 is new since the start
    counts = {"m00": 1_300, "m01": 200, "m02": 400}
    baseline = {"m00": 1_000, "m01": 500}

    # Execute
    new = new_labelled_windows(counts, baseline)

    # Assert: a shrinking agent adds nothing, an agent without a baseline adds nothing yet
    assert new == 300


def test_a_campaign_counts_its_rounds_and_ends_early_at_the_round_reached() -> None:
    # Prepare
    campaign = Campaign(3, CampaignTrigger.LABELS, start_round=40, end_round=50, started_at=1.0)

    # Execute
    stopped = campaign.ended(CampaignStatus.STOPPED, at=9.0, server_round=44)
    done = campaign.ended(CampaignStatus.DONE, at=9.0, server_round=50)

    # Assert
    assert (campaign.campaign_id, campaign.rounds, campaign.running) == ("c3", 10, True)
    assert [campaign.rounds_done(r) for r in (30, 40, 43, 50, 60)] == [0, 0, 3, 10, 10]
    assert (stopped.status, stopped.end_round, stopped.ended_at) == (
        CampaignStatus.STOPPED,
        44,
        9.0,
    )
    assert (done.end_round, done.running) == (50, False)


def test_a_campaign_needs_a_number_and_rounds_in_order() -> None:
    with pytest.raises(ValueError, match="not a campaign"):
        Campaign(0, CampaignTrigger.COMMAND, 0, 5, 1.0)
    with pytest.raises(ValueError, match="not a campaign"):
        Campaign(1, CampaignTrigger.COMMAND, 6, 5, 1.0)
