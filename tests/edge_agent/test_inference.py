"""Tests of live diagnosis with real ONNX Runtime sessions of exported "compact" models."""

from __future__ import annotations

import hashlib
import threading
import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from coordinator.adapters.onnx_export import ExportedModel, export_model
from edge_agent.inference import (
    LoadedModel,
    ModelIntegrityError,
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


def test_one_window_gives_what_session_run_gives(
    exports: tuple[ExportedModel, ...], windows: FloatArray
) -> None:
    # Prepare: the bound single-window path against a plain ONNX Runtime session
    diagnoser = OnnxDiagnoser(SHAPE)
    _load(diagnoser, exports[0], version=1)
    session = ort.InferenceSession(exports[0].onnx_bytes, providers=["CPUExecutionProvider"])
    (expected,) = session.run(["probabilities"], {"window": windows})

    # Execute: each window alone, as (1, 1024), as (1, 1, 1024) and as float64
    alone = [diagnoser.predict(w) for w in windows]
    batched_one = [diagnoser.predict(w[np.newaxis]) for w in windows]
    doubles = [diagnoser.predict(w.astype(np.float64)) for w in windows]

    # Assert: every answer is its own array, kept when the next window is diagnosed
    for predictions in (alone, batched_one, doubles):
        rows = np.concatenate([p.probabilities for p in predictions])
        np.testing.assert_allclose(rows, expected, atol=1e-6)
        assert [int(p.class_ids[0]) for p in predictions] == list(expected.argmax(axis=1))
        assert all(p.class_ids.dtype == np.int64 for p in predictions)
    assert len({id(p.probabilities) for p in alone}) == len(alone)


@pytest.mark.parametrize("busy", [False, True])
def test_the_top_class_of_one_window_is_predicts(
    exports: tuple[ExportedModel, ...], windows: FloatArray, busy: bool
) -> None:
    # Prepare: the bound buffers free, or in use by another thread (plain session.run)
    diagnoser = OnnxDiagnoser(SHAPE)
    loaded = _load(diagnoser, exports[0], version=1)
    expected = diagnoser.predict(windows)
    runner = diagnoser._current
    assert runner is not None
    if busy:
        runner._busy.acquire()

    # Execute: each window alone, as (1, 1024), as (1, 1, 1024) and as float64
    tops = [
        diagnoser.predict_top(w)
        for form in (windows, windows[:, np.newaxis], windows.astype(np.float64))
        for w in form
    ]

    # Assert: the same model, class and probability (a float32 read as a Python float)
    wanted = [
        (loaded, int(c), expected.probabilities.item(i, int(c)))
        for i, c in enumerate(expected.class_ids)
    ]
    assert all(type(top[2]) is float for top in tops)
    for top, (model, class_id, probability) in zip(tops, wanted * 3, strict=True):
        assert (top[0], top[1]) == (model, class_id)
        assert top[2] == pytest.approx(probability, abs=1e-6)


def test_one_window_at_a_time_from_many_threads(
    exports: tuple[ExportedModel, ...], windows: FloatArray
) -> None:
    # Prepare
    diagnoser = OnnxDiagnoser(SHAPE)
    _load(diagnoser, exports[0], version=1)
    expected = diagnoser.predict(windows).probabilities
    mismatches: list[int] = []

    def diagnose(offset: int) -> None:
        for step in range(200):
            index = (offset + step) % len(windows)
            got = diagnoser.predict(windows[index]).probabilities[0]
            if not np.allclose(got, expected[index], atol=1e-6):
                mismatches.append(index)

    # Execute: threads sharing the bound buffers (a busy buffer falls back to session.run)
    threads = [threading.Thread(target=diagnose, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Assert
    assert mismatches == []


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


@pytest.mark.parametrize("count", [0, 2, N_CLASSES + 1])
def test_names_that_do_not_fit_the_model_give_way_to_numbered_ones(count: int) -> None:
    model = LoadedModel(1, "c0", "0" * 64, SHAPE, N_CLASSES, tuple(f"n{i}" for i in range(count)))

    assert model.names() == tuple(f"class {i}" for i in range(N_CLASSES))
