"""``faultfleet sim`` from the command line: files written, options checked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from faultfleet_apps.cli.main import main
from faultfleet_apps.cli.sim import parse_member_round, parse_option

SMALL = ["--profile", "quick", "--rounds", "2", "--clients-per-group", "1", "--device", "cpu"]


def test_sim_writes_results_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    status = main(["sim", "--strategy", "flacc", "--seed", "1", "--out", str(out), *SMALL])
    assert status == 0
    document = json.loads((out / "results.json").read_text())
    assert document["strategy"] == "flacc"
    assert document["seed"] == 1
    assert len(document["history"]) == 2
    assert (out / "accuracy.png").stat().st_size > 0
    assert (out / "clusters.png").stat().st_size > 0
    compared = json.loads((out / "compare-fedavg" / "results.json").read_text())
    assert compared["strategy"] == "fedavg"
    assert compared["cluster_quality"]["basis"] == "given"
    printed = capsys.readouterr().out
    assert "accuracy" in printed
    confidence = document["cluster_quality"]["confidence"]
    shown = "n/a" if confidence is None else f"{confidence:.3f}"
    assert f"cluster quality (clusters not final yet): confidence {shown}" in printed


def test_strategy_options_reach_the_strategy(tmp_path: Path) -> None:
    out = tmp_path / "ifca"
    args = ["sim", "--strategy", "ifca", "--option", "n_clusters=2", "--compare", "none"]
    assert main([*args, "--out", str(out), *SMALL]) == 0
    document = json.loads((out / "results.json").read_text())
    assert document["config"]["strategy_options"] == {"n_clusters": 2}
    assert not (out / "compare-fedavg").exists()


def test_unknown_option_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["sim", "--strategy", "flacc", "--option", "k=3", "--out", str(tmp_path), *SMALL]
    assert main(args) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "strategy 'flacc' has no option k" in error


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("n_clusters=6", ("n_clusters", 6)),
        ("alpha0=-0.1", ("alpha0", -0.1)),
        ("memory=none", ("memory", None)),
        ("flag=true", ("flag", True)),
        ("name=abc", ("name", "abc")),
    ],
)
def test_parse_option(text: str, expected: tuple[str, object]) -> None:
    assert parse_option(text) == expected


def test_parse_option_rejects_text_without_equals() -> None:
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parse_option("n_clusters")


def test_machines_join_and_leave_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "members"
    args = ["sim", "--strategy", "fedavg", "--join", "m05@2", "--leave", "m01@3", "m02@3"]

    status = main([*args, "--out", str(out), *SMALL, "--rounds", "3"])

    assert status == 0
    document = json.loads((out / "results.json").read_text())
    assert document["config"]["joins"] == [["m05", 2]]
    assert document["config"]["leaves"] == [["m01", 3], ["m02", 3]]
    assert [h["members"] for h in document["history"]] == [5, 6, 4]
    assert sorted(document["clusters"]) == ["m00", "m03", "m04", "m05"]
    err = capsys.readouterr().err
    assert "fedavg: before round 2: m05 joined (6 members)" in err
    assert "fedavg: before round 3: m01, m02 left (4 members)" in err


def test_a_schedule_for_a_strategy_with_fixed_clients_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["sim", "--strategy", "faacl", "--compare", "flacc", "--join", "m05@2"]

    assert main([*args, "--out", str(tmp_path), *SMALL]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "strategy 'flacc' keeps the clients it started with" in error
    assert "strategies that accept them: faacl, fedavg" in error
    assert not (tmp_path / "results.json").exists()


@pytest.mark.parametrize(
    ("text", "expected"), [("m05@10", ("m05", 10)), ("pump@north@3", ("pump@north", 3))]
)
def test_parse_member_round(text: str, expected: tuple[str, int]) -> None:
    assert parse_member_round(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("m05", r"--leave 'm05': expected ID@ROUND, e.g. m05@10"),
        ("@3", r"--leave '@3': expected ID@ROUND"),
        ("m05@", r"--leave 'm05@': expected ID@ROUND"),
        ("m05@ten", r"--leave 'm05@ten': ROUND must be a whole number.*e.g. m05@10"),
    ],
)
def test_parse_member_round_says_the_expected_form(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_member_round(text, "--leave")


def test_a_bad_join_round_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["sim", "--strategy", "fedavg", "--join", "m05@9", "--out", str(tmp_path), *SMALL]

    assert main(args) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "joins: 'm05' at round 9 is out of range; the round must be in [2, 2]" in error


@pytest.fixture
def restore_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("restore_threads")
def test_sim_applies_the_thread_policy_and_the_training_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the policy's explicit request
    torch.set_num_threads(2)
    args = ["sim", "--strategy", "fedavg", "--training-path", "sequential", *SMALL]
    assert main([*args, "--rounds", "1", "--out", str(tmp_path)]) == 0
    assert torch.get_num_threads() == 1
    document = json.loads((tmp_path / "results.json").read_text())
    assert document["config"]["training_path"] == "sequential"
