"""``faultfleet models``: the registry read and steered offline."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coordinator.adapters.model_registry import (
    GateRecord,
    ModelRecord,
    ModelRegistry,
    ServingEntry,
    ServingTable,
)
from faultfleet_apps.cli.main import main


def _add(registry: ModelRegistry, version: int, decision: str, accuracy: float) -> None:
    gate = GateRecord(
        decision=decision,  # type: ignore[arg-type]
        reason="test",
        margin=0.02,
        candidate_accuracy=accuracy,
        serving_accuracy=0.9 if version > 1 else None,
        serving_version=1 if version > 1 else None,
    )
    record = ModelRecord(
        cluster_id="cluster-1",
        version=version,
        sha256=f"{version:02d}" * 32,
        size_bytes=3,
        parent_version=1 if version > 1 else None,
        run_id="run",
        server_round=version,
        created_at=100.0,
        gate=gate,
    )
    registry.add(record, b"onx", np.zeros(2, dtype=np.float32))


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    registry = ModelRegistry(tmp_path / "models")
    _add(registry, 1, "promoted", 0.9)
    _add(registry, 2, "rejected", 0.2)
    registry.set_serving(
        ServingTable(clusters={"cluster-1": ServingEntry(version=1)}, agents={"m00": "cluster-1"})
    )
    return tmp_path


def test_list_json_gives_every_version_and_decision(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["models", "list", "--state-dir", str(state_dir), "--json"])

    listed = json.loads(capsys.readouterr().out)["clusters"]["cluster-1"]
    assert status == 0
    assert (listed["serving_version"], listed["agents"]) == (1, ["m00"])
    assert [(v["version"], v["decision"], v["serving"]) for v in listed["versions"]] == [
        (1, "promoted", True),
        (2, "rejected", False),
    ]
    assert listed["versions"][1]["candidate_accuracy"] == pytest.approx(0.2)


def test_list_prints_a_table(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["models", "list", "--state-dir", str(state_dir)])

    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["cluster", "version", "decision"]
    assert lines[1].split()[:3] == ["cluster-1", "1", "promoted"]
    assert "SERVING" in lines[1]
    assert lines[2].split()[:5] == ["cluster-1", "2", "rejected", "0.200", "0.900"]


def test_show_json_gives_the_gate_figures(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["models", "show", "--state-dir", str(state_dir), "cluster-1", "2", "--json"])

    shown = json.loads(capsys.readouterr().out)
    assert status == 0
    assert (shown["gate"]["decision"], shown["parent_version"]) == ("rejected", 1)
    assert shown["onnx_file"].endswith("v000002/model.onnx")


def test_rollback_leaves_a_request_for_the_coordinator(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["models", "rollback", "--state-dir", str(state_dir), "cluster-1", "2"])

    pending = ModelRegistry(state_dir / "models").pending()
    assert status == 0
    assert (pending["cluster-1"].action, pending["cluster-1"].version) == ("rollback", 2)
    assert "rollback of cluster cluster-1 to v2 requested" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["rollback", "cluster-1", "9"], "has no version 9"),
        (["pin", "cluster-7"], "no version serves cluster 'cluster-7'"),
        (["show", "cluster-1", "3"], "has no version 3"),
    ],
)
def test_bad_requests_are_usage_errors(
    state_dir: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    status = main(["models", argv[0], "--state-dir", str(state_dir), *argv[1:]])

    assert status == 2
    assert message in capsys.readouterr().err


def test_a_corrupt_record_is_named_and_exits_2(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = state_dir / "models" / "cluster-1" / "v000002" / "record.json"
    record.write_text("{")

    status = main(["models", "list", "--state-dir", str(state_dir)])

    assert status == 2
    assert f"{record} is corrupt" in capsys.readouterr().err


def test_a_state_dir_without_a_registry_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["models", "list", "--state-dir", str(tmp_path)]) == 2
    assert "holds no model registry" in capsys.readouterr().err
