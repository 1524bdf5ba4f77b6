"""The status document folded from the fleet's messages: states, last seen, what is served."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from paho.mqtt.client import topic_matches_sub

from faultfleet.wire.campaign_messages import CampaignNote, PlacementNote, PromotionNote
from faultfleet.wire.ingest_messages import IngestWorkerStatus
from faultfleet.wire.messages import AgentHeartbeat, AgentStatus, CoordinatorStatus, Diagnosis
from faultfleet.wire.topics import Topics
from faultfleet_apps.fleet_status.view import STATUS_SCHEMA_VERSION, FleetView

TOPICS = Topics()
NOW = 1_700_000_100.0


def status(agent: str, state: str, timestamp: float = 0.0, **fields: Any) -> bytes:
    message = AgentStatus(agent_id=agent, state=state, timestamp=timestamp, **fields)  # type: ignore[arg-type]
    return message.model_dump_json().encode()


def diagnosis(agent: str, class_name: str, probability: float, timestamp: float) -> Diagnosis:
    return Diagnosis(
        agent_id=agent,
        window_index=0,
        class_id=0,
        class_name=class_name,
        probability=probability,
        model_version=4,
        cluster_id="cluster-0",
        timestamp=timestamp,
    )


def heartbeat(agent: str, timestamp: float, **fields: Any) -> bytes:
    return AgentHeartbeat(agent_id=agent, timestamp=timestamp, **fields).model_dump_json().encode()


def fold(*messages: tuple[str, bytes], summary: dict[str, Any] | None = None) -> dict[str, Any]:
    view = FleetView(TOPICS, summary)
    handlers = view.routes(live=True)
    for topic, payload in messages:  # routed as the broker would
        for topic_filter, handler in handlers.items():
            if topic_matches_sub(topic_filter, topic):
                handler(topic, payload)
    snapshot = view.snapshot(now=NOW, broker="broker:1883")
    json.dumps(snapshot)  # the document is JSON as it stands
    return snapshot


def agents(snapshot: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["agent_id"]: row for row in snapshot["agents"]}


def test_each_state_and_how_an_agent_went_offline() -> None:
    # Execute
    snapshot = fold(
        (TOPICS.agent_status("m01"), status("m01", "online", 100.0, model_version=2)),
        (TOPICS.agent_status("m02"), status("m02", "offline", 90.0)),  # stopped cleanly
        (TOPICS.agent_status("m03"), status("m03", "offline")),  # the broker's last will
        (TOPICS.agent_status("m04"), status("m04", "retired", 95.0)),
        (TOPICS.heartbeat("m05"), heartbeat("m05", 80.0)),  # heard of by its heartbeat only
    )

    # Assert
    rows = agents(snapshot)
    assert {a: (r["state"], r["offline_cause"]) for a, r in rows.items()} == {
        "m01": ("online", None),
        "m02": ("offline", "stopped"),
        "m03": ("offline", "lost"),
        "m04": ("retired", None),
        "m05": ("unknown", None),
    }
    assert snapshot["counts"] == {"online": 1, "offline": 2, "retired": 1, "unknown": 1}
    assert [r["agent_id"] for r in snapshot["agents"]] == ["m01", "m02", "m03", "m04", "m05"]
    assert (snapshot["schema_version"], snapshot["generated_at"]) == (STATUS_SCHEMA_VERSION, NOW)
    assert (snapshot["broker"], snapshot["topic_root"]) == ("broker:1883", "faultfleet/v1")


def test_a_lost_agent_is_last_seen_at_its_last_heartbeat_and_keeps_its_last_diagnosis() -> None:
    # Prepare: the heartbeat came before the last will replaced the status
    last = diagnosis("m03", "A2O/outer-race", 0.97, 118.0)

    # Execute
    snapshot = fold(
        (
            TOPICS.heartbeat("m03"),
            heartbeat(
                "m03",
                120.0,
                cluster_id="cluster-0",
                model_version=4,
                last_diagnosis=last,
                streak_class="A2O/outer-race",
                streak_windows=12,
                windows_diagnosed=500,
            ),
        ),
        (TOPICS.agent_status("m03"), status("m03", "offline")),
    )

    # Assert
    row = agents(snapshot)["m03"]
    assert row["last_seen"] == 120.0
    assert row["status_time"] is None
    assert (row["cluster_id"], row["serving_model_version"]) == ("cluster-0", 4)
    assert row["last_diagnosis"] == {
        "class_name": "A2O/outer-race",
        "probability": 0.97,
        "timestamp": 118.0,
        "model_version": 4,
    }
    assert row["streak"] == {"class_name": "A2O/outer-race", "windows": 12}
    assert row["windows_diagnosed"] == 500


def test_a_retired_agent_is_last_seen_by_its_own_signs_of_life_not_the_retirement() -> None:
    # Execute
    snapshot = fold(
        (TOPICS.heartbeat("m04"), heartbeat("m04", 50.0)),
        (TOPICS.agent_status("m04"), status("m04", "retired", 95.0)),
    )

    # Assert
    row = agents(snapshot)["m04"]
    assert (row["state"], row["status_time"], row["last_seen"]) == ("retired", 95.0, 50.0)


def test_a_live_diagnosis_newer_than_the_heartbeat_is_the_last_one() -> None:
    # Prepare
    live = diagnosis("m01", "A1B1O/outer-race", 0.6, 130.0)

    # Execute
    snapshot = fold(
        (TOPICS.agent_status("m01"), status("m01", "online", 100.0)),
        (
            TOPICS.heartbeat("m01"),
            heartbeat("m01", 120.0, last_diagnosis=diagnosis("m01", "x", 0.9, 119.0)),
        ),
        (TOPICS.diagnoses("m01"), live.model_dump_json().encode()),
    )

    # Assert
    row = agents(snapshot)["m01"]
    assert row["last_diagnosis"]["class_name"] == "A1B1O/outer-race"
    assert row["last_seen"] == 130.0


@pytest.mark.parametrize(
    ("status_time", "heartbeat_time", "serving"),
    [(100.0, 120.0, 5), (130.0, 120.0, 3)],  # the newer report wins, even when lower (rollback)
)
def test_the_serving_version_is_the_newest_report(
    status_time: float, heartbeat_time: float, serving: int
) -> None:
    # Execute
    snapshot = fold(
        (TOPICS.agent_status("m01"), status("m01", "online", status_time, model_version=3)),
        (TOPICS.heartbeat("m01"), heartbeat("m01", heartbeat_time, model_version=5)),
    )

    # Assert
    assert agents(snapshot)["m01"]["serving_model_version"] == serving


def test_unreadable_or_misaddressed_messages_are_counted_and_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Execute
    with caplog.at_level(logging.WARNING, logger="faultfleet_apps.fleet_status.view"):
        snapshot = fold(
            (TOPICS.agent_status("m01"), b"{not json"),
            (TOPICS.agent_status("m02"), status("m01", "online", 1.0)),  # m01 on m02's topic
            (TOPICS.heartbeat("m03"), b'{"schema_version": 99}'),
            (TOPICS.agent_status("m04"), b""),  # a cleared retained status
            (TOPICS.agent_status("m05"), status("m05", "online", 1.0)),
        )

    # Assert
    assert list(agents(snapshot)) == ["m05"]
    assert snapshot["unreadable_messages"] == 3
    assert "speaks for agent 'm01'" in caplog.text


def test_the_coordinator_without_a_campaign_yet() -> None:
    # Prepare
    online = CoordinatorStatus(
        state="online", run_id="3f2a", server_round=12, strategy="flacc", timestamp=99.0
    )

    # Execute
    snapshot = fold((TOPICS.coordinator_status(), online.model_dump_json().encode()))

    # Assert
    assert snapshot["coordinator"] == {
        "state": "online",
        "run_id": "3f2a",
        "strategy": "flacc",
        "server_round": 12,
        "timestamp": 99.0,
        "campaign": None,
        "recent_promotions": [],
        "placements": [],
    }
    assert fold()["coordinator"] is None


def test_campaign_and_promotions_come_from_the_summary_when_the_status_lacks_them() -> None:
    # Prepare
    summary = {
        "run_id": "3f2a",
        "strategy": "flacc",
        "server_round": 40,
        "campaign": {"id": 2, "state": "running", "round": 3, "rounds": 10},
        "recent_promotions": [{"cluster_id": "cluster-0", "version": 7, "decision": "promoted"}],
    }

    # Execute
    snapshot = fold(summary=summary)

    # Assert
    coordinator = snapshot["coordinator"]
    assert coordinator["state"] is None  # no retained status on the broker
    assert coordinator["campaign"] == summary["campaign"]
    assert coordinator["recent_promotions"] == summary["recent_promotions"]
    assert (coordinator["run_id"], coordinator["server_round"]) == ("3f2a", 40)


def test_the_campaign_and_promotions_of_the_retained_status_come_first() -> None:
    # Prepare: a status with campaign c2, and an older summary.json still saying c1
    note = CampaignNote(
        campaign_id="c2",
        trigger="labels",
        status="running",
        start_round=40,
        end_round=50,
        rounds_done=3,
        started_at=NOW - 600,
        new_labelled_windows=12,
        min_new_labelled_windows=500,
    )
    promotion = PromotionNote(
        cluster_id="cluster-0", version=9, decision="rejected", campaign_id="c2", server_round=42
    )
    online = CoordinatorStatus(
        state="online", server_round=43, campaign=note, recent_promotions=(promotion,)
    )
    summary = {"campaign": {"campaign_id": "c1"}, "recent_promotions": [{"version": 1}]}

    # Execute
    snapshot = fold(
        (TOPICS.coordinator_status(), online.model_dump_json().encode()), summary=summary
    )

    # Assert
    coordinator = snapshot["coordinator"]
    assert coordinator["campaign"] == note.model_dump(mode="json")
    assert coordinator["recent_promotions"] == [promotion.model_dump(mode="json")]


def test_an_agent_carries_the_placement_the_coordinator_reported() -> None:
    # Prepare: m07 placed without labels, unverified
    note = PlacementNote(
        agent_id="m07",
        cluster_id="cluster-0",
        model_version=3,
        basis="most_members",
        verified=False,
        note="it holds no labelled windows",
        placed_at=95.0,
    )
    coordinator = CoordinatorStatus(state="online", run_id="r", placements=(note,))

    # Execute
    snapshot = fold(
        (TOPICS.coordinator_status(), coordinator.model_dump_json().encode()),
        (TOPICS.agent_status("m07"), status("m07", "online", 96.0)),
        (TOPICS.agent_status("m00"), status("m00", "online", 96.0)),
    )

    # Assert
    rows = agents(snapshot)
    assert rows["m07"]["placement"] == {
        "cluster_id": "cluster-0",
        "model_version": 3,
        "basis": "most_members",
        "verified": False,
        "joined_round": None,
        "placed_at": 95.0,
    }
    assert rows["m00"]["placement"] is None
    assert snapshot["coordinator"]["placements"][0]["agent_id"] == "m07"


def worker_status(worker: str, state: str) -> bytes:
    return IngestWorkerStatus(worker_id=worker, state=state).model_dump_json().encode()  # type: ignore[arg-type]


def test_ingest_workers_are_listed_by_their_retained_status() -> None:
    # Execute: two workers, one gone (its last will), one misaddressed, one cleared
    snapshot = fold(
        (TOPICS.ingest_status("ingest-2"), worker_status("ingest-2", "offline")),
        (TOPICS.ingest_status("ingest-1"), worker_status("ingest-1", "online")),
        (TOPICS.ingest_status("ingest-3"), worker_status("ingest-1", "offline")),
        (TOPICS.ingest_status("ingest-4"), b""),
    )

    # Assert: sorted by worker id; the misaddressed one skipped and counted
    assert snapshot["ingest_workers"] == [
        {"worker_id": "ingest-1", "state": "online"},
        {"worker_id": "ingest-2", "state": "offline"},
    ]
    assert snapshot["unreadable_messages"] == 1


def test_a_plant_without_ingest_workers_lists_none() -> None:
    assert fold((TOPICS.agent_status("m01"), status("m01", "online", 1.0)))["ingest_workers"] == []
