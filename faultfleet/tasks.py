"""What the coordinator asks of clients and what they answer, as in-process dataclasses.

These types are the contract between the round engine (``coordinator``), the strategies and
whatever carries tasks to clients: the in-process simulator or MQTT. Weights
are flat float32 vectors (see :mod:`faultfleet.models.weights`).

Fit semantics
-------------
A :class:`FitTask` carries one or more candidate models. With one candidate the client
trains it. With several (IFCA, Ghosh et al. 2020) the client first computes the mean loss
of every candidate on its training data, picks the lowest (ties: the first key in the
task's order) and trains that one; :attr:`FitResult.model_key` says which it picked.
Evaluation tasks follow the same rule.

Probe semantics
---------------
Probes ask a client to measure models on its data without training them, so that the
coordinator can place the client in a cluster. A :class:`LossesTask` asks for the loss of
every model it carries on one split, per sample (FAACL's per-sample validation losses) or
as the mean. A :class:`GradientTask` asks for the mean loss and its gradient for every
model on one mini-batch of the training data, the same batch for all of them (joint
gradient and loss clustering, Lin, Chen et al., §II-B, eqs. 1 and 3). Both run in eval
mode and leave the models unchanged; unlike fit, no candidate is chosen.

Several fit tasks per client
----------------------------
A strategy may send one client several fit tasks in one round, each for a different model:
FAACL's cluster training (Algorithm 6) has a device train its own cluster's model and, on
behalf of every cluster it supports, that cluster's model too. Results say which model
they trained (:attr:`FitResult.model_key`).

Proximal terms
--------------
A fit task may carry :class:`Proximal` terms: during local training each adds
``strength · (θ − target)`` to the gradient of the parameters it covers, the gradient of
``strength/2 · ‖θ − target‖²`` (FedAC's intra-cluster μ term over the whole model and its
global-embedding λ term over the embedding part, Zhang et al. eq. 3 and Algorithm 1,
LocalUpdate line 4). The reported training loss is the cross-entropy alone.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

import numpy as np

from faultfleet.errors import UsageError
from faultfleet.types import FloatArray

OptimizerName = Literal["sgd", "adam"]

ModelPart = Literal["all", "embedding"]
"""Which parameters a proximal term covers: every one, or the embedding — every parameter
except those of the model's last linear layer, the decision part
(:func:`faultfleet.models.weights.embedding_mask`)."""


@dataclass(frozen=True)
class TrainConfig:
    """Local training hyper-parameters sent with every fit task.

    Defaults are FLACC §VI (mixed-fault case study): Adam, learning rate 5e-4, E = 5 local
    epochs, batch size B = 32.
    """

    optimizer: OptimizerName = "adam"
    learning_rate: float = 5e-4
    epochs: int = 5
    batch_size: int = 32
    momentum: float = 0.0
    """SGD momentum (ignored by Adam)."""

    def __post_init__(self) -> None:
        if self.optimizer not in ("sgd", "adam"):
            raise UsageError(f"optimizer must be 'sgd' or 'adam', got {self.optimizer!r}")
        if not self.learning_rate > 0:
            raise UsageError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.epochs < 1:
            raise UsageError(f"epochs must be >= 1, got {self.epochs}")
        if self.batch_size < 1:
            raise UsageError(f"batch_size must be >= 1, got {self.batch_size}")
        if not 0.0 <= self.momentum < 1.0:
            raise UsageError(f"momentum must be in [0, 1), got {self.momentum}")


class Split(StrEnum):
    """Which part of a client's data a task uses."""

    TRAIN = "train"
    VAL = "val"
    TEST = "test"


def _check_part(part: str) -> None:
    if part not in ("all", "embedding"):
        raise ValueError(f"part must be 'all' or 'embedding', got {part!r}")


def _check_strength(strength: float) -> None:
    if not (strength >= 0.0 and np.isfinite(strength)):
        raise ValueError(f"strength must be a finite number >= 0, got {strength!r}")


@dataclass(frozen=True)
class ProximalTerm:
    """A strategy's request to pull a client's training towards one of its models."""

    model_key: str
    """The model whose weights are the target."""
    strength: float
    """The coefficient (μ or λ of FedAC eq. 3)."""
    part: ModelPart = "all"

    def __post_init__(self) -> None:
        _check_strength(self.strength)
        _check_part(self.part)


@dataclass(frozen=True)
class Proximal:
    """A proximal term of a fit task, with its target weights filled in."""

    target: FloatArray
    """Shape (n_params,), float32; entries outside :attr:`part` are ignored."""
    strength: float
    part: ModelPart = "all"

    def __post_init__(self) -> None:
        _check_strength(self.strength)
        _check_part(self.part)


@dataclass(frozen=True)
class FitInstruction:
    """A strategy's answer to "which model does this client train this round"."""

    client_id: str
    model_keys: tuple[str, ...]
    """One key: train that model. Several: the client picks the lowest-loss one (IFCA)."""
    proximal: tuple[ProximalTerm, ...] = ()
    """Terms added to the local objective (see the module docstring)."""

    def __post_init__(self) -> None:
        if not self.model_keys:
            raise ValueError(f"fit instruction for {self.client_id!r} names no model")


@dataclass(frozen=True)
class LossesInstruction:
    """A strategy's request for the losses of some of its models on a client's split."""

    client_id: str
    model_keys: tuple[str, ...]
    split: Split = Split.VAL
    per_sample: bool = True

    def __post_init__(self) -> None:
        if not self.model_keys:
            raise ValueError(f"losses instruction for {self.client_id!r} names no model")


@dataclass(frozen=True)
class GradientInstruction:
    """A strategy's request for the loss and gradient of some of its models on one
    mini-batch of a client's training data (the engine derives the batch seed)."""

    client_id: str
    model_keys: tuple[str, ...]
    batch_size: int

    def __post_init__(self) -> None:
        if not self.model_keys:
            raise ValueError(f"gradient instruction for {self.client_id!r} names no model")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")


@dataclass(frozen=True)
class EvaluateInstruction:
    """Which model (or candidates, lowest training loss wins) a client predicts with."""

    client_id: str
    model_keys: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.model_keys:
            raise ValueError(f"evaluate instruction for {self.client_id!r} names no model")


@dataclass(frozen=True)
class FitTask:
    """A fit instruction with the weights filled in, ready to send."""

    client_id: str
    models: Mapping[str, FloatArray]
    config: TrainConfig
    seed: int
    """Seeds the client's batch order, so a round is reproducible wherever it runs."""
    proximal: tuple[Proximal, ...] = ()
    """Terms added to the local objective (see the module docstring)."""


class FitResult:
    """A client's answer to a fit task: the local update of FLACC Algorithm 1, lines 7–8.

    Immutable. The weight update Δθ_i = θ_i − θ is either given (``delta``) or, with
    ``delta=None``, derived from the model the client started from (``base``) each time it
    is read and never kept: a coordinator holding thousands of updates keeps one
    update-sized array per update, not two. Both give the same values (a float32
    subtraction).

    Parameters
    ----------
    client_id, model_key : str
    weights : array of shape (n_params,), float32
        θ_i after local training; may be a read-only view of the received message.
    delta : array of shape (n_params,), float32, or None
        Δθ_i; None to derive it from ``base``.
    num_samples : int
    train_loss : float
        Mean cross-entropy over the samples of the last local epoch.
    base : array of shape (n_params,), float32, optional
        θ, the weights the client was sent; required when ``delta`` is None.
    """

    __slots__ = ("_delta", "base", "client_id", "model_key", "num_samples", "train_loss", "weights")

    client_id: str
    model_key: str
    weights: FloatArray
    num_samples: int
    train_loss: float
    base: FloatArray | None
    _delta: FloatArray | None

    def __init__(
        self,
        client_id: str,
        model_key: str,
        weights: FloatArray,
        delta: FloatArray | None,
        num_samples: int,
        train_loss: float,
        *,
        base: FloatArray | None = None,
    ) -> None:
        if delta is None and base is None:
            raise ValueError(f"fit result of {client_id!r} needs its delta or its base weights")
        for name, value in (
            ("client_id", client_id),
            ("model_key", model_key),
            ("weights", weights),
            ("_delta", delta),
            ("num_samples", num_samples),
            ("train_loss", train_loss),
            ("base", base),
        ):
            object.__setattr__(self, name, value)

    @property
    def delta(self) -> FloatArray:
        """Weight update Δθ_i = θ_i − θ, shape (n_params,); derived anew from ``base`` on
        every read when it was not given."""
        if self._delta is not None:
            return self._delta
        assert self.base is not None  # checked in __init__
        return self.weights - self.base

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"FitResult is immutable: cannot set {name!r}")

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        fields = (self.client_id, self.model_key, self.weights, self._delta, self.num_samples)
        return _fit_result, (*fields, self.train_loss, self.base)

    def __repr__(self) -> str:
        return (
            f"FitResult(client_id={self.client_id!r}, model_key={self.model_key!r}, "
            f"n_params={self.weights.shape[0] if self.weights.ndim else 0}, "
            f"num_samples={self.num_samples}, train_loss={self.train_loss!r})"
        )


def _fit_result(
    client_id: str,
    model_key: str,
    weights: FloatArray,
    delta: FloatArray | None,
    num_samples: int,
    train_loss: float,
    base: FloatArray | None,
) -> FitResult:
    """Unpickling: a :class:`FitResult` from its fields, ``base`` included."""
    return FitResult(client_id, model_key, weights, delta, num_samples, train_loss, base=base)


@dataclass(frozen=True)
class EvaluateTask:
    """An evaluate instruction with the weights filled in."""

    client_id: str
    models: Mapping[str, FloatArray]
    split: Split = Split.TEST


@dataclass(frozen=True)
class EvaluateResult:
    """Accuracy and mean loss of the chosen model on one split of one client."""

    client_id: str
    model_key: str
    accuracy: float
    loss: float
    num_samples: int


@dataclass(frozen=True)
class Failure:
    """A client that did not answer a task, and why (a timeout, an error message)."""

    client_id: str
    reason: str


@dataclass(frozen=True)
class FitOutcome:
    """Everything that came back from one round of fit tasks."""

    results: tuple[FitResult, ...]
    failures: tuple[Failure, ...] = ()
    bytes_down: int = 0
    bytes_up: int = 0


@dataclass(frozen=True)
class EvaluateOutcome:
    """Everything that came back from one round of evaluate tasks."""

    results: tuple[EvaluateResult, ...]
    failures: tuple[Failure, ...] = ()
    extra: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class LossesTask:
    """Losses of several models on one split of one client's data."""

    client_id: str
    models: Mapping[str, FloatArray]
    """Weight vectors of shape (n_params,), in the order the result reports them."""
    split: Split = Split.VAL
    per_sample: bool = True
    """True: every sample's loss. False: only their mean (1 float per model on the wire)."""


@dataclass(frozen=True)
class LossesResult:
    """A client's answer to a :class:`LossesTask`."""

    client_id: str
    losses: Mapping[str, FloatArray]
    """Per model key, in the task's order: cross-entropy of every sample of the split, shape
    (n,), float32, in the split's sample order; or, if the task asked for
    ``per_sample=False``, shape (1,) holding their mean."""
    num_samples: int
    """n, the samples of the split."""


@dataclass(frozen=True)
class GradientTask:
    """Mean loss and gradient of several models on one mini-batch of training data."""

    client_id: str
    models: Mapping[str, FloatArray]
    """Weight vectors of shape (n_params,), in the order the result reports them."""
    batch_size: int
    """Samples of the mini-batch; clipped to the client's training set size."""
    seed: int
    """Seeds the draw of the mini-batch, without replacement, from the training data."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")


@dataclass(frozen=True)
class GradientResult:
    """A client's answer to a :class:`GradientTask`; every model saw the same mini-batch."""

    client_id: str
    losses: Mapping[str, float]
    """Mean cross-entropy of each model on the mini-batch. Eq. 1 of the joint gradient and
    loss paper sums instead: multiply by ``num_samples`` for its L_{i,k}."""
    gradients: Mapping[str, FloatArray]
    """Gradient of each mean loss w.r.t. the flat weights, shape (n_params,), float32."""
    num_samples: int
    """Samples of the mini-batch (the task's batch size, clipped to the data size)."""


@dataclass(frozen=True)
class LossesOutcome:
    """Everything that came back from one round of losses tasks."""

    results: tuple[LossesResult, ...]
    failures: tuple[Failure, ...] = ()
    bytes_down: int = 0
    bytes_up: int = 0


@dataclass(frozen=True)
class GradientOutcome:
    """Everything that came back from one round of gradient tasks."""

    results: tuple[GradientResult, ...]
    failures: tuple[Failure, ...] = ()
    bytes_down: int = 0
    bytes_up: int = 0


ProbeInstructions = Sequence[LossesInstruction] | Sequence[GradientInstruction]
"""What a strategy asks for in one probe step: all losses or all gradient instructions."""

ProbeResults = Sequence[LossesResult] | Sequence[GradientResult]


def client_seed(seed: int, server_round: int, client_id: str) -> int:
    """The training seed of ``client_id`` in ``server_round`` of a run seeded with ``seed``.

    Derived (not drawn from a running generator), so it does not depend on which other
    clients were sampled or on whether the run was resumed.
    """
    key = zlib.crc32(client_id.encode("utf-8"))
    sequence = np.random.SeedSequence([seed, server_round, key])
    return int(sequence.generate_state(1, np.uint32)[0])
