"""``faultfleet campaign status|start|stop`` and ``faultfleet label`` on the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.adapters.campaign_store import CampaignRecord, CampaignState, CampaignStore
from coordinator.engine.campaigns import Campaign, CampaignStatus, CampaignTrigger
from edge_agent.labels_file import LabelRange, read_labels
from faultfleet.wire.signing import SigningKey
from faultfleet_apps.cli.main import main


def state_dir(tmp_path: Path, *, running: bool) -> Path:
    first = Campaign(1, CampaignTrigger.FIRST_START, 0, 10, 1.7e9, status=CampaignStatus.DONE)
    second = Campaign(2, CampaignTrigger.LABELS, 10, 15, 1.7e9 + 60)
    if not running:
        second = second.ended(CampaignStatus.DONE, 1.7e9 + 120, 15)
    records = (CampaignRecord.of(first), CampaignRecord.of(second))
    CampaignStore(tmp_path / "campaigns").save(
        CampaignState(campaigns=records, new_labelled_windows=42)
    )
    return tmp_path


def test_status_json_lists_every_campaign(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Execute
    status = main(
        ["campaign", "status", "--state-dir", str(state_dir(tmp_path, running=True)), "--json"]
    )

    # Assert
    shown = json.loads(capsys.readouterr().out)
    assert status == 0
    assert [(c["campaign_id"], c["trigger"], c["status"]) for c in shown["campaigns"]] == [
        ("c1", "first_start", "done"),
        ("c2", "labels", "running"),
    ]
    assert shown["new_labelled_windows"] == 42


def test_status_prints_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["campaign", "status", "--state-dir", str(state_dir(tmp_path, running=False))]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split()[:4] == ["CAMPAIGN", "TRIGGER", "STATUS", "ROUNDS"]
    assert lines[4].split()[:4] == ["c2", "labels", "done", "11-15"]


def test_start_leaves_a_request_and_says_it_waits_for_a_running_campaign(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare
    folder = state_dir(tmp_path, running=True)

    # Execute
    status = main(["campaign", "start", "--state-dir", str(folder), "--rounds", "7", "--recluster"])

    # Assert
    request = CampaignStore(folder / "campaigns").pending()["start"]
    assert status == 0
    assert (request.rounds, request.recluster) == (7, True)
    assert "campaign c2 runs, so the new one starts after it" in capsys.readouterr().out


def test_stop_needs_a_running_campaign(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Execute
    refused = main(["campaign", "stop", "--state-dir", str(state_dir(tmp_path, running=False))])
    error = capsys.readouterr().err
    accepted = main(["campaign", "stop", "--state-dir", str(state_dir(tmp_path, running=True))])

    # Assert
    assert refused == 2
    assert "no campaign runs" in error
    assert accepted == 0
    assert "stop" in CampaignStore(tmp_path / "campaigns").pending()


def test_a_folder_without_campaigns_is_a_user_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["campaign", "status", "--state-dir", str(tmp_path)]) == 2
    assert "holds no campaigns" in capsys.readouterr().err


@pytest.mark.parametrize("rounds", ["0", "x"])
def test_rounds_must_be_a_positive_number(
    tmp_path: Path, rounds: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["campaign", "start", "--state-dir", str(tmp_path), "--rounds", rounds]) == 2
    assert "whole number of rounds" in capsys.readouterr().err


def agent_config(tmp_path: Path) -> Path:
    path = tmp_path / "agent.toml"
    key = SigningKey.generate().public_text
    path.write_text(
        f'agent_id = "pump3"\nstate_dir = "{tmp_path / "state"}"\n'
        f'[signing]\ntrusted_keys = ["{key}"]\n',
        encoding="utf-8",
    )
    return path


def test_label_appends_a_range_to_the_agents_labels_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Execute
    status = main(
        [
            "label",
            "--config",
            str(agent_config(tmp_path)),
            "--from",
            "1780000000",
            "--to",
            "2026-05-30T12:00+00:00",
            "--label",
            "8",
            "--note",
            "work order 4711",
        ]
    )

    # Assert
    assert status == 0
    assert read_labels(tmp_path / "state" / "labels.csv") == [
        LabelRange(1_780_000_000.0, 1_780_142_400.0, 8, "work order 4711")
    ]
    assert "trains on them from the next campaign" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [("noon", "1780000000", "'noon' is not a time"), ("200", "100", "give an end after")],
)
def test_label_refuses_a_bad_range(
    tmp_path: Path, start: str, end: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = agent_config(tmp_path)
    arguments = ["label", "--config", str(config), "--from", start, "--to", end, "--label", "1"]
    assert main(arguments) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "state" / "labels.csv").exists()
