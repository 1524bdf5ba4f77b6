"""The campaigns in ``state_dir/campaigns``: state, requests, and a corrupt file named."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.adapters.campaign_store import (
    CampaignRecord,
    CampaignRequest,
    CampaignState,
    CampaignStore,
    CampaignStoreError,
)
from coordinator.engine.campaigns import Campaign, CampaignTrigger


def test_the_state_round_trips_and_numbers_the_next_campaign(tmp_path: Path) -> None:
    # Prepare
    store = CampaignStore(tmp_path / "campaigns")
    first = Campaign(1, CampaignTrigger.FIRST_START, 0, 40, 1.0)
    state = CampaignState(campaigns=(CampaignRecord.of(first),), baseline={"m00": 120})

    # Execute
    before = store.load()
    store.save(state)
    loaded = store.load()

    # Assert
    assert before is None
    assert loaded == state
    assert loaded is not None
    assert loaded.last == first
    assert loaded.next_number == 2


def test_requests_wait_until_done(tmp_path: Path) -> None:
    # Prepare
    store = CampaignStore(tmp_path / "campaigns")
    start = CampaignRequest(action="start", rounds=5, recluster=True, requested_at=2.0)

    # Execute
    store.request(start)
    store.request(CampaignRequest(action="stop", requested_at=3.0))
    pending = store.pending()
    store.done("stop")

    # Assert
    assert pending == {"start": start, "stop": CampaignRequest(action="stop", requested_at=3.0)}
    assert store.pending() == {"start": start}


def test_a_corrupt_file_is_named_with_what_to_do(tmp_path: Path) -> None:
    # Prepare
    store = CampaignStore(tmp_path / "campaigns")
    store.state_path.parent.mkdir(parents=True)
    store.state_path.write_text("{not json", encoding="utf-8")

    # Execute / Assert
    with pytest.raises(CampaignStoreError, match=r"state\.json is unreadable .* restore it"):
        store.load()
