from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from faultfleet_apps.cli.main import main


def test_console_script_is_installed() -> None:
    executable = shutil.which("faultfleet") or str(Path(sys.executable).parent / "faultfleet")

    result = subprocess.run([executable, "--help"], capture_output=True, text=True, check=False)

    assert result.returncode == 0
    assert "signals" in result.stdout


@pytest.mark.parametrize("suffix", [".npz", ".wav", ".csv"])
def test_simulate_then_inspect_round_trip(
    tmp_path: Path, suffix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / f"outer{suffix}"

    status = main(
        [
            "signals",
            "simulate",
            "--label",
            "8",
            "--seconds",
            "4",
            "--fs",
            "12000",
            "--rpm",
            "1800",
            "--seed",
            "1",
            "--out",
            str(out),
        ]
    )
    assert status == 0
    assert "A1B1O/outer-race" in capsys.readouterr().out

    extra = [] if suffix == ".npz" else ["--rpm", "1800"]
    if suffix == ".csv":
        extra += ["--time-column", "time_s", "--channel", "acceleration"]
    assert main(["signals", "inspect", str(out), "--json", *extra]) == 0
    report = json.loads(capsys.readouterr().out)

    assert report["fs_hz"] == pytest.approx(12_000.0, rel=1e-6)
    assert report["duration_s"] == pytest.approx(4.0, rel=1e-3)
    assert report["lines"][0]["match"] == "BPFO"


def test_simulated_npz_carries_the_documented_arrays(tmp_path: Path) -> None:
    out = tmp_path / "ball.npz"

    main(
        [
            "signals",
            "simulate",
            "--label",
            "A3A/severe-ball-wear",
            "--seconds",
            "1",
            "--fs",
            "25600",
            "--seed",
            "0",
            "--out",
            str(out),
        ]
    )

    with np.load(out) as data:
        assert data["signal"].dtype == np.float32
        assert data["signal"].shape == (25_600,)
        assert float(data["fs"]) == 25_600.0
        assert int(data["label"]) == 7
        assert str(data["rotor"]) == "A3A"
        assert str(data["bearing"]) == "severe-ball-wear"
        assert float(data["bpfo_hz"]) == pytest.approx(float(data["rpm"]) / 60 * 3.585, rel=1e-3)


def test_text_inspection_names_the_indicators(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "inner.npz"
    main(
        ["signals", "simulate", "--label", "16", "--seconds", "4", "--seed", "2", "--out", str(out)]
    )
    capsys.readouterr()

    assert main(["signals", "inspect", str(out)]) == 0
    text = capsys.readouterr().out

    for word in ("sampling rate", "duration", "RMS", "crest factor", "kurtosis", "BPFI"):
        assert word in text


def test_user_errors_are_one_line_with_exit_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.wav"

    assert main(["signals", "inspect", str(missing)]) == 2
    assert "nope.wav" in capsys.readouterr().err

    assert main(["signals", "simulate", "--label", "42", "--out", str(tmp_path / "x.npz")]) == 2
    assert "label must be an integer in [0, 19]" in capsys.readouterr().err


def test_federation_summarises_a_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for label in (0, 8):
        main(
            [
                "signals",
                "simulate",
                "--label",
                str(label),
                "--seconds",
                "2",
                "--seed",
                str(label),
                "--out",
                str(tmp_path / f"m1-{label}.npz"),
            ]
        )
    (tmp_path / "manifest.csv").write_text("path,machine_id,label\nm1-0.npz,m1,0\nm1-8.npz,m1,8\n")
    capsys.readouterr()

    assert main(["signals", "federation", "--manifest", str(tmp_path / "manifest.csv")]) == 0
    out = capsys.readouterr().out

    assert "1 clients" in out
    assert "m1" in out


def test_federation_builds_a_label_groups_fleet(capsys: pytest.CaptureFixture[str]) -> None:
    fleet = ["--scenario", "label-groups", "--groups", "0,19*2;4,8*1", "--window-length", "256"]

    assert main(["signals", "federation", *fleet]) == 0
    out = capsys.readouterr().out

    assert "federation label-groups: 3 clients, 2 groups, 4 classes" in out


def test_federation_refuses_groups_without_label_groups(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["signals", "federation", "--groups", "0,19*2"]) == 2
    assert "--groups needs --scenario label-groups" in capsys.readouterr().err


def test_federation_refuses_a_manifest_reaching_outside_its_folder_unless_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare: the manifest sits in plant/, the recording beside that folder
    recording = str(tmp_path / "m1-0.npz")
    main(["signals", "simulate", "--label", "0", "--seconds", "2", "--out", recording])
    (tmp_path / "plant").mkdir()
    manifest = tmp_path / "plant" / "manifest.csv"
    manifest.write_text("path,machine_id,label\n../m1-0.npz,m1,0\n")
    capsys.readouterr()

    # Execute
    refused = main(["signals", "federation", "--manifest", str(manifest)])
    error = capsys.readouterr().err
    allowed = main(
        ["signals", "federation", "--manifest", str(manifest), "--manifest-outside-folder"]
    )

    # Assert
    assert refused == 2
    assert "outside the manifest's folder" in error
    assert "--manifest-outside-folder" in error
    assert allowed == 0


@pytest.mark.integration  # a broker, the coordinator and agents as processes
@pytest.mark.timeout(600)
def test_demo_writes_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["demo", "--out", str(tmp_path), "--clients-per-group", "1", "--rounds", "2"]
    args += ["--live-seconds", "2"]
    assert main(args) == 0

    out = capsys.readouterr().out
    assert len(list(tmp_path.glob("*.npz"))) == 4
    assert "BPFO" in out
    assert "the coordinator and 6 simulated agents" in out
    assert "adjusted Rand index" in out
    assert "diagnoses per second across 6 agents" in out
    report = json.loads((tmp_path / "fleet" / "report" / "summary.json").read_text())
    assert report["coordinator"]["server_round"] == 2
    assert report["coordinator"]["finished"] is True
    assert report["live"]["diagnoses"] > 0
    # the machine held back, m05, was found online after the campaign and served at once
    (late,) = report["late_machines"]
    assert late["agent_id"] == "m05"
    assert late["placement"]["basis"] == "evaluation"
    assert late["first_cluster"] == late["placement"]["cluster_id"]
    assert "late machine m05: found online" in out
    assert late["first_diagnosis_s"] >= 0  # served after it was found
    assert "promotion gate (newest last" in out
    assert "promoted" in out
    # every cluster with its versions and decisions, offline from the state directory
    state_dir = tmp_path / "fleet" / "state" / "coordinator"
    capsys.readouterr()
    assert main(["models", "list", "--state-dir", str(state_dir), "--json"]) == 0
    clusters = json.loads(capsys.readouterr().out)["clusters"]
    assert clusters
    assert all(
        c["versions"] and all(v["decision"] for v in c["versions"]) for c in clusters.values()
    )
    assert late["placement"]["cluster_id"] in clusters
    assert "m05" in clusters[late["placement"]["cluster_id"]]["agents"]


def test_demo_can_skip_the_federated_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--out", str(tmp_path), "--clients-per-group", "1", "--rounds", "0"]) == 0
    assert "fleet over MQTT" not in capsys.readouterr().out
    assert not (tmp_path / "fleet").exists()


def test_demo_on_cuda_without_a_gpu_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--device", "cuda"]) == 2
    assert "--device cuda: torch sees no CUDA device" in capsys.readouterr().err
    assert not out.exists()


def test_an_ingest_worker_without_a_worker_id_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "ingest.toml"
    config.write_text("check_threads = 2\n")

    status = main(["ingest-worker", "--config", str(config)])

    assert status == 2
    assert "worker_id" in capsys.readouterr().err


def test_an_ingest_worker_whose_metrics_port_is_taken_stops_at_once_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare: another process's listener on the port the command line gives
    config = tmp_path / "ingest.toml"
    config.write_text('worker_id = "w1"\n[metrics]\nhost = "127.0.0.1"\n')
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        # Execute
        status = main(["ingest-worker", "--config", str(config), "--metrics-port", str(port)])

    # Assert: a user error before the worker connects, the port and the way out named
    assert status == 2
    err = capsys.readouterr().err
    assert f"metrics.port {port} is already in use" in err
    assert "0 to switch metrics off" in err
