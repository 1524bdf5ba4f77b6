"""The in-process fleet's codec hook: weights that travel as they would over MQTT.

An :class:`~faultfleet_apps.simulation.fleet.InProcessFleet` given a :class:`WeightCodec`
passes through it, as the wire would carry them:

* down, every task's models (and a fit task's proximal targets that are not one of its
  models, laid out as :func:`coordinator.adapters.task_frames.proximal_tensors` lays out a
  fit frame's body): clients compute from the decoded weights;
* up, every fit result's weights, and every gradient probe's gradients (``scaled=True``:
  divided by the power of two of :func:`~faultfleet.wire.codec.scale_exponents` first, as
  agents send them). A fit result's Δθ is then recomputed as the decoded weights minus the
  coordinator's own weights, as :func:`coordinator.adapters.round_tasks.fit_result` does.

Losses probes travel in float32 whatever the encoding (as over MQTT) and are left alone.
Byte counts become what the codec reports (the encoded bodies). An answer the codec
refuses (float16 beyond ±65504) becomes a failure naming the error, as an agent answers
``task_failed`` when it cannot encode its answer.

:class:`WireCodec` is the wire's own codec (:func:`~faultfleet.wire.codec.encode_tensors` and
:func:`~faultfleet.wire.codec.decode_tensors`) in one
:class:`~faultfleet.wire.messages.TensorEncoding`; any callable of the protocol's shape
works, e.g. a candidate encoding under study.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

import numpy as np

from coordinator.adapters.task_frames import proximal_tensors
from faultfleet.tasks import (
    EvaluateTask,
    Failure,
    FitResult,
    FitTask,
    GradientResult,
    GradientTask,
    LossesTask,
    Proximal,
)
from faultfleet.types import FloatArray
from faultfleet.wire.codec import decode_tensors, encode_tensors, scale_exponents
from faultfleet.wire.messages import TensorEncoding
from faultfleet.wire.settings import DEFAULT_MAX_PAYLOAD_BYTES

ModelTask = TypeVar("ModelTask", EvaluateTask, LossesTask, GradientTask)


class WeightCodec(Protocol):
    """Named flat float32 vectors as the receiver decodes them, and the bytes carried."""

    def __call__(
        self, tensors: Mapping[str, FloatArray], *, scaled: bool = False
    ) -> tuple[dict[str, FloatArray], int]:
        """Round-trip ``tensors`` (each of shape (n,), float32).

        ``scaled``: the tensors are gradients, sent divided by a power of two per tensor.
        Returns the decoded float32 vectors by name and the size of the encoded body,
        bytes. Raises ``ValueError`` for tensors the encoding cannot carry.
        """
        ...


@dataclass(frozen=True)
class WireCodec:
    """The wire's codec in ``encoding``: safetensors bodies, as a frame carries them."""

    encoding: TensorEncoding
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    """Limit on an inflated body (``broker.max_payload_bytes``)."""

    def __call__(
        self, tensors: Mapping[str, FloatArray], *, scaled: bool = False
    ) -> tuple[dict[str, FloatArray], int]:
        """``tensors`` encoded with ``encode_tensors`` and decoded with ``decode_tensors``."""
        exponents = None
        if scaled:
            exponents = {k: e for k, e in scale_exponents(tensors, self.encoding).items() if e}
        body = encode_tensors(tensors, self.encoding, exponents=exponents)
        sizes = {name: int(np.asarray(value).size) for name, value in tensors.items()}
        decoded = decode_tensors(
            body, self.encoding, sizes, max_bytes=self.max_bytes, exponents=exponents
        )
        return decoded, len(body)


def carry_fit_task(task: FitTask, codec: WeightCodec) -> tuple[FitTask, int]:
    """``task`` with its models and proximal targets decoded, and its body's bytes."""
    tensors, specs = proximal_tensors(task.models, task.proximal)
    decoded, size = codec(tensors)
    proximal = tuple(
        Proximal(decoded[spec.tensor], term.strength, term.part)
        for spec, term in zip(specs, task.proximal, strict=True)
    )
    models = {key: decoded[key] for key in task.models}
    return replace(task, models=models, proximal=proximal), size


def carry_models(task: ModelTask, codec: WeightCodec) -> tuple[ModelTask, int]:
    """``task`` with its models decoded, and its body's bytes."""
    decoded, size = codec(task.models)
    return replace(task, models=decoded), size


def carry_fit_result(
    result: FitResult, sent: Mapping[str, FloatArray], codec: WeightCodec
) -> tuple[FitResult | Failure, int]:
    """``result`` with its weights decoded and Δθ taken from ``sent``, the coordinator's
    (not decoded) models of the task; a failure (0 bytes) if the codec refuses it."""
    try:
        decoded, size = codec({"weights": result.weights})
    except ValueError as error:
        return Failure(result.client_id, f"{type(error).__name__}: {error}"), 0
    weights = decoded["weights"]
    rebuilt = FitResult(
        result.client_id,
        result.model_key,
        weights,
        None,
        result.num_samples,
        result.train_loss,
        base=sent[result.model_key],
    )
    return rebuilt, size


def carry_gradients(
    result: GradientResult, codec: WeightCodec
) -> tuple[GradientResult | Failure, int]:
    """``result`` with its gradients decoded (scaled); a failure (0 bytes) if the codec
    refuses them."""
    try:
        decoded, size = codec(result.gradients, scaled=True)
    except ValueError as error:
        return Failure(result.client_id, f"{type(error).__name__}: {error}"), 0
    return replace(result, gradients={key: decoded[key] for key in result.gradients}), size
