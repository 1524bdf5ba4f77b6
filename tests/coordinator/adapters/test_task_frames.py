"""Tests of the coordinator's task frames: ids, bodies and proximal targets."""

from __future__ import annotations

import numpy as np
import pytest

from coordinator.adapters.task_frames import TaskFrames, proximal_tensors
from faultfleet.tasks import (
    EvaluateTask,
    FitTask,
    GradientTask,
    LossesTask,
    Proximal,
    Split,
    TrainConfig,
)
from faultfleet.types import FloatArray
from faultfleet.wire.codec import decode_tensors
from faultfleet.wire.messages import (
    FitTaskMessage,
    GradientTaskMessage,
    LossesTaskMessage,
    ModelSpec,
    ProximalSpec,
    TensorEncoding,
)

SPEC = ModelSpec(name="compact", sample_shape=(1, 256), n_classes=4)
N = 16
CONFIG = TrainConfig(epochs=1)
PLAIN = TensorEncoding()


def weights(seed: int) -> FloatArray:
    return np.random.default_rng(seed).standard_normal(N).astype(np.float32)


A, B, G = weights(0), weights(1), weights(2)


def frames_at(now: float, encoding: TensorEncoding = PLAIN) -> TaskFrames:
    return TaskFrames(
        run_id="run-1", model=SPEC, encoding=encoding, deadline_s=30.0, clock=lambda: now
    )


def test_several_fit_tasks_of_one_agent_get_distinct_ids() -> None:
    tasks = [
        FitTask("m00", {"cluster-0": A}, CONFIG, seed=1),
        FitTask("m00", {"cluster-1": B}, CONFIG, seed=2),
        FitTask("m01", {"cluster-0": A}, CONFIG, seed=3),
    ]

    frames = frames_at(100.0).fit(4, tasks)

    ids = [pending.task_id for pending, _, _ in frames]
    assert len(set(ids)) == 3
    assert [header.task_id for _, header, _ in frames] == ids
    assert [p.models for p, _, _ in frames] == [t.models for t in tasks]
    assert all((header.issued_at, header.deadline_s) == (100.0, 30.0) for _, header, _ in frames)


def test_identical_tasks_of_one_agent_still_get_distinct_ids() -> None:
    task = LossesTask("m00", {"cluster-0": A})

    frames = frames_at(0.0).losses(2, [task, task])

    assert frames[0][0].task_id != frames[1][0].task_id
    assert frames[0][2] == frames[1][2]


def test_ids_are_the_same_when_the_round_is_built_again_later() -> None:
    tasks = [FitTask("m00", {"k": A}, CONFIG, seed=1), FitTask("m00", {"k": A}, CONFIG, seed=1)]

    first = [p.task_id for p, _, _ in frames_at(0.0).fit(3, tasks)]
    again = [p.task_id for p, _, _ in frames_at(999.0).fit(3, [*tasks])]

    assert first == again
    assert first[0] != first[1]


@pytest.mark.parametrize(
    "other",
    [
        FitTask("m00", {"k": A}, CONFIG, seed=2),
        FitTask("m00", {"k": B}, CONFIG, seed=1),
        FitTask("m00", {"j": A}, CONFIG, seed=1),
        FitTask("m00", {"k": A}, TrainConfig(epochs=2), seed=1),
        FitTask("m00", {"k": A}, CONFIG, seed=1, proximal=(Proximal(G, 0.5),)),
        FitTask("m00", {"k": A}, CONFIG, seed=1, proximal=(Proximal(G, 0.25),)),
        FitTask("m01", {"k": A}, CONFIG, seed=1),
    ],
)
def test_every_difference_in_a_task_changes_its_id(other: FitTask) -> None:
    base = FitTask("m00", {"k": A}, CONFIG, seed=1)

    (one,), (two,) = frames_at(0.0).fit(3, [base]), frames_at(0.0).fit(3, [other])

    assert one[0].task_id != two[0].task_id


def test_probe_ids_depend_on_their_kind_and_request() -> None:
    frames = frames_at(0.0)
    models = {"k": A}

    ids = {
        frames.losses(1, [LossesTask("m00", models)])[0][0].task_id,
        frames.losses(1, [LossesTask("m00", models, per_sample=False)])[0][0].task_id,
        frames.losses(1, [LossesTask("m00", models, Split.TEST)])[0][0].task_id,
        frames.gradients(1, [GradientTask("m00", models, 8, 1)])[0][0].task_id,
        frames.gradients(1, [GradientTask("m00", models, 16, 1)])[0][0].task_id,
        frames.evaluate(1, [EvaluateTask("m00", models, Split.VAL)])[0][0].task_id,
    }

    assert len(ids) == 6


def test_probe_headers_carry_the_request() -> None:
    frames = frames_at(0.0, TensorEncoding(dtype="float16"))

    ((_, losses, body),) = frames.losses(
        1, [LossesTask("m00", {"a": A, "b": B}, Split.TEST, False)]
    )
    ((_, gradient, _),) = frames.gradients(1, [GradientTask("m00", {"a": A}, 8, 42)])

    assert isinstance(losses, LossesTaskMessage)
    assert (losses.model_keys, losses.split, losses.per_sample) == (("a", "b"), Split.TEST, False)
    assert isinstance(gradient, GradientTaskMessage)
    assert (gradient.batch_size, gradient.seed) == (8, 42)
    decoded = decode_tensors(body, losses.encoding, {"a": N, "b": N}, max_bytes=1 << 20)
    np.testing.assert_allclose(decoded["a"], A, rtol=1e-3)


def test_a_target_that_is_a_candidate_travels_once() -> None:
    task = FitTask(
        "m00",
        {"cluster-0": A},
        CONFIG,
        seed=1,
        proximal=(Proximal(A, 0.1), Proximal(G, 2.0, "embedding")),
    )

    ((pending, header, body),) = frames_at(0.0).fit(1, [task])

    assert isinstance(header, FitTaskMessage)
    assert header.proximal == (
        ProximalSpec(tensor="cluster-0", strength=0.1),
        ProximalSpec(tensor="proximal-1", strength=2.0, part="embedding"),
    )
    assert header.tensor_names() == ("cluster-0", "proximal-1")
    decoded = decode_tensors(
        body, header.encoding, dict.fromkeys(header.tensor_names(), N), max_bytes=1 << 20
    )
    np.testing.assert_array_equal(decoded["proximal-1"], G)
    assert list(pending.models) == ["cluster-0"]


def test_terms_with_one_target_share_its_tensor_and_names_avoid_model_keys() -> None:
    tensors, specs = proximal_tensors({"proximal-0": A}, [Proximal(G, 1.0), Proximal(G, 2.0)])

    assert list(tensors) == ["proximal-0", "_proximal-0"]
    assert [s.tensor for s in specs] == ["_proximal-0", "_proximal-0"]
    assert tensors["_proximal-0"] is G
