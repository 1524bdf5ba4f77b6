"""``faultfleet sim`` from the command line: files written, options checked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch

from coordinator.strategies.privacy import privacy_spent
from coordinator.strategies.robust import DEFAULT_POLICY, AggregationPolicy
from faultfleet.errors import UsageError
from faultfleet_apps.cli.main import build_parser, main
from faultfleet_apps.cli.sim import config_from_args, parse_aggregation, parse_member_round

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


def test_differential_privacy_from_the_command_line_reports_its_epsilon(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "private"
    private = ["--aggregation", "off", "--aggregation", "noise_multiplier=1"]
    private += ["--aggregation", "clip_norm=0.5", "--aggregation", "dp_delta=1e-6"]
    args = ["sim", "--strategy", "fedavg", *private, "--out", str(out), *SMALL]

    assert main(args) == 0

    document = json.loads((out / "results.json").read_text())
    policy = AggregationPolicy(noise_multiplier=1.0, clip_norm=0.5, dp_delta=1e-6)
    assert document["config"]["aggregation"] == asdict(policy)
    assert document["aggregation"]["policy"] == asdict(policy)
    privacy = document["privacy"]
    # 6 machines (one per group), half of them sampled per round, 2 rounds
    expected = privacy_spent(1.0, 0.5, 2, 1e-6)
    assert privacy["epsilon"] == pytest.approx(expected)
    assert (privacy["sampling_rate"], privacy["rounds"]) == (0.5, 2)
    assert f"differential privacy: epsilon {expected:.3g} at delta 1e-06" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        ([], DEFAULT_POLICY),
        (["off"], AggregationPolicy()),
        (["trim_fraction=0.1"], replace(DEFAULT_POLICY, trim_fraction=0.1)),
        (["off", "clip_factor=2"], AggregationPolicy(clip_factor=2.0)),
        (["clip_norm=1", "off", "weight_cap=3"], AggregationPolicy(weight_cap=3.0)),
    ],
)
def test_parse_aggregation_lays_items_over_the_default(
    items: list[str], expected: AggregationPolicy
) -> None:
    assert parse_aggregation(items) == expected


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["clip=3"], "unknown key 'clip'; the keys are clip_factor, clip_norm"),
        (["clip_factor=high"], "clip_factor takes a number"),
        (["trim_fraction=0.6"], "trim_fraction must be below 0.5"),
        (["noise_multiplier=1"], "needs clip_norm > 0"),
    ],
)
def test_parse_aggregation_names_what_is_wrong(items: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_aggregation(items)


def test_unknown_option_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["sim", "--strategy", "flacc", "--option", "k=3", "--out", str(tmp_path), *SMALL]
    assert main(args) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "strategy 'flacc' has no option k" in error


@pytest.mark.parametrize(
    ("strategy", "option", "message"),
    [
        ("ifca", "n_clusters=six", "ifca: n_clusters must be an integer >= 1, got 'six'"),
        ("ifca", "n_clusters=0", "ifca: n_clusters must be an integer >= 1, got 0"),
        ("flacc", "next_pair=yes", "flacc: next_pair must be true or false, got 'yes'"),
        ("flhc", "linkage=median", "flhc: linkage must be one of 'average', 'complete'"),
        ("flacc", "n_sep=none", "flacc: n_sep must be an integer >= 1, got 'none'"),
    ],
)
def test_an_ill_typed_option_stops_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], strategy: str, option: str, message: str
) -> None:
    out = tmp_path / "run"
    args = ["sim", "--strategy", strategy, "--option", option, "--out", str(out), *SMALL]

    assert main(args) == 2

    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"faultfleet: error: {message}")
    assert "e.g. the default" in err[0]
    assert not out.exists()


def test_options_are_typed_by_the_strategys_table() -> None:
    options = ["memory=none", "n_sep=3", "next_pair=true", "alpha0=0.1"]
    given = [word for option in options for word in ("--option", option)]
    args = build_parser().parse_args(["sim", "--strategy", "flacc", "--out", "x", *given])

    config = config_from_args(args)

    assert config.strategy_options == {
        "n_sep": 3,
        "memory": None,
        "next_pair": True,
        "alpha0": 0.1,
    }
    assert isinstance(config.strategy_options["n_sep"], int)


def test_list_options_prints_the_table_without_running(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["sim", "--list-options", "flacc"]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("options of flacc")
    assert lines[1].split()[:3] == ["option", "allowed", "default"]
    names = [line.split()[0] for line in lines[2:]]
    assert names == [
        "fraction",
        "alpha0",
        "memory",
        "n_merge",
        "n_sep",
        "next_pair",
        "rule",
        "cohesion_share",
        "partners",
        "pairwise",
        "sketch_epsilon",
        "sketch_seed",
    ]
    memory = lines[2 + names.index("memory")]
    assert "an integer >= 0 or none (T = ∞, never forget)" in memory
    assert "FLACC eq. 18; 10 in §VI" in memory


def test_list_options_refuses_an_unknown_strategy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--list-options", "kmeans"]) == 2
    assert "invalid choice: 'kmeans'" in capsys.readouterr().err


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


def test_a_label_groups_fleet_runs_with_its_ground_truth(tmp_path: Path) -> None:
    # Prepare: groups of 2, 1 and 3 machines; label 12 in two groups
    out = tmp_path / "fleet"
    fleet = ["--scenario", "label-groups", "--groups", "0,12*2;5,6*1;12,18*3"]
    small = ["--profile", "quick", "--rounds", "2", "--device", "cpu", "--compare", "none"]

    # Execute
    status = main(["sim", *fleet, *small, "--machine-spread", "0.5", "--out", str(out)])

    # Assert
    assert status == 0
    document = json.loads((out / "results.json").read_text())
    assert document["scenario"] == "label-groups"
    assert document["config"]["groups"] == "0,12*2;5,6*1;12,18*3"
    assert document["config"]["machine_spread"] == 0.5
    assert document["true_groups"] == {
        "m00": 0,
        "m01": 0,
        "m02": 1,
        "m03": 2,
        "m04": 2,
        "m05": 2,
    }


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scenario", "label-groups"], "--scenario label-groups needs --groups"),
        (["--groups", "0,1*2"], "--groups needs --scenario label-groups"),
        (
            ["--scenario", "label-groups", "--groups", "0,1*2", "--clients-per-group", "2"],
            "--clients-per-group does not apply to label-groups",
        ),
    ],
)
def test_fleet_options_that_do_not_fit_are_one_line_errors(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sim", *argv, "--out", str(tmp_path / "run")]) == 2
    assert message in capsys.readouterr().err.strip().splitlines()[-1]
    assert not (tmp_path / "run").exists()


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
