"""The in-process fleet's codec hook: float32 changes nothing, float16 is the wire's round trip."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace

import numpy as np
import pytest

from faultfleet.tasks import (
    EvaluateTask,
    FitResult,
    FitTask,
    GradientTask,
    LossesTask,
    Proximal,
    Split,
)
from faultfleet.types import FloatArray
from faultfleet.wire.codec import decode_tensors, encode_tensors, scale_exponents
from faultfleet.wire.messages import TensorEncoding
from faultfleet_apps.simulation.fleet import InProcessFleet
from faultfleet_apps.simulation.wire_codec import WireCodec
from tests.edge_agent.test_training import tiny_cnn
from tests.faultfleet_apps.simulation.test_fleet import (
    CONFIG,
    CPU,
    federation,
    fitted_to,
    start,
)

FLOAT32 = WireCodec(TensorEncoding(dtype="float32"))
FLOAT16 = WireCodec(TensorEncoding(dtype="float16", compression="zlib"))


def wire(tensors: Mapping[str, FloatArray], encoding: TensorEncoding) -> dict[str, FloatArray]:
    """``tensors`` after encode_tensors → decode_tensors, as a frame carries them."""
    sizes = {name: value.size for name, value in tensors.items()}
    body = encode_tensors(tensors, encoding)
    return decode_tensors(body, encoding, sizes, max_bytes=1 << 26)


def body_bytes(tensors: Mapping[str, FloatArray], encoding: TensorEncoding) -> int:
    return len(encode_tensors(tensors, encoding))


def fit_tasks() -> list[FitTask]:
    pulled = {"m": start()}
    candidates = {"plain": fitted_to("a"), "flipped": fitted_to("c")}
    return [
        FitTask("a", {"m": start()}, CONFIG, 0),
        FitTask("c", candidates, CONFIG, 1),
        FitTask("b", pulled, CONFIG, 2, proximal=(Proximal(pulled["m"], 0.5),)),
        FitTask("d", {"m": start()}, CONFIG, 3, proximal=(Proximal(fitted_to("c"), 0.1),)),
        FitTask("nobody", {"m": start()}, CONFIG, 4),
    ]


def assert_identical(actual: object, expected: object) -> None:
    """Same type, every field equal: arrays (and mappings of them) value for value. A fit
    result (a slotted class whose update may be derived) is compared on what it exposes."""
    assert type(actual) is type(expected)
    names = (
        ["client_id", "model_key", "weights", "delta", "num_samples", "train_loss"]
        if isinstance(expected, FitResult)
        else [field.name for field in fields(expected)]  # type: ignore[arg-type]
    )
    for name in names:
        a, e = getattr(actual, name), getattr(expected, name)
        if isinstance(e, np.ndarray):
            np.testing.assert_array_equal(a, e)
        elif isinstance(e, Mapping):
            assert list(a) == list(e)
            for key, value in e.items():
                np.testing.assert_array_equal(a[key], value)
        else:
            assert a == e, name


@pytest.mark.parametrize("batched", [True, False])
def test_a_float32_codec_changes_no_answer(batched: bool) -> None:
    plain = InProcessFleet(federation(), tiny_cnn(), device=CPU, batched=batched)
    coded = InProcessFleet(federation(), tiny_cnn(), device=CPU, batched=batched, codec=FLOAT32)
    models = {"one": start(), "two": fitted_to("c")}
    rounds = [
        ("fit", fit_tasks()),
        ("evaluate", [EvaluateTask(c, models, Split.VAL) for c in ("a", "c", "nobody")]),
        ("losses", [LossesTask(c, models) for c in ("b", "d")]),
        ("gradients", [GradientTask(c, models, 5, 9) for c in ("a", "c")]),
    ]

    for method, tasks in rounds:
        expected = getattr(plain, method)(1, tasks)
        actual = getattr(coded, method)(1, tasks)

        assert actual.failures == expected.failures
        assert len(actual.results) == len(expected.results) > 0
        for a, e in zip(actual.results, expected.results, strict=True):
            assert_identical(a, e)


def test_a_float32_codec_counts_the_encoded_bodies() -> None:
    fleet = InProcessFleet(federation(), tiny_cnn(), device=CPU, codec=FLOAT32)
    tasks = fit_tasks()

    outcome = fleet.fit(1, tasks)

    float32 = TensorEncoding()
    # task "b"'s target is its model and travels once; task "d"'s is a tensor of its own
    bodies = [
        {"m": tasks[0].models["m"]},
        dict(tasks[1].models),
        {"m": tasks[2].models["m"]},
        {"m": tasks[3].models["m"], "proximal-0": tasks[3].proximal[0].target},
        {"m": tasks[4].models["m"]},
    ]
    assert outcome.bytes_down == sum(body_bytes(b, float32) for b in bodies)
    assert outcome.bytes_up == sum(
        body_bytes({"weights": r.weights}, float32) for r in outcome.results
    )


@pytest.mark.parametrize("batched", [True, False])
def test_a_float16_codec_is_exactly_encode_then_decode(batched: bool) -> None:
    coded = InProcessFleet(federation(), tiny_cnn(), device=CPU, batched=batched, codec=FLOAT16)
    plain = InProcessFleet(federation(), tiny_cnn(), device=CPU, batched=batched)
    weights, target = start(), fitted_to("c")
    task = FitTask("a", {"m": weights}, CONFIG, 5, proximal=(Proximal(target, 0.3),))
    sent = wire({"m": weights, "proximal-0": target}, FLOAT16.encoding)
    decoded_task = replace(
        task, models={"m": sent["m"]}, proximal=(Proximal(sent["proximal-0"], 0.3),)
    )

    (result,) = coded.fit(1, [task]).results

    # the client trained from the decoded task, proximal target included ...
    (reference,) = plain.fit(1, [decoded_task]).results
    assert not np.array_equal(sent["m"], weights)
    # ... and its weights arrived as the wire decodes them, Δθ taken from the sent weights
    expected = wire({"weights": reference.weights}, FLOAT16.encoding)["weights"]
    np.testing.assert_array_equal(result.weights, expected)
    np.testing.assert_array_equal(result.weights, result.weights.astype(np.float16))
    np.testing.assert_array_equal(result.delta, result.weights - weights)
    assert (result.train_loss, result.num_samples) == (reference.train_loss, reference.num_samples)


def test_float16_gradients_travel_scaled_as_agents_send_them() -> None:
    fleet = InProcessFleet(federation(), tiny_cnn(), device=CPU, codec=FLOAT16)
    plain = InProcessFleet(federation(), tiny_cnn(), device=CPU)
    models = {"one": start(), "two": fitted_to("c")}
    task = GradientTask("b", models, 6, seed=2)
    sent = replace(task, models=wire(models, FLOAT16.encoding))

    (result,) = fleet.gradients(1, [task]).results

    (reference,) = plain.gradients(1, [sent]).results
    exponents = scale_exponents(reference.gradients, FLOAT16.encoding)
    body = encode_tensors(reference.gradients, FLOAT16.encoding, exponents=exponents)
    sizes = {key: g.size for key, g in reference.gradients.items()}
    expected = decode_tensors(body, FLOAT16.encoding, sizes, max_bytes=1 << 26, exponents=exponents)
    assert result.losses == reference.losses
    for key in models:
        np.testing.assert_array_equal(result.gradients[key], expected[key])
        assert not np.array_equal(result.gradients[key], reference.gradients[key])


def test_an_answer_the_codec_refuses_becomes_a_failure() -> None:
    def refuse_answers(
        tensors: Mapping[str, FloatArray], *, scaled: bool = False
    ) -> tuple[dict[str, FloatArray], int]:
        if "weights" in tensors:
            raise ValueError("tensor 'weights' holds 7e+04, beyond float16's range")
        return dict(tensors), 1

    fleet = InProcessFleet(federation(), tiny_cnn(), device=CPU, codec=refuse_answers)

    outcome = fleet.fit(1, [FitTask("a", {"m": start()}, CONFIG, 0)])

    assert outcome.results == ()
    assert [(f.client_id, f.reason) for f in outcome.failures] == [
        ("a", "ValueError: tensor 'weights' holds 7e+04, beyond float16's range")
    ]
    assert (outcome.bytes_down, outcome.bytes_up) == (1, 0)


def test_evaluations_use_the_decoded_models() -> None:
    fleet = InProcessFleet(federation(), tiny_cnn(), device=CPU, codec=FLOAT16)
    plain = InProcessFleet(federation(), tiny_cnn(), device=CPU)
    models = {"plain": fitted_to("a"), "flipped": fitted_to("c")}
    sent = wire(models, FLOAT16.encoding)

    coded = fleet.evaluate(1, [EvaluateTask("d", models)]).results
    expected = plain.evaluate(1, [EvaluateTask("d", sent)]).results

    assert coded == expected
    assert coded != plain.evaluate(1, [EvaluateTask("d", models)]).results
