"""Model weights as one flat float32 vector: the unit that travels, averages and compares.

Every strategy works on flat vectors of shape (n_params,): averaging, weight updates
Δθ = θ_i − θ and the cosine similarities of FLACC (eq. 19) are plain numpy on them. The
order is that of ``module.named_parameters()``; zoo models hold no buffers (no batch norm),
so the parameters are the whole state.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from faultfleet.types import FloatArray


def parameter_count(module: nn.Module) -> int:
    """Number of trainable scalars of ``module``."""
    return sum(p.numel() for p in module.parameters())


def flatten_weights(module: nn.Module) -> FloatArray:
    """All parameters of ``module`` concatenated, shape (n_params,), float32, on the host."""
    with torch.no_grad():
        parts = [p.detach().reshape(-1).to("cpu", torch.float32) for p in module.parameters()]
        return np.ascontiguousarray(torch.cat(parts).numpy(), dtype=np.float32)


def load_weights(module: nn.Module, weights: FloatArray) -> None:
    """Copy a flat vector from :func:`flatten_weights` back into ``module`` in place.

    Raises
    ------
    ValueError
        If the vector's length differs from the module's parameter count.
    """
    expected = parameter_count(module)
    if weights.ndim != 1 or weights.shape[0] != expected:
        raise ValueError(
            f"weights of shape {weights.shape} do not fit a model with {expected} parameters; "
            "was it produced by the same model architecture?"
        )
    offset = 0
    with torch.no_grad():
        for p in module.parameters():
            n = p.numel()
            chunk = torch.from_numpy(np.ascontiguousarray(weights[offset : offset + n]))
            p.copy_(chunk.reshape(p.shape).to(p.device, p.dtype))
            offset += n


def split_weights(module: nn.Module, weights: torch.Tensor) -> dict[str, torch.Tensor]:
    """View a flat tensor (..., n_params) as named tensors shaped like ``module``'s parameters.

    Leading dimensions are kept, so a stack of client vectors of shape (k, n_params) gives
    tensors of shape (k, *param.shape), ready for ``torch.func.functional_call`` under vmap.
    """
    expected = parameter_count(module)
    if weights.shape[-1] != expected:
        raise ValueError(
            f"a flat vector of length {weights.shape[-1]} does not fit a model with "
            f"{expected} parameters"
        )
    named: dict[str, torch.Tensor] = {}
    offset = 0
    lead = weights.shape[:-1]
    for name, p in module.named_parameters():
        n = p.numel()
        named[name] = weights[..., offset : offset + n].reshape(*lead, *p.shape)
        offset += n
    return named


def embedding_mask(module: nn.Module) -> np.ndarray[tuple[int], np.dtype[np.bool_]]:
    """Which entries of the flat weight vector belong to the embedding, shape (n_params,).

    FedAC (Zhang et al., §4.2 and §5.1) splits a network into the embedding φ — every layer
    but the last fully connected one — and the decision h, that last layer. The mask is
    True on φ's entries and False on h's (the weight and bias of the module's last
    ``nn.Linear``), in :func:`flatten_weights` order.

    Raises
    ------
    ValueError
        If the module has no linear layer to act as the decision part.
    """
    last = None
    for module_name, child in module.named_modules():
        if isinstance(child, nn.Linear):
            last = module_name
    if last is None:
        raise ValueError(
            f"{type(module).__name__} has no nn.Linear layer, so it has no decision part to "
            "split from its embedding"
        )
    prefix = f"{last}." if last else ""
    parts = [
        np.full(p.numel(), not name.startswith(prefix), dtype=np.bool_)
        for name, p in module.named_parameters()
    ]
    return np.concatenate(parts)
