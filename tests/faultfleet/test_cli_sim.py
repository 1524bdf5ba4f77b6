"""``faultfleet sim`` from the command line: files written, options checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultfleet.cli import main
from faultfleet.cli_sim import parse_option

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
    assert "accuracy" in capsys.readouterr().out


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
