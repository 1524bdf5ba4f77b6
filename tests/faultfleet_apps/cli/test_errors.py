"""How ``faultfleet`` ends: exit status 0, 2 (user error), 70 (internal error) or 130
(Ctrl-C), each with one line on stderr, the traceback only with ``--debug``."""

from __future__ import annotations

from pathlib import Path

import pytest

import faultfleet_apps.cli.bench_run
import faultfleet_apps.cli.signals
import faultfleet_apps.cli.sim_run
from faultfleet_apps.cli.main import INTERNAL_ERROR, INTERRUPTED, USAGE_ERROR, main

SIMULATE = ["signals", "simulate", "--label", "8", "--seconds", "1"]
QUICK_SIM = ["--profile", "quick", "--rounds", "2", "--clients-per-group", "1"]
QUICK_SIM += ["--device", "cpu", "--compare", "none"]


def raising(error: BaseException) -> object:
    def fail(*args: object, **kwargs: object) -> None:
        raise error

    return fail


def test_success_is_status_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SIMULATE, "--out", str(tmp_path / "a.npz")]) == 0
    assert capsys.readouterr().err == ""


def test_a_user_error_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Execute
    status = main(["signals", "simulate", "--label", "42", "--out", str(tmp_path / "a.npz")])
    # Assert
    assert status == USAGE_ERROR == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("faultfleet: error: label must be an integer in [0, 19], got 42")


def test_an_internal_error_says_it_is_a_bug_and_status_70(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: a plain ValueError is a bug, not a user error
    monkeypatch.setattr(
        faultfleet_apps.cli.signals, "simulate", raising(ValueError("weights are NaN"))
    )
    # Execute
    status = main([*SIMULATE, "--out", str(tmp_path / "a.npz")])
    # Assert
    assert status == INTERNAL_ERROR == 70
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("faultfleet: internal error (a bug in faultfleet): ValueError: ")
    assert "weights are NaN" in err
    assert "faultfleet --debug" in err
    assert "report it" in err
    assert "Traceback" not in err


def test_debug_prints_the_traceback_before_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare
    monkeypatch.setattr(faultfleet_apps.cli.signals, "simulate", raising(KeyError("rpm")))
    # Execute
    status = main(["--debug", *SIMULATE, "--out", str(tmp_path / "a.npz")])
    # Assert
    assert status == INTERNAL_ERROR
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert "in run_simulate" in err
    assert err.splitlines()[-1].startswith("faultfleet: internal error (a bug in faultfleet):")
    assert "KeyError: 'rpm'" in err.splitlines()[-1]


def test_debug_shows_where_a_user_error_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["--debug", "signals", "simulate", "--label", "42", "--out", str(tmp_path)])

    assert status == USAGE_ERROR
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert err.splitlines()[-1].startswith("faultfleet: error: label must be")


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), RuntimeError("x")])
def test_other_builtin_errors_are_internal_too(
    error: Exception,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(faultfleet_apps.cli.signals, "simulate", raising(error))

    assert main([*SIMULATE, "--out", str(tmp_path / "a.npz")]) == INTERNAL_ERROR
    assert f"{type(error).__name__}: {error}" in capsys.readouterr().err


def test_ctrl_c_is_status_130_and_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(faultfleet_apps.cli.signals, "simulate", raising(KeyboardInterrupt()))

    assert main([*SIMULATE, "--out", str(tmp_path / "a.npz")]) == INTERRUPTED == 130
    assert capsys.readouterr().err == "faultfleet: interrupted\n"


def test_an_interrupted_sim_says_how_to_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare
    monkeypatch.setattr(faultfleet_apps.cli.sim_run, "run_simulation", raising(KeyboardInterrupt()))
    out = tmp_path / "run"
    # Execute
    status = main(["sim", "--out", str(out), *QUICK_SIM])
    # Assert
    assert status == INTERRUPTED
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (
        f"faultfleet: interrupted; the same command with --resume continues from the last "
        f"round saved in {out}"
    )
    assert not any("Traceback" in line for line in err)


def test_an_interrupted_bench_says_the_cells_are_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(faultfleet_apps.cli.bench_run, "run_cells", raising(KeyboardInterrupt()))

    status = main(["bench", "--suite", "tiny", "--out", str(tmp_path), "--jobs", "1"])

    assert status == INTERRUPTED
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(f"faultfleet: interrupted; finished cells are kept in {tmp_path}")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--rounds", "-1"], "argument --rounds: must be a whole number >= 0, got -1"),
        (["demo", "--seed", "-3"], "argument --seed: must be a whole number >= 0, got -3"),
        (["demo", "--live-seconds", "0"], "argument --live-seconds: must be a finite number > 0"),
        (["demo", "--clients-per-group", "0"], "argument --clients-per-group: must be a whole"),
        (["sim", "--out", "x", "--rounds", "0"], "argument --rounds: must be a whole number >= 1"),
        (["sim", "--out", "x", "--fraction", "1.5"], "argument --fraction: must be a finite"),
        (["sim", "--out", "x", "--lr", "nan"], "argument --lr: must be a finite number > 0"),
        (["sim", "--out", "x", "--seed", "-1"], "argument --seed: must be a whole number >= 0"),
        (["sim", "--out", "x", "--threads", "0"], "argument --threads: must be a whole number"),
        (["sim", "--out", "x", "--eval-every", "0"], "argument --eval-every: must be a whole"),
        (["sim", "--out", "x", "--machine-spread", "-1"], "argument --machine-spread: must be"),
        (["sim", "--out", "x", "--groups", "0,1*0"], "argument --groups: group 0 ('0,1*0') has"),
        (["sim", "--out", "x", "--groups", "0,1;2*3"], "argument --groups: group 0 ('0,1') has"),
        (["bench", "--suite", "tiny", "--out", "x", "--jobs", "0"], "argument --jobs"),
        (["bench", "--suite", "tiny", "--out", "x", "--seeds", "0", "-1"], "argument --seeds"),
        (["bench", "--suite", "tiny", "--out", "x", "--rounds", "0"], "argument --rounds"),
        ([*SIMULATE, "--out", "x.npz", "--seconds", "0"], "argument --seconds: must be a finite"),
        ([*SIMULATE, "--out", "x.npz", "--fs", "-1"], "argument --fs: must be a finite number > 0"),
        ([*SIMULATE, "--out", "x.npz", "--severity", "-1"], "argument --severity"),
        ([*SIMULATE, "--out", "x.npz", "--snr-db", "inf"], "argument --snr-db"),
        (["signals", "inspect", "x.npz", "--top", "0"], "argument --top: must be a whole number"),
        (["signals", "inspect", "x.npz", "--band", "500,100"], "argument --band: band must be"),
        (["signals", "federation", "--window-length", "8"], "argument --window-length: must be"),
        (["signals", "federation", "--clients-per-group", "0"], "argument --clients-per-group"),
        (["signals", "federation", "--groups", "0,25*2"], "argument --groups: group 0"),
        (["agent", "--config", "a.toml", "--machines", "5-3"], "argument --machines: '5-3'"),
    ],
)
def test_numbers_out_of_range_are_refused_when_parsed(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Execute: relative paths land in tmp_path, where nothing may appear
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        status = main(argv)
    # Assert
    assert status == USAGE_ERROR
    err = capsys.readouterr().err
    assert message in err.splitlines()[-1]
    assert list(tmp_path.iterdir()) == []


def test_help_is_status_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "70 an internal error" in " ".join(capsys.readouterr().out.split())


def test_demo_with_negative_rounds_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--out", str(tmp_path / "demo"), "--rounds", "-1"]) == USAGE_ERROR
    assert not (tmp_path / "demo").exists()
    assert capsys.readouterr().out == ""


def test_sim_resume_without_a_checkpoint_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare: a folder holding something, but no checkpoint
    out = tmp_path / "run"
    out.mkdir()
    # Execute
    status = main(["sim", "--out", str(out), "--resume", *QUICK_SIM])
    # Assert
    assert status == USAGE_ERROR
    assert capsys.readouterr().err == (
        f"faultfleet: error: --resume: {out / 'checkpoint'} holds no checkpoint to resume "
        "from; check --out, or run without --resume to start a new run\n"
    )
    assert list(out.iterdir()) == []


def test_simulate_into_a_missing_folder_creates_it_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare
    out = tmp_path / "pump-3" / "2024-05" / "outer.npz"
    # Execute
    status = main([*SIMULATE, "--out", str(out)])
    # Assert
    assert status == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"created folder {out.parent}"
    assert lines[1].startswith(f"wrote {out}: ")
    assert out.is_file()


def test_simulate_into_an_existing_folder_says_nothing_of_folders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*SIMULATE, "--out", str(tmp_path / "a.npz")]) == 0
    assert "created folder" not in capsys.readouterr().out


def test_an_output_folder_that_cannot_be_made_is_a_user_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare: a file where the folder should go
    (tmp_path / "taken").write_text("")
    out = tmp_path / "taken" / "a.npz"
    # Execute
    status = main([*SIMULATE, "--out", str(out)])
    # Assert
    assert status == USAGE_ERROR
    err = capsys.readouterr().err
    assert err.startswith(f"faultfleet: error: --out {tmp_path / 'taken'}: ")
    assert err.count("\n") == 1


@pytest.mark.parametrize("command", ["coordinator", "agent"])
def test_a_service_with_a_missing_config_file_is_a_user_error(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / f"{command}.toml"

    assert main([command, "--config", str(missing)]) == USAGE_ERROR
    assert capsys.readouterr().err == (
        f"faultfleet: error: config file {missing} does not exist; pass --config FILE\n"
    )


def test_a_service_setting_out_of_range_is_a_user_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare
    config = tmp_path / "coordinator.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n[run]\nfraction = 1.5\n')
    # Execute
    status = main(["coordinator", "--config", str(config)])
    # Assert
    assert status == USAGE_ERROR
    err = capsys.readouterr().err
    assert err.startswith(f"faultfleet: error: {config}")
    assert "run.fraction: Input should be less than or equal to 1" in err
    assert "Traceback" not in err
    assert not (tmp_path / "state").exists()


def test_a_strategy_option_out_of_range_is_a_user_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Execute: the value is checked against the strategy's table, before anything runs
    option = ["--strategy", "ifca", "--option", "n_clusters=0"]
    status = main(["sim", "--out", str(tmp_path / "run"), *QUICK_SIM, *option])
    # Assert
    assert status == USAGE_ERROR
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "faultfleet: error: ifca: n_clusters must be an integer >= 1, got 0; n_clusters is "
        "the number k of cluster models, fixed for the whole run (IFCA Algorithm 1: k is "
        "needed a priori); use an allowed value, e.g. the default 4"
    ]
    assert not (tmp_path / "run").exists()
