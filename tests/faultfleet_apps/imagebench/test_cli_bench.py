"""``faultfleet bench`` from the command line: the quick suite on the real Fashion-MNIST.

The quick suite is what CI runs: 20 clients of Rotated Fashion-MNIST in four rotations, five
methods, two worker processes. It must recover the four rotations with FLACC and show the
order the papers report (the oracle above FedAvg and Local).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from faultfleet_apps.cli.bench import with_model
from faultfleet_apps.cli.main import main
from faultfleet_apps.imagebench.suites import get_suite

QUICK_METHODS = ["local", "fedavg", "flacc", "fedavg-oracle", "centralized"]


@pytest.fixture(scope="module")
def quick_out(fashion_mnist_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quick suite, run once for the module."""
    out = tmp_path_factory.mktemp("bench") / "quick"
    assert main(["bench", "--suite", "quick", "--out", str(out), "--jobs", "2"]) == 0
    return out


def document(out: Path, method: str) -> dict[str, object]:
    path = out / "rotated-quick" / method / "seed0" / "results.json"
    loaded: dict[str, object] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def final(out: Path, method: str) -> dict[str, float]:
    result: dict[str, float] = document(out, method)["final"]  # type: ignore[assignment]
    return result


@pytest.mark.timeout(600)  # one of the few long tests
def test_quick_suite_writes_every_cell_and_the_reports(quick_out: Path) -> None:
    with (quick_out / "results.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["method"] for r in rows] == QUICK_METHODS
    summary = (quick_out / "summary.md").read_text(encoding="utf-8")
    for method in QUICK_METHODS:
        assert f"| {method} |" in summary
    assert (quick_out / "rotated-quick" / "accuracy.png").stat().st_size > 0
    assert (quick_out / "rotated-quick" / "purity.png").stat().st_size > 0


def test_quick_suite_recovers_the_rotations_and_ranks_the_methods(quick_out: Path) -> None:
    flacc, fedavg, local = (final(quick_out, m) for m in ("flacc", "fedavg", "local"))
    oracle = final(quick_out, "fedavg-oracle")
    # No cluster mixes two rotations (FLACC's cohesion rule refuses such merges), and the
    # rotations are found up to a piece left apart at most
    assert flacc["purity"] == 1.0
    assert flacc["ari"] >= 0.9
    assert flacc["accuracy"] > fedavg["accuracy"]
    assert oracle["accuracy"] > max(fedavg["accuracy"], local["accuracy"])
    assert final(quick_out, "centralized")["ari"] == 1.0


def test_a_second_run_reads_the_cells_back(
    quick_out: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare
    before = {m: document(quick_out, m)["wall_seconds"] for m in QUICK_METHODS}
    capsys.readouterr()
    # Execute
    assert main(["bench", "--suite", "quick", "--out", str(quick_out), "--jobs", "2"]) == 0
    # Assert: nothing ran again (the progress lines are the read-back documents)
    assert {m: document(quick_out, m)["wall_seconds"] for m in QUICK_METHODS} == before
    assert "| flacc |" in capsys.readouterr().out


def test_a_missing_dataset_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bench", "--suite", "quick", "--out", str(tmp_path / "out")]
    status = main([*args, "--data-dir", str(tmp_path / "nowhere")])
    error = capsys.readouterr().err
    assert status == 2
    assert "train-images-idx3-ubyte" in error
    assert str(tmp_path / "nowhere") in error
    assert not (tmp_path / "out").exists()


def test_an_unknown_method_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bench", "--suite", "quick", "--out", str(tmp_path), "--methods", "fedsgd"]
    assert main(args) == 2
    assert "unknown method 'fedsgd'" in capsys.readouterr().err


def test_a_negative_seed_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bench", "--suite", "quick", "--out", str(tmp_path), "--seeds", "0", "-3"]
    assert main(args) == 2
    assert "argument --seeds: must be a whole number >= 0, got -3" in capsys.readouterr().err
    assert not tmp_path.joinpath("results.csv").exists()


def test_tiny_suite_needs_no_files(tmp_path: Path) -> None:
    # Execute: scikit-learn's digits, in-process
    out = tmp_path / "tiny"
    assert main(["bench", "--suite", "tiny", "--out", str(out), "--jobs", "1"]) == 0
    # Assert
    documents = {
        m: json.loads((out / "rotated-digits" / m / "seed0" / "results.json").read_text())
        for m in ("local", "fedavg", "flacc", "fedavg-oracle", "centralized")
    }
    assert documents["flacc"]["final"]["ari"] == 1.0
    accuracy = {m: d["final"]["accuracy"] for m, d in documents.items()}
    assert accuracy["fedavg-oracle"] > max(accuracy["fedavg"], accuracy["local"])
    assert (out / "summary.md").is_file()


@pytest.mark.timeout(600)  # one of the few long tests
def test_model_option_trains_another_zoo_model_and_is_part_of_the_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Execute: the tiny suite with the FLACC paper's CNN instead of the scenario's MLP
    out = tmp_path / "tiny"
    args = ["bench", "--suite", "tiny", "--out", str(out), "--methods", "flacc", "--jobs", "1"]
    assert main([*args, "--model", "flacc-cnn2d"]) == 0
    # Assert
    cell = json.loads((out / "rotated-digits" / "flacc" / "seed0" / "results.json").read_text())
    assert cell["config"]["model"] == "flacc-cnn2d"
    assert cell["final"]["accuracy"] > 0.5
    assert "model: flacc-cnn2d." in (out / "summary.md").read_text(encoding="utf-8")
    # A resumed suite with the scenario's own model is refused, not mixed in
    capsys.readouterr()
    assert main(args) == 2
    assert "written with other settings" in capsys.readouterr().err


def test_a_model_that_cannot_take_the_images_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    args = ["bench", "--suite", "tiny", "--out", str(out), "--model", "compact"]
    assert main(args) == 2
    error = capsys.readouterr().err
    assert "model 'compact' cannot take its samples" in error
    assert "rotated-digits" in error
    assert not out.exists()


def test_another_model_is_named_beside_the_papers_numbers() -> None:
    faacl = get_suite("faacl")
    assert with_model(faacl, None) is faacl
    retrained = with_model(faacl, "flacc-cnn2d")
    for before, after in zip(faacl.scenarios, retrained.scenarios, strict=True):
        assert after.model == "flacc-cnn2d"
        assert after.paper == before.paper
        assert after.paper_source == (
            f"{before.paper_source} (these cells trained flacc-cnn2d, not the scenario's "
            f"{before.model})"
        )
    same = with_model(faacl, faacl.scenarios[0].model).scenarios[0]
    assert same.paper_source == faacl.scenarios[0].paper_source
