"""The model registry: every cluster model version the coordinator made, in ``state_dir/models``.

Layout (every file written atomically, :func:`faultfleet.files.atomic_write`)::

    models/
      serving.json                   cluster → serving version, pinned or not
      requests/{cluster}.json        a pin, unpin or rollback asked for by `faultfleet models`
      {cluster}/v{version:06d}/
        record.json                  a ModelRecord: digest, parent, run, metrics, gate figures
        model.onnx                   the ONNX file the agents run (SHA-256 in the record)
        weights.npy                  the flat float32 weights (to evaluate it again)

A version number is the publication counter of the run: unique across clusters and always
growing, because agents refuse a model older than the one they hold. A rollback or a pin to
an earlier version is therefore a new version whose record ``restores`` the earlier one
(same bytes, same digest). The retention setting keeps the newest versions of each cluster
and never removes a serving, pinned or restored-from version.

A corrupt or hand-edited file gives a :class:`RegistryError` naming it; the service logs it
and keeps serving.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from faultfleet.errors import UsageError
from faultfleet.files import atomic_write
from faultfleet.types import FloatArray
from faultfleet.wire.topics import check_name

SCHEMA_VERSION: Literal[1] = 1


class RegistryError(UsageError, RuntimeError):
    """A registry file is missing, unreadable or not what it should be."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GateRecord(_Strict):
    """The federated validation figures behind a promotion decision."""

    decision: Literal["promoted", "rejected", "pinned", "rollback"]
    reason: str
    margin: float
    split: str = "val"
    candidate_accuracy: float | None = None
    serving_accuracy: float | None = None
    serving_version: int | None = None
    agents: tuple[str, ...] = ()
    num_samples: int = 0


class ModelRecord(_Strict):
    """One cluster model version (``record.json``)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    cluster_id: str
    version: Annotated[int, Field(ge=1)]
    sha256: str
    size_bytes: int
    parent_version: int | None
    """The version that served the cluster when this one was made (None for the first)."""
    run_id: str
    campaign_id: str | None = None
    """The training campaign that made it; None for versions made by a plain run."""
    server_round: int
    created_at: float
    origin: Literal["training", "rollback", "pin"] = "training"
    restores: int | None = None
    """For a rollback or pin: the earlier version whose bytes this one republishes."""
    members: tuple[str, ...] = ()
    train_loss: float | None = None
    test_accuracy: float | None = None
    """Mean test accuracy of the cluster's agents at the last evaluation before export."""
    max_abs_diff: float = 0.0
    gate: GateRecord


class ServingEntry(_Strict):
    """The version serving one cluster; a pinned cluster's candidates are not promoted."""

    version: int
    pinned: bool = False


class ServingTable(_Strict):
    """``serving.json``: which version serves each cluster, and each agent's cluster."""

    schema_version: Literal[1] = SCHEMA_VERSION
    clusters: dict[str, ServingEntry] = Field(default_factory=dict)
    agents: dict[str, str] = Field(default_factory=dict)
    """Agent → the cluster whose serving version it was last assigned."""


class Request(_Strict):
    """An operator's request, applied by the coordinator (at once if it runs)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    action: Literal["pin", "unpin", "rollback"]
    version: int | None = None
    requested_at: float


def _load(path: Path, model: type[_Strict]) -> _Strict:
    try:
        return model.model_validate_json(path.read_bytes())
    except FileNotFoundError as error:
        raise RegistryError(f"{path} is missing") from error
    except (OSError, ValidationError, ValueError) as error:
        first = str(error).splitlines()[:3]
        raise RegistryError(
            f"{path} is corrupt or not a faultfleet registry file ({' '.join(first)}); "
            "restore it from a backup or move that version's folder away"
        ) from error


def _write_json(path: Path, model: BaseModel) -> None:
    text = model.model_dump_json(indent=2).encode()
    atomic_write(path, lambda f: f.write(text))


class ModelRegistry:
    """Reads and writes the registry under ``root`` (``state_dir/models``)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    # -- versions --------------------------------------------------------------------------

    def folder(self, cluster_id: str, version: int) -> Path:
        return self.root / check_name("cluster id", cluster_id) / f"v{version:06d}"

    def add(self, record: ModelRecord, onnx_bytes: bytes, weights: FloatArray) -> None:
        """Store a version: weights and ONNX first, the record last (it marks it complete)."""
        folder = self.folder(record.cluster_id, record.version)
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(weights, dtype=np.float32), allow_pickle=False)
        atomic_write(folder / "weights.npy", lambda f: f.write(buffer.getvalue()))
        atomic_write(folder / "model.onnx", lambda f: f.write(onnx_bytes))
        _write_json(folder / "record.json", record)

    def record(self, cluster_id: str, version: int) -> ModelRecord:
        path = self.folder(cluster_id, version) / "record.json"
        loaded = _load(path, ModelRecord)
        assert isinstance(loaded, ModelRecord)
        return loaded

    def onnx_bytes(self, cluster_id: str, version: int) -> bytes:
        path = self.folder(cluster_id, version) / "model.onnx"
        try:
            return path.read_bytes()
        except OSError as error:
            raise RegistryError(f"cannot read {path}: {error}") from error

    def weights(self, cluster_id: str, version: int) -> FloatArray:
        path = self.folder(cluster_id, version) / "weights.npy"
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as error:
            raise RegistryError(f"{path} is missing or corrupt: {error}") from error
        return np.asarray(array, dtype=np.float32)

    def clusters(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and p.name != "requests")

    def versions(self, cluster_id: str) -> list[int]:
        """Complete versions (those with a record) of a cluster, oldest first."""
        folder = self.root / check_name("cluster id", cluster_id)
        if not folder.is_dir():
            return []
        found = [p for p in folder.glob("v*") if (p / "record.json").exists()]
        return sorted(int(p.name[1:]) for p in found if p.name[1:].isdigit())

    def latest_version(self) -> int:
        """The highest version number of any cluster (0 when empty)."""
        return max((v for c in self.clusters() for v in self.versions(c)), default=0)

    # -- serving ---------------------------------------------------------------------------

    def serving(self) -> ServingTable:
        path = self.root / "serving.json"
        if not path.exists():
            return ServingTable()
        loaded = _load(path, ServingTable)
        assert isinstance(loaded, ServingTable)
        return loaded

    def set_serving(self, table: ServingTable) -> None:
        _write_json(self.root / "serving.json", table)

    # -- requests --------------------------------------------------------------------------

    def request(self, cluster_id: str, request: Request) -> Path:
        path = self.root / "requests" / f"{check_name('cluster id', cluster_id)}.json"
        _write_json(path, request)
        return path

    def pending(self) -> dict[str, Request]:
        """Requests not applied yet, by cluster."""
        folder = self.root / "requests"
        found: dict[str, Request] = {}
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            loaded = _load(path, Request)
            assert isinstance(loaded, Request)
            found[path.stem] = loaded
        return found

    def done(self, cluster_id: str) -> None:
        (self.root / "requests" / f"{cluster_id}.json").unlink(missing_ok=True)

    # -- retention -------------------------------------------------------------------------

    def prune(self, cluster_id: str, keep: int) -> list[int]:
        """Remove all but the newest ``keep`` versions; never a serving or restored one."""
        if keep < 1:
            raise ValueError(f"keep {keep!r} must be >= 1")
        versions = self.versions(cluster_id)
        entry = self.serving().clusters.get(cluster_id)
        protected = {entry.version} if entry else set()
        for version in versions:
            restores = self.record(cluster_id, version).restores
            if restores is not None:
                protected.add(restores)
        removed = [v for v in versions[:-keep] if v not in protected]
        for version in removed:
            shutil.rmtree(self.folder(cluster_id, version))
        return removed


def dump_json(record: ModelRecord) -> str:
    """A record as JSON text for people and scripts."""
    return json.dumps(record.model_dump(mode="json"), indent=2)
