"""The model store: the active model on disk, read back checked, cleared when corrupt."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from coordinator.adapters.onnx_export import ExportedModel, export_model
from edge_agent.inference import LoadedModel, ModelIntegrityError, OnnxDiagnoser
from edge_agent.model_store import ModelStore
from faultfleet.models.zoo import build_model
from faultfleet.types import FloatArray

SHAPE = (1, 1024)
N_CLASSES = 12


@pytest.fixture(scope="module")
def exports() -> tuple[ExportedModel, ExportedModel]:
    """Two compact models with different weights (seeds 0 and 1)."""
    return (
        export_model(build_model("compact", SHAPE, N_CLASSES, seed=0), SHAPE),
        export_model(build_model("compact", SHAPE, N_CLASSES, seed=1), SHAPE),
    )


@pytest.fixture
def windows() -> FloatArray:
    return np.random.default_rng(3).standard_normal((4, *SHAPE), dtype=np.float32)


def _load(diagnoser: OnnxDiagnoser, exported: ExportedModel, version: int) -> LoadedModel:
    return diagnoser.load(
        exported.onnx_bytes, sha256=exported.sha256, version=version, cluster_id="c0"
    )


def test_store_round_trip_restores_diagnosis(
    tmp_path: Path, exports: tuple[ExportedModel, ...], windows: FloatArray
) -> None:
    # Prepare
    running = OnnxDiagnoser(SHAPE)
    loaded = _load(running, exports[0], version=7)
    ModelStore(tmp_path / "agent").save(exports[0].onnx_bytes, loaded)

    # Execute: a restarted agent reads the store into a fresh diagnoser.
    stored = ModelStore(tmp_path / "agent").load()
    assert stored is not None
    onnx_bytes, model = stored
    restarted = OnnxDiagnoser(SHAPE)
    restarted.load(onnx_bytes, sha256=model.sha256, version=model.version, cluster_id="c0")

    # Assert
    assert onnx_bytes == exports[0].onnx_bytes
    assert model == loaded
    np.testing.assert_array_equal(
        restarted.predict(windows).probabilities, running.predict(windows).probabilities
    )


def test_empty_store_loads_none(tmp_path: Path) -> None:
    assert ModelStore(tmp_path / "never-saved").load() is None


def _tamper_bytes(store: ModelStore) -> None:
    store.onnx_path.write_bytes(store.onnx_path.read_bytes()[:-1] + b"\x00")


def _truncate_json(store: ModelStore) -> None:
    store.metadata_path.write_text(store.metadata_path.read_text()[:20])


def _drop_field(store: ModelStore) -> None:
    metadata = json.loads(store.metadata_path.read_text())
    del metadata["n_classes"]
    store.metadata_path.write_text(json.dumps(metadata))


def _retype_field(store: ModelStore) -> None:
    metadata = json.loads(store.metadata_path.read_text())
    metadata["version"] = "1"
    store.metadata_path.write_text(json.dumps(metadata))


def _delete_bytes(store: ModelStore) -> None:
    store.onnx_path.unlink()


@pytest.mark.parametrize(
    ("corrupt", "match"),
    [
        (_tamper_bytes, r"SHA-256 of .*model\.onnx is"),
        (_truncate_json, r"JSONDecodeError"),
        (_drop_field, r"expected exactly the keys"),
        (_retype_field, r"fields \['version'\] have the wrong type"),
        (_delete_bytes, r"FileNotFoundError"),
    ],
    ids=["tampered-bytes", "truncated-json", "missing-field", "retyped-field", "missing-bytes"],
)
def test_corrupt_store_raises_and_can_be_cleared(
    tmp_path: Path,
    exports: tuple[ExportedModel, ...],
    corrupt: Callable[[ModelStore], None],
    match: str,
) -> None:
    # Prepare
    store = ModelStore(tmp_path)
    exported = exports[0]
    model = LoadedModel(1, "c0", exported.sha256, SHAPE, N_CLASSES)
    store.save(exported.onnx_bytes, model)
    corrupt(store)

    # Execute / Assert
    with pytest.raises(ModelIntegrityError, match=match) as raised:
        store.load()
    assert f"delete {store.metadata_path} and {store.onnx_path}" in str(raised.value)
    store.clear()
    assert store.load() is None


def test_store_refuses_bytes_that_do_not_match(
    tmp_path: Path, exports: tuple[ExportedModel, ...]
) -> None:
    model = LoadedModel(1, "c0", exports[0].sha256, SHAPE, N_CLASSES)

    with pytest.raises(ModelIntegrityError, match="refusing to store model v1"):
        ModelStore(tmp_path).save(exports[1].onnx_bytes, model)
    assert not (tmp_path / "model.json").exists()


def test_class_names_travel_with_the_stored_model(
    tmp_path: Path, exports: tuple[ExportedModel, ...]
) -> None:
    # Prepare: a model loaded with its announced names, saved as the agent does
    exported = exports[0]
    names = tuple(f"fault {i}" for i in range(N_CLASSES))
    loaded = OnnxDiagnoser(SHAPE).load(
        exported.onnx_bytes, sha256=exported.sha256, version=3, cluster_id="c0", class_names=names
    )
    ModelStore(tmp_path).save(exported.onnx_bytes, loaded)

    # Execute: a restarted agent reads it back
    saved = ModelStore(tmp_path).load()

    # Assert
    assert saved is not None
    assert saved[1].class_names == names
    assert saved[1].names() == names


def test_a_model_saved_without_class_names_still_loads_and_names_every_output(
    tmp_path: Path, exports: tuple[ExportedModel, ...]
) -> None:
    # Prepare: model.json as written before names were stored
    store = ModelStore(tmp_path)
    store.save(exports[0].onnx_bytes, LoadedModel(1, "c0", exports[0].sha256, SHAPE, N_CLASSES))
    metadata = json.loads(store.metadata_path.read_text())
    del metadata["class_names"]
    store.metadata_path.write_text(json.dumps(metadata))

    # Execute
    saved = store.load()

    # Assert
    assert saved is not None
    assert saved[1].class_names == ()
    assert saved[1].names() == tuple(f"class {i}" for i in range(N_CLASSES))
