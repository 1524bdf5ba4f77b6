"""The model registry's files: round trip, corrupt files named, retention."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from coordinator.adapters.model_registry import (
    GateRecord,
    ModelRecord,
    ModelRegistry,
    RegistryError,
    Request,
    ServingEntry,
    ServingTable,
)


def _record(version: int, restores: int | None = None) -> ModelRecord:
    return ModelRecord(
        cluster_id="cluster-1",
        version=version,
        sha256="ab" * 32,
        size_bytes=3,
        parent_version=version - 1 or None,
        run_id="run",
        server_round=version * 10,
        created_at=100.0,
        restores=restores,
        gate=GateRecord(decision="promoted", reason="first version of the cluster", margin=0.02),
    )


def test_a_version_reads_back_as_written(tmp_path: Path) -> None:
    registry = ModelRegistry(tmp_path)
    weights = np.arange(5, dtype=np.float32)

    registry.add(_record(1), b"onx", weights)

    assert registry.record("cluster-1", 1) == _record(1)
    assert registry.onnx_bytes("cluster-1", 1) == b"onx"
    np.testing.assert_array_equal(registry.weights("cluster-1", 1), weights)
    assert (registry.clusters(), registry.versions("cluster-1")) == (["cluster-1"], [1])
    assert registry.latest_version() == 1
    assert not list(tmp_path.rglob("*.tmp"))


@pytest.mark.parametrize("content", [b"{not json", b'{"cluster_id": "cluster-1"}', b""])
def test_a_corrupt_record_is_an_error_naming_its_file(tmp_path: Path, content: bytes) -> None:
    registry = ModelRegistry(tmp_path)
    registry.add(_record(1), b"onx", np.zeros(2, dtype=np.float32))
    path = tmp_path / "cluster-1" / "v000001" / "record.json"
    path.write_bytes(content)

    with pytest.raises(RegistryError, match=f"{re.escape(str(path))} is corrupt"):
        registry.record("cluster-1", 1)


def test_a_corrupt_serving_table_and_request_are_errors_naming_their_files(
    tmp_path: Path,
) -> None:
    registry = ModelRegistry(tmp_path)
    registry.set_serving(ServingTable(clusters={"cluster-1": ServingEntry(version=1)}))
    registry.request("cluster-1", Request(action="pin", requested_at=1.0))
    (tmp_path / "serving.json").write_text('{"clusters": {"cluster-1": {"version": "x"}}}')
    (tmp_path / "requests" / "cluster-1.json").write_text('{"action": "explode"}')

    with pytest.raises(RegistryError, match=r"serving\.json is corrupt"):
        registry.serving()
    with pytest.raises(RegistryError, match=r"cluster-1\.json is corrupt"):
        registry.pending()


def test_missing_weights_are_an_error_naming_the_file(tmp_path: Path) -> None:
    registry = ModelRegistry(tmp_path)
    registry.add(_record(1), b"onx", np.zeros(2, dtype=np.float32))
    (tmp_path / "cluster-1" / "v000001" / "weights.npy").unlink()

    with pytest.raises(RegistryError, match=r"weights\.npy is missing or corrupt"):
        registry.weights("cluster-1", 1)


def test_prune_keeps_the_newest_the_serving_and_the_restored_versions(tmp_path: Path) -> None:
    registry = ModelRegistry(tmp_path)
    for version in range(1, 7):
        registry.add(
            _record(version, restores=2 if version == 6 else None),
            b"o",
            np.zeros(1, dtype=np.float32),
        )
    registry.set_serving(ServingTable(clusters={"cluster-1": ServingEntry(version=3)}))

    removed = registry.prune("cluster-1", keep=2)

    assert removed == [1, 4]
    assert registry.versions("cluster-1") == [2, 3, 5, 6]


def test_a_version_folder_without_its_record_is_not_listed(tmp_path: Path) -> None:
    # a crash between the ONNX file and the record leaves an incomplete version
    registry = ModelRegistry(tmp_path)
    registry.add(_record(1), b"o", np.zeros(1, dtype=np.float32))
    (tmp_path / "cluster-1" / "v000002").mkdir()

    assert registry.versions("cluster-1") == [1]
