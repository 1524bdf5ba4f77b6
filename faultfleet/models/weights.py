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
