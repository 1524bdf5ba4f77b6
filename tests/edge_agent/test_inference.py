"""Tests of live diagnosis with real ONNX Runtime sessions of exported "compact" models."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from coordinator.adapters.onnx_export import ExportedModel, export_model
from edge_agent.inference import (
    LoadedModel,
    ModelIntegrityError,
    ModelStore,
    NoModelError,
    OnnxDiagnoser,
    Prediction,
    default_providers,
)
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


def _softmax_model(input_shape: list[int | str], output: str) -> bytes:
    """A hand-built graph: Flatten(window) → Softmax, named ``output``."""
    graph = helper.make_graph(
        [
            helper.make_node("Flatten", ["window"], ["flat"]),
            helper.make_node("Softmax", ["flat"], [output]),
        ],
        "softmax",
        [helper.make_tensor_value_info("window", TensorProto.FLOAT, input_shape)],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, [input_shape[0], "width"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def test_predict_before_any_load_raises(windows: FloatArray) -> None:
    diagnoser = OnnxDiagnoser(SHAPE)

    with pytest.raises(NoModelError, match="call load"):
        diagnoser.predict(windows)
    assert diagnoser.active is None


def test_predictions_match_torch(exports: tuple[ExportedModel, ...], windows: FloatArray) -> None:
    # Prepare
    diagnoser = OnnxDiagnoser(SHAPE)
    loaded = _load(diagnoser, exports[0], version=3)

    # Execute
    prediction = diagnoser.predict(windows)
    single = diagnoser.predict(windows[0])

    # Assert
    with torch.no_grad():
        logits = build_model("compact", SHAPE, N_CLASSES, seed=0)(torch.from_numpy(windows))
    expected = torch.softmax(logits, -1).numpy()
    assert loaded == LoadedModel(3, "c0", exports[0].sha256, SHAPE, N_CLASSES)
    assert diagnoser.active == loaded
    assert prediction.model == loaded
    np.testing.assert_allclose(prediction.probabilities, expected, atol=1e-5)
    np.testing.assert_array_equal(prediction.class_ids, expected.argmax(axis=1))
    assert prediction.class_ids.dtype == np.int64
    assert single.probabilities.shape == (1, N_CLASSES)
    np.testing.assert_allclose(single.probabilities[0], prediction.probabilities[0], atol=1e-6)


def test_default_providers_end_with_cpu() -> None:
    assert default_providers()[-1] == "CPUExecutionProvider"
    assert OnnxDiagnoser(SHAPE).providers == default_providers()
    with pytest.raises(ValueError, match="NoSuchExecutionProvider"):
        OnnxDiagnoser(SHAPE, providers=["NoSuchExecutionProvider"])


def test_digest_mismatch_keeps_previous_model(
    exports: tuple[ExportedModel, ...], windows: FloatArray
) -> None:
    # Prepare
    first, second = exports
    diagnoser = OnnxDiagnoser(SHAPE)
    loaded = _load(diagnoser, first, version=1)
    before = diagnoser.predict(windows)

    # Execute
    with pytest.raises(ModelIntegrityError, match=f"is {second.sha256}, expected {first.sha256}"):
        diagnoser.load(second.onnx_bytes, sha256=first.sha256, version=2, cluster_id="c0")

    # Assert
    after = diagnoser.predict(windows)
    assert diagnoser.active == loaded
    assert after.model == loaded
    np.testing.assert_array_equal(after.probabilities, before.probabilities)


@pytest.mark.parametrize(
    ("input_shape", "output", "match"),
    [
        (None, "", r"ONNX Runtime cannot load the 17 bytes"),
        (["batch", 1, 512], "probabilities", r"another sample_shape"),
        ([1, 1, 1024], "probabilities", r"\['batch', 1, 1024\]"),
        (["batch", 1, 1024], "scores", r"outputs \['scores'\]"),
    ],
    ids=["garbage", "wrong-length", "fixed-batch", "no-probabilities"],
)
def test_unusable_model_keeps_previous_one(
    exports: tuple[ExportedModel, ...],
    input_shape: list[int | str] | None,
    output: str,
    match: str,
) -> None:
    # Prepare
    diagnoser = OnnxDiagnoser(SHAPE)
    loaded = _load(diagnoser, exports[0], version=1)
    payload = b"not an onnx model" if input_shape is None else _softmax_model(input_shape, output)
    digest = hashlib.sha256(payload).hexdigest()

    # Execute / Assert
    with pytest.raises(ModelIntegrityError, match=match):
        diagnoser.load(payload, sha256=digest, version=2, cluster_id="c0")
    assert diagnoser.active == loaded


def test_model_exported_for_other_windows_is_rejected() -> None:
    exported = export_model(build_model("compact", (1, 512), N_CLASSES), (1, 512))
    diagnoser = OnnxDiagnoser(SHAPE)

    with pytest.raises(ModelIntegrityError, match=r"shape \['batch', 1, 1024\]"):
        _load(diagnoser, exported, version=1)
    assert diagnoser.active is None


def test_hand_built_model_with_any_width_loads(windows: FloatArray) -> None:
    payload = _softmax_model(["batch", 1, 1024], "probabilities")
    diagnoser = OnnxDiagnoser(SHAPE)

    loaded = diagnoser.load(
        payload, sha256=hashlib.sha256(payload).hexdigest(), version=0, cluster_id="c0"
    )

    assert loaded.n_classes == 1024
    assert diagnoser.predict(windows).probabilities.shape == (4, 1024)


def test_older_version_may_replace_newer(exports: tuple[ExportedModel, ...]) -> None:
    diagnoser = OnnxDiagnoser(SHAPE)
    _load(diagnoser, exports[0], version=5)

    rolled_back = _load(diagnoser, exports[1], version=3)

    assert diagnoser.active == rolled_back
    assert rolled_back.version == 3


@pytest.mark.parametrize("shape", [(4, 1, 512), (1024,), (4, 2, 1024), (0, 1, 1024)], ids=str)
def test_windows_of_the_wrong_shape_are_rejected(
    exports: tuple[ExportedModel, ...], shape: tuple[int, ...]
) -> None:
    diagnoser = OnnxDiagnoser(SHAPE)
    _load(diagnoser, exports[0], version=1)

    with pytest.raises(ValueError, match=r"window"):
        diagnoser.predict(np.zeros(shape, dtype=np.float32))


def test_hot_swap_under_concurrent_prediction(
    exports: tuple[ExportedModel, ...], windows: FloatArray
) -> None:
    # Prepare: reference probabilities of each model, and a diagnoser on version 1.
    references = {}
    for exported in exports:
        reference = OnnxDiagnoser(SHAPE)
        _load(reference, exported, version=0)
        references[exported.sha256] = reference.predict(windows).probabilities
    diagnoser = OnnxDiagnoser(SHAPE)
    _load(diagnoser, exports[1], version=1)  # odd versions: exports[1], even: exports[0]
    versions = range(1, 13)
    seen: list[Prediction] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def predict_continuously() -> None:
        try:
            while not stop.is_set():
                seen.append(diagnoser.predict(windows))
        except BaseException as error:  # handed to the test thread, which fails on it
            errors.append(error)

    # Execute: load versions 2..12 (alternating weights); wait for each to be used.
    worker = threading.Thread(target=predict_continuously)
    worker.start()
    try:
        for version in versions[1:]:
            _load(diagnoser, exports[version % 2], version)
            deadline = time.monotonic() + 60.0
            while (not seen or seen[-1].model.version < version) and not errors:
                assert time.monotonic() < deadline, f"version {version} never predicted"
                time.sleep(0.001)
    finally:
        stop.set()
        worker.join(timeout=60.0)

    # Assert
    assert not errors
    observed = [p.model.version for p in seen]
    assert observed == sorted(observed)
    assert set(observed) == set(versions)
    for prediction in seen:
        assert prediction.model.sha256 == exports[prediction.model.version % 2].sha256
        np.testing.assert_allclose(
            prediction.probabilities, references[prediction.model.sha256], atol=1e-6
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


@pytest.mark.parametrize("count", [0, 2, N_CLASSES + 1])
def test_names_that_do_not_fit_the_model_give_way_to_numbered_ones(count: int) -> None:
    model = LoadedModel(1, "c0", "0" * 64, SHAPE, N_CLASSES, tuple(f"n{i}" for i in range(count)))

    assert model.names() == tuple(f"class {i}" for i in range(N_CLASSES))
