"""The optimiser and the proximal terms of a local update's steps.

:func:`make_optimizer` builds the fresh ``torch.optim`` optimiser a
:class:`~faultfleet.tasks.TrainConfig` asks for. A fit task's proximal terms (FedAC eq. 3,
LocalUpdate line 4) add ``strength·mask·(θ − target)`` to every step's gradient;
:func:`proximal_pull` sums them into one linear pull ``c·θ − b`` over the flat weights and
:func:`split_pull` cuts that pull into one ``(c, b)`` pair per parameter of the model being
trained, as :func:`edge_agent.training.local_update` applies it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch import nn

from edge_agent.batching import host_tensor
from faultfleet.models.weights import embedding_mask
from faultfleet.tasks import Proximal, TrainConfig
from faultfleet.types import FloatArray


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


def make_optimizer(
    parameters: Iterator[nn.Parameter], config: TrainConfig
) -> torch.optim.Optimizer:
    """A fresh optimiser over ``parameters``: ``config.optimizer`` at ``config.learning_rate``.

    "adam" is ``torch.optim.Adam`` with torch's default betas and eps; anything else is
    ``torch.optim.SGD`` with ``config.momentum``.
    """
    if config.optimizer == "adam":
        return torch.optim.Adam(parameters, lr=config.learning_rate)
    return torch.optim.SGD(parameters, lr=config.learning_rate, momentum=config.momentum)


def split_pull(
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
