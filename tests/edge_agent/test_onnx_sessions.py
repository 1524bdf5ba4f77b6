"""Agents of one process that load the same model share its ONNX Runtime session."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from coordinator.adapters.onnx_export import ExportedModel, export_model
from edge_agent.inference import OnnxDiagnoser
from edge_agent.onnx_sessions import shared_session
from faultfleet.models.zoo import build_model

SHAPE = (1, 256)


@pytest.fixture(scope="module")
def exports() -> tuple[ExportedModel, ExportedModel]:
    return (
        export_model(build_model("compact", SHAPE, 4, seed=0), SHAPE),
        export_model(build_model("compact", SHAPE, 4, seed=1), SHAPE),
    )


def _session(diagnoser: OnnxDiagnoser) -> object:
    runner = diagnoser._current
    assert runner is not None
    return runner.session


def test_one_session_per_model_and_settings_each_with_its_own_buffers(
    exports: tuple[ExportedModel, ExportedModel],
) -> None:
    # Prepare: three agents' diagnosers, one with another thread setting
    first, second, threaded = (
        OnnxDiagnoser(SHAPE),
        OnnxDiagnoser(SHAPE),
        OnnxDiagnoser(SHAPE, intra_op_threads=2),
    )
    model = exports[0]

    # Execute
    for diagnoser in (first, second, threaded):
        diagnoser.load(model.onnx_bytes, sha256=model.sha256, version=1, cluster_id="c0")
    windows = np.random.default_rng(0).standard_normal((2, *SHAPE), dtype=np.float32)
    one, two = first.predict(windows[0]), second.predict(windows[1])

    # Assert: the session is shared, the answers are each window's own
    assert _session(first) is _session(second)
    assert _session(threaded) is not _session(first)
    assert not np.array_equal(one.probabilities, two.probabilities)
    np.testing.assert_allclose(first.predict(windows[1]).probabilities, two.probabilities)


def test_a_session_no_agent_uses_any_more_is_freed(
    exports: tuple[ExportedModel, ExportedModel],
) -> None:
    # Prepare: two agents on model 0
    old, new = exports
    agents = [OnnxDiagnoser(SHAPE) for _ in range(2)]
    for agent in agents:
        agent.load(old.onnx_bytes, sha256=old.sha256, version=1, cluster_id="c0")
    gone = weakref.ref(_session(agents[0]))

    # Execute: both swap to model 1
    for agent in agents:
        agent.load(new.onnx_bytes, sha256=new.sha256, version=2, cluster_id="c0")
    gc.collect()

    # Assert
    assert gone() is None
    assert _session(agents[0]) is _session(agents[1])


class FakeSession:
    """Stands for a session (any object that can be weakly referenced)."""


def test_a_build_that_fails_keeps_nothing() -> None:
    def broken() -> FakeSession:
        raise ValueError("not a model")

    key = ("0" * 64, ("CPUExecutionProvider",), 1)
    with pytest.raises(ValueError, match="not a model"):
        shared_session(*key, broken)
    built = FakeSession()
    assert shared_session(*key, lambda: built) is built
    assert shared_session(*key, broken) is built
