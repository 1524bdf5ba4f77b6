"""Local training and evaluation of one client: what the edge agent runs on a gateway.

This is the reference path of FLACC Algorithm 1, lines 7–8 (local update): E epochs of
mini-batch SGD or Adam with ``torch.optim`` on the client's data, starting from the weights
the coordinator sent. :mod:`faultfleet.simulation.batched_training` vectorises the same
computation over many clients and is tested against this module.

Weights are flat float32 vectors (:mod:`faultfleet.models.weights`); the ``model`` passed in
only gives the architecture. :func:`local_update` trains a private copy of it and
:func:`evaluate` calls it functionally, so the caller's module is never changed.

The probes that clustering strategies send (:class:`~faultfleet.tasks.LossesTask`,
:class:`~faultfleet.tasks.GradientTask`) have their reference primitives here too:
:func:`per_sample_losses`, and :func:`minibatch` with :func:`loss_and_gradient`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
from torch import nn
from torch.func import functional_call

from faultfleet.models.weights import (
    embedding_mask,
    flatten_weights,
    load_weights,
    split_weights,
)
from faultfleet.tasks import Proximal, TrainConfig
from faultfleet.types import FloatArray, IntArray
from signal_pipeline.federation import Dataset


def select_device(preference: str = "auto") -> torch.device:
    """The torch device to compute on.

    Parameters
    ----------
    preference : {"auto", "cpu", "cuda", "cuda:<index>"}
        ``"auto"`` takes CUDA when it is available and the CPU otherwise.

    Raises
    ------
    ValueError
        For an unknown preference.
    RuntimeError
        For ``"cuda"`` when this torch build sees no CUDA device.
    """
    if preference == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if preference == "cpu":
        return torch.device("cpu")
    if preference == "cuda" or preference.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"device {preference!r} was asked for but torch.cuda.is_available() is False; "
                "install the CUDA build of torch on a GPU machine, or use 'auto' or 'cpu'"
            )
        return torch.device(preference)
    raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:index]', got {preference!r}")


def batch_schedule(num_samples: int, epochs: int, batch_size: int, seed: int) -> list[IntArray]:
    """Mini-batch indices of a local update, in the order they are trained.

    Every epoch is a fresh permutation from ``np.random.default_rng(seed)``, cut into batches
    of ``batch_size``; an epoch's last batch may be smaller and is kept.

    Returns
    -------
    list of int64 arrays
        ``epochs * ceil(num_samples / batch_size)`` arrays of indices into the dataset.
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1 to build batches, got {num_samples}")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    rng = np.random.default_rng(seed)
    schedule: list[IntArray] = []
    for _ in range(epochs):
        order = rng.permutation(num_samples).astype(np.int64, copy=False)
        schedule.extend(
            order[start : start + batch_size] for start in range(0, num_samples, batch_size)
        )
    return schedule


def host_tensor(array: npt.ArrayLike, dtype: npt.DTypeLike, device: torch.device) -> torch.Tensor:
    """``array`` as a tensor on ``device``, copied if it is read-only or not contiguous."""
    return torch.from_numpy(np.require(array, dtype=dtype, requirements=["C", "W"])).to(device)


@dataclass(frozen=True)
class LocalUpdate:
    """The outcome of a local update on one client."""

    weights: FloatArray
    """θ_i after training, shape (n_params,)."""
    delta: FloatArray
    """Δθ_i = θ_i − θ, shape (n_params,)."""
    num_samples: int
    """Training samples of the client (the aggregation weight)."""
    train_loss: float
    """Mean cross-entropy over the samples of the last epoch, each batch's loss taken before
    its optimiser step."""


def proximal_pull(
    model: nn.Module, terms: Sequence[Proximal]
) -> tuple[FloatArray, FloatArray] | None:
    """The proximal terms of a fit task as one linear pull: gradient += c·θ − b.

    ``c = Σ strength·mask`` and ``b = Σ strength·mask·target`` over the terms, where mask
    selects the parameters a term covers (:func:`~faultfleet.models.weights.embedding_mask`
    for ``part="embedding"``); the sum of the terms' gradients
    ``strength·mask·(θ − target)`` is then ``c·θ − b``. None when there are no terms.

    Raises
    ------
    ValueError
        If a target does not fit the model.
    """
    if not terms:
        return None
    size = sum(p.numel() for p in model.parameters())
    coefficient = np.zeros(size, dtype=np.float64)
    offset = np.zeros(size, dtype=np.float64)
    mask: FloatArray | None = None
    for term in terms:
        if term.target.shape != (size,):
            raise ValueError(
                f"a proximal target of shape {term.target.shape} does not fit a model with "
                f"{size} parameters"
            )
        if term.part == "embedding":
            if mask is None:
                mask = embedding_mask(model).astype(np.float64)
            weight = term.strength * mask
        else:
            weight = np.full(size, term.strength)
        coefficient += weight
        offset += weight * term.target
    return coefficient.astype(np.float32), offset.astype(np.float32)


def _optimizer(parameters: Iterator[nn.Parameter], config: TrainConfig) -> torch.optim.Optimizer:
    if config.optimizer == "adam":
        return torch.optim.Adam(parameters, lr=config.learning_rate)
    return torch.optim.SGD(parameters, lr=config.learning_rate, momentum=config.momentum)


def local_update(
    model: nn.Module,
    weights: FloatArray,
    data: Dataset,
    config: TrainConfig,
    seed: int,
    device: torch.device | None = None,
    proximal: Sequence[Proximal] = (),
) -> LocalUpdate:
    """Train ``config.epochs`` epochs from ``weights`` on ``data`` (FLACC Alg. 1, line 7).

    Parameters
    ----------
    model : torch module
        The architecture; a private copy is trained, ``model`` itself is left unchanged.
    weights : array of shape (n_params,), float32
        Starting point θ; not modified.
    data : Dataset
        Training samples x of shape (n, *sample_shape) and labels y of shape (n,), n >= 1.
    config : TrainConfig
        Optimiser ("sgd" with ``momentum`` or "adam" with torch's default betas and eps, a
        fresh state on every call), learning rate, epochs and batch size.
    seed : int
        Seeds the batch order (:func:`batch_schedule`).
    device : torch.device, optional
        Defaults to ``select_device("auto")``.
    proximal : Proximal terms
        Added to every step's gradient (:func:`proximal_pull`); the reported loss is the
        cross-entropy alone.

    Raises
    ------
    ValueError
        If ``data`` is empty or ``weights`` (or a proximal target) does not fit ``model``.
    """
    if len(data) == 0:
        raise ValueError("local_update needs a non-empty training dataset, got 0 samples")
    pull = proximal_pull(model, proximal)
    device = select_device("auto") if device is None else device
    work = copy.deepcopy(model).to(device)
    load_weights(work, weights)
    work.train()
    x = host_tensor(data.x, np.float32, device)
    y = host_tensor(data.y, np.int64, device)
    schedule = batch_schedule(len(data), config.epochs, config.batch_size, seed)
    indices = host_tensor(np.concatenate(schedule), np.int64, device)
    last_epoch_start = len(schedule) // config.epochs * (config.epochs - 1)
    optimizer = _optimizer(work.parameters(), config)
    pulls = _split_pull(work, pull, device)
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    offset = 0
    for step, batch in enumerate(schedule):
        index = indices[offset : offset + len(batch)]
        offset += len(batch)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(work(x[index]), y[index])
        loss.backward()  # type: ignore[no-untyped-call]
        for parameter, (c, b) in pulls:
            assert parameter.grad is not None
            parameter.grad.add_(c * parameter.detach() - b)
        optimizer.step()
        if step >= last_epoch_start:
            loss_sum += loss.detach().double() * len(batch)
    new_weights = flatten_weights(work)
    delta = new_weights - np.asarray(weights, dtype=np.float32)
    return LocalUpdate(new_weights, delta, len(data), float(loss_sum.item()) / len(data))


def _split_pull(
    model: nn.Module, pull: tuple[FloatArray, FloatArray] | None, device: torch.device
) -> list[tuple[nn.Parameter, tuple[torch.Tensor, torch.Tensor]]]:
    """(parameter, (c, b)) per parameter of ``model``, shaped like it; empty without a pull."""
    if pull is None:
        return []
    c_all = host_tensor(pull[0], np.float32, device)
    b_all = host_tensor(pull[1], np.float32, device)
    pieces = []
    offset = 0
    for parameter in model.parameters():
        n = parameter.numel()
        c = c_all[offset : offset + n].reshape(parameter.shape)
        b = b_all[offset : offset + n].reshape(parameter.shape)
        pieces.append((parameter, (c, b)))
        offset += n
    return pieces


@dataclass(frozen=True)
class Evaluation:
    """Predictions of one model on one dataset and their summary."""

    accuracy: float
    """Fraction of correct predictions, in [0, 1]."""
    loss: float
    """Mean cross-entropy."""
    num_samples: int
    losses: FloatArray
    """Cross-entropy of every sample, shape (n,)."""
    predictions: IntArray
    """Predicted class of every sample, shape (n,)."""

    @classmethod
    def from_outputs(
        cls, losses: FloatArray, predictions: IntArray, labels: IntArray
    ) -> Evaluation:
        """Summarise per-sample losses and predictions, all of shape (n,) with n >= 1."""
        if len(labels) == 0:
            raise ValueError("cannot summarise an evaluation of 0 samples")
        accuracy = float(np.mean(predictions == labels))
        loss = float(np.mean(losses, dtype=np.float64))
        return cls(accuracy, loss, len(labels), losses, predictions)


def evaluate(
    model: nn.Module,
    weights: FloatArray,
    data: Dataset,
    *,
    batch_size: int = 1024,
    device: torch.device | None = None,
) -> Evaluation:
    """Accuracy and cross-entropy of the model with ``weights`` on ``data``, in eval mode.

    Parameters
    ----------
    model : torch module
        The architecture; called functionally with ``weights``, left unchanged.
    weights : array of shape (n_params,), float32
    data : Dataset
        At least one sample: an empty dataset has no accuracy, so it raises ``ValueError``
        rather than returning NaN.
    batch_size : int
        Samples per forward pass (memory, not results).
    device : torch.device, optional
        Defaults to ``select_device("auto")``.
    """
    if len(data) == 0:
        raise ValueError("evaluate needs a non-empty dataset, got 0 samples")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    device = select_device("auto") if device is None else device
    params = split_weights(model, host_tensor(weights, np.float32, device))
    y = host_tensor(data.y, np.int64, device)
    losses, predictions = [], []
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for start in range(0, len(data), batch_size):
                x = host_tensor(data.x[start : start + batch_size], np.float32, device)
                logits = functional_call(model, params, (x,))
                target = y[start : start + batch_size]
                losses.append(nn.functional.cross_entropy(logits, target, reduction="none"))
                predictions.append(logits.argmax(dim=1))
    finally:
        model.train(was_training)
    return Evaluation.from_outputs(
        torch.cat(losses).to("cpu", torch.float32).numpy(),
        torch.cat(predictions).to("cpu", torch.int64).numpy(),
        np.asarray(data.y, dtype=np.int64),
    )


def lowest_loss_key(keys: Sequence[str], losses: Sequence[float]) -> str:
    """The key of the lowest loss; ties go to the first key, NaN never beats a number."""
    if not keys or len(keys) != len(losses):
        raise ValueError(f"need one loss per key and at least one key, got {keys} and {losses}")
    best = 0
    for i, loss in enumerate(losses):
        if loss < losses[best] or (np.isnan(losses[best]) and not np.isnan(loss)):
            best = i
    return keys[best]


def choose_model(
    model: nn.Module,
    candidates: Mapping[str, FloatArray],
    data: Dataset,
    *,
    batch_size: int = 1024,
    device: torch.device | None = None,
) -> tuple[str, list[float]]:
    """IFCA's cluster estimate (Ghosh et al. 2020, Alg. 1): the candidate of lowest loss.

    Parameters
    ----------
    candidates : mapping of key to array of shape (n_params,)
        In order; ties go to the first key.
    data : Dataset
        The client's training data (non-empty).

    Returns
    -------
    (key, losses)
        The chosen key and the mean loss of every candidate, in the mapping's order.
    """
    if not candidates:
        raise ValueError("choose_model needs at least one candidate model")
    losses = [
        evaluate(model, w, data, batch_size=batch_size, device=device).loss
        for w in candidates.values()
    ]
    return lowest_loss_key(list(candidates), losses), losses


def per_sample_losses(
    model: nn.Module,
    weights: FloatArray,
    data: Dataset,
    *,
    batch_size: int = 1024,
    device: torch.device | None = None,
) -> FloatArray:
    """Cross-entropy of every sample of ``data`` under ``weights`` (FAACL's probe).

    The losses of :func:`evaluate`, which this calls: eval mode, ``model`` left unchanged.

    Returns
    -------
    array of shape (n,), float32
        In the order of ``data``; ``data`` must be non-empty.
    """
    return evaluate(model, weights, data, batch_size=batch_size, device=device).losses


def minibatch(data: Dataset, batch_size: int, seed: int) -> Dataset:
    """``min(batch_size, len(data))`` samples drawn without replacement, seeded by ``seed``.

    The same ``(len(data), batch_size, seed)`` always draws the same indices, wherever it
    runs (``np.random.default_rng(seed).choice``).
    """
    if len(data) == 0:
        raise ValueError("minibatch needs a non-empty dataset, got 0 samples")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    rng = np.random.default_rng(seed)
    indices = rng.choice(len(data), size=min(batch_size, len(data)), replace=False)
    return data.subset(indices.astype(np.int64, copy=False))


def loss_and_gradient(
    model: nn.Module,
    weights: FloatArray,
    x: FloatArray,
    y: IntArray,
    *,
    device: torch.device | None = None,
) -> tuple[float, FloatArray]:
    """Mean cross-entropy on one batch and its gradient w.r.t. the flat weights.

    Steps 1 and 2 of the joint gradient and loss clustering (Lin, Chen et al., §II-B,
    eq. 1 and the back-propagation step), with the mean instead of the sum over the batch.
    ``model`` is called functionally in eval mode, as :func:`evaluate` does, so the loss
    equals ``evaluate(...).loss`` on the same samples and ``model`` is left unchanged.

    Parameters
    ----------
    weights : array of shape (n_params,), float32
        Not modified.
    x : array of shape (b, *sample_shape), float32
    y : array of shape (b,), int64
        b >= 1.
    device : torch.device, optional
        Defaults to ``select_device("auto")``.

    Returns
    -------
    (loss, gradient)
        The mean loss and an array of shape (n_params,), float32, ordered like ``weights``.
    """
    if len(y) == 0 or len(x) != len(y):
        raise ValueError(
            f"loss_and_gradient needs a non-empty batch with one label per sample, got "
            f"{len(x)} samples and {len(y)} labels"
        )
    device = select_device("auto") if device is None else device
    flat = host_tensor(weights, np.float32, device).detach().requires_grad_(True)
    params = split_weights(model, flat)
    was_training = model.training
    model.eval()
    try:
        logits = functional_call(model, params, (host_tensor(x, np.float32, device),))
        loss = nn.functional.cross_entropy(logits, host_tensor(y, np.int64, device))
        (gradient,) = torch.autograd.grad(loss, flat)
    finally:
        model.train(was_training)
    return float(loss.item()), gradient.to("cpu", torch.float32).numpy()
