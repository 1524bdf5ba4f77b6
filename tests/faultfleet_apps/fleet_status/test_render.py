"""The status table: one line for the coordinator, a row per agent, "—" for what is unknown."""

from __future__ import annotations

from typing import Any

import pytest

from faultfleet_apps.fleet_status.render import MISSING, age, format_table, render_table

NOW = 1_000.0


def snapshot(agents: list[dict[str, Any]], coordinator: dict[str, Any] | None) -> dict[str, Any]:
    counts = {"online": 0, "offline": 0, "retired": 0, "unknown": 0}
    for row in agents:
        counts[row["state"]] += 1
    return {
        "generated_at": NOW,
        "coordinator": coordinator,
        "counts": counts,
        "agents": agents,
        "ingest_workers": [],
        "unreadable_messages": 0,
    }


def row(agent: str, state: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "agent_id": agent,
        "state": state,
        "offline_cause": None,
        "last_seen": None,
        "cluster_id": None,
        "serving_model_version": None,
        "last_diagnosis": None,
        "streak": None,
    }
    return base | fields


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-3.0, "0 s ago"),
        (0.4, "0 s ago"),
        (59.9, "59 s ago"),
        (60.0, "1 min ago"),
        (7_200.0, "2 h ago"),
        (200_000.0, "2 d ago"),
    ],
)
def test_ages_read_in_the_largest_whole_unit(seconds: float, text: str) -> None:
    assert age(seconds) == text


def test_columns_are_aligned_to_their_widest_cell() -> None:
    # Execute
    table = format_table(["agent", "state"], [["m1", "online"], ["m0012", "offline"]])

    # Assert
    assert table.splitlines() == ["AGENT  STATE", "m1     online", "m0012  offline"]


def test_a_row_per_agent_with_dashes_for_what_is_not_known() -> None:
    # Prepare
    coordinator = {
        "state": "online",
        "run_id": "3f2a",
        "strategy": "flacc",
        "server_round": 12,
        "campaign": None,
        "recent_promotions": [],
    }
    agents = [
        row(
            "m01",
            "online",
            last_seen=NOW - 3,
            cluster_id="cluster-0",
            serving_model_version=4,
            last_diagnosis={
                "class_name": "A2O/outer-race",
                "probability": 0.971,
                "timestamp": NOW - 5,
            },
            streak={"class_name": "A2O/outer-race", "windows": 12},
        ),
        row("m02", "offline", offline_cause="lost", last_seen=NOW - 600),
        row("m03", "retired"),
    ]

    # Execute
    lines = render_table(snapshot(agents, coordinator)).splitlines()

    # Assert
    assert lines[0] == (
        f"coordinator: online   run 3f2a   strategy flacc   round 12   campaign {MISSING}"
    )
    assert lines[1] == "agents: 1 online, 1 offline, 1 retired"
    assert lines[3].split() == [
        "AGENT",
        "STATE",
        "LAST",
        "SEEN",
        "CLUSTER",
        "MODEL",
        "LAST",
        "DIAGNOSIS",
        "FAULT",
        "STREAK",
    ]
    assert lines[4].split() == [
        "m01",
        "online",
        "3",
        "s",
        "ago",
        "cluster-0",
        "v4",
        "A2O/outer-race",
        "0.97,",
        "5",
        "s",
        "ago",
        "12",
        "×",
        "A2O/outer-race",
    ]
    assert lines[5].split() == ["m02", "offline", "(lost)", "10", "min", "ago", *[MISSING] * 4]
    assert lines[6].split() == ["m03", "retired", *[MISSING] * 5]
    assert lines[-1] == f"recent promotions: {MISSING}"


def test_no_coordinator_no_agents_and_a_campaign_with_promotions() -> None:
    # Execute
    empty = render_table(snapshot([], None)).splitlines()
    campaign = render_table(
        snapshot(
            [],
            {
                "state": "online",
                "run_id": "r",
                "strategy": "ifca",
                "server_round": 3,
                "campaign": {"state": "running", "round": 3},
                "recent_promotions": [{"cluster_id": "cluster-1", "version": 7}],
            },
        )
    ).splitlines()

    # Assert
    assert empty[0].startswith(f"coordinator: {MISSING} (no retained status")
    assert empty[1] == "agents: none heard of"
    assert campaign[0].endswith("campaign state=running round=3")
    assert campaign[-1] == "  cluster_id cluster-1  version 7"


def test_a_campaign_reads_as_round_x_of_y_with_the_next_triggers() -> None:
    # Prepare
    campaign = {
        "campaign_id": "c2",
        "trigger": "labels",
        "status": "running",
        "start_round": 40,
        "end_round": 50,
        "rounds_done": 3,
        "started_at": NOW - 60,
        "ended_at": None,
        "next_scheduled_at": NOW + 6 * 86_400 + 10,
        "new_labelled_windows": 120,
        "min_new_labelled_windows": 500,
    }
    promotion = {
        "cluster_id": "cluster-0",
        "version": 9,
        "decision": "rejected",
        "candidate_accuracy": 0.5,
        "serving_accuracy": 0.9125,
        "campaign_id": "c2",
        "server_round": 42,
        "created_at": NOW - 180,
    }
    coordinator = {
        "state": "online",
        "run_id": "r",
        "strategy": "fedavg",
        "server_round": 43,
        "campaign": campaign,
        "recent_promotions": [promotion],
    }

    # Execute
    lines = render_table(snapshot([], coordinator)).splitlines()

    # Assert
    assert lines[0].endswith(
        "campaign c2 (labels) round 3 of 10, running; next scheduled in 6 d; "
        "120 of 500 new labelled windows"
    )
    assert lines[-1] == "  cluster-0 v9 rejected 0.500 vs 0.912 (c2, round 42, 3 min ago)"


def test_placed_machines_say_where_and_why_and_an_unverified_one_is_flagged() -> None:
    # Prepare: m07 placed by its validation loss and trains from round 42; m09 by the rule
    placements = [
        {
            "agent_id": "m07",
            "cluster_id": "cluster-1",
            "model_version": 5,
            "basis": "evaluation",
            "verified": True,
            "scores": [
                {"cluster_id": "cluster-1", "loss": 0.12, "accuracy": 0.97, "windows": 9},
                {"cluster_id": "cluster-0", "loss": 1.93, "accuracy": 0.4, "windows": 9},
            ],
            "joined_round": 42,
            "placed_at": NOW - 180,
        },
        {
            "agent_id": "m09",
            "cluster_id": "cluster-0",
            "model_version": 5,
            "basis": "most_members",
            "verified": False,
            "note": "it holds no labelled windows",
            "placed_at": NOW - 5,
        },
    ]
    coordinator = {
        "state": "online",
        "run_id": "r",
        "strategy": "flacc",
        "server_round": 41,
        "campaign": None,
        "recent_promotions": [],
        "placements": placements,
    }
    agents = [
        row("m09", "online", cluster_id="cluster-0", placement={"verified": False}),
    ]

    # Execute
    lines = render_table(snapshot(agents, coordinator)).splitlines()

    # Assert
    assert "cluster-0 (unverified)" in lines[4]
    assert lines[-3] == "placed when they joined:"
    assert lines[-2] == (
        "  m07 on cluster-1 v5: validation loss 0.120, accuracy 0.97 (next cluster-0 at "
        "1.930); trains from round 42 (placed 3 min ago)"
    )
    assert lines[-1] == (
        "  m09 on cluster-0 v5: the cluster of most machines, unverified: it holds no "
        "labelled windows (placed 5 s ago)"
    )


def test_ingest_workers_get_a_line_of_their_states_when_there_are_any() -> None:
    # Prepare
    without = snapshot([row("m00", "online")], None)
    with_workers = without | {
        "ingest_workers": [
            {"worker_id": "ingest-1", "state": "online"},
            {"worker_id": "ingest-2", "state": "offline"},
        ]
    }

    # Execute
    plain, shown = render_table(without).splitlines(), render_table(with_workers).splitlines()

    # Assert: the line after the agents' counts, and none without workers
    assert shown[2] == "ingest workers: ingest-1 online, ingest-2 offline"
    assert not any(line.startswith("ingest workers") for line in plain)
    assert len(shown) == len(plain) + 1
