"""Analytical forward-pass FLOP counts for the layer types of the model zoo.

The count runs one dummy sample of shape (1, *sample_shape) through the model with a forward
hook on every leaf module, reads each layer's input and output shapes and applies the formula
of its type. The convention is the one of most model-zoo tables:

=============  ==========================================================================
layer          FLOPs per sample
=============  ==========================================================================
``Linear``     2 · in_features · out_features
``Conv1d``     2 · (C_in / groups) · k · C_out · L_out
``Conv2d``     2 · (C_in / groups) · k_h · k_w · C_out · H_out · W_out
``ReLU``       one per output element (a comparison)
``MaxPool``    (window size − 1) comparisons per output element
``Flatten``    0 (a reshape)
=============  ==========================================================================

A multiply-add counts as 2 FLOPs. The bias add is not counted apart: an output of a layer
with n inputs takes n multiplications, n − 1 accumulating additions and one bias addition, so
2 · n per output is exact with a bias. Only the forward pass is counted; a training step
costs roughly three times as much.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

SUPPORTED_LAYERS: tuple[type[nn.Module], ...] = (
    nn.Linear,
    nn.Conv1d,
    nn.Conv2d,
    nn.ReLU,
    nn.MaxPool1d,
    nn.MaxPool2d,
    nn.Flatten,
)
"""Leaf module types :func:`count_flops` knows; any other leaf is an error, not a silent 0."""


@dataclass(frozen=True)
class LayerFlops:
    """FLOPs of one leaf layer for one sample.

    Attributes
    ----------
    name : str
        The layer's qualified name in ``model.named_modules()``, e.g. ``"features.0"``.
    kind : str
        The layer's class name, e.g. ``"Conv1d"``.
    output_shape : tuple[int, ...]
        Shape of the layer's output for one sample, without the batch dimension.
    flops : int
        Forward-pass FLOPs for one sample.
    """

    name: str
    kind: str
    output_shape: tuple[int, ...]
    flops: int


def _window_size(kernel_size: int | tuple[int, ...], n_dims: int) -> int:
    """Number of input elements one pooling window covers."""
    if isinstance(kernel_size, int):
        return int(kernel_size**n_dims)
    return int(math.prod(kernel_size))


def layer_flops(layer: nn.Module, input_shape: torch.Size, output_shape: torch.Size) -> int:
    """FLOPs of one leaf ``layer`` for one sample, from its batched input and output shapes.

    Parameters
    ----------
    layer : nn.Module
        A leaf module of one of the :data:`SUPPORTED_LAYERS` types.
    input_shape, output_shape : torch.Size
        Shapes of the layer's input and output with a leading batch dimension of 1.

    Returns
    -------
    int
        Forward-pass FLOPs (a multiply-add counts as 2).

    Raises
    ------
    ValueError
        If ``layer`` is not of a supported type.
    """
    out_elements = math.prod(output_shape[1:])
    if isinstance(layer, nn.Linear):
        return 2 * layer.in_features * layer.out_features * (out_elements // layer.out_features)
    if isinstance(layer, nn.Conv1d | nn.Conv2d):
        taps = math.prod(layer.kernel_size)
        return 2 * (layer.in_channels // layer.groups) * taps * out_elements
    if isinstance(layer, nn.ReLU):
        return out_elements
    if isinstance(layer, nn.MaxPool1d):
        return (_window_size(layer.kernel_size, 1) - 1) * out_elements
    if isinstance(layer, nn.MaxPool2d):
        return (_window_size(layer.kernel_size, 2) - 1) * out_elements
    if isinstance(layer, nn.Flatten):
        return 0
    supported = ", ".join(t.__name__ for t in SUPPORTED_LAYERS)
    raise ValueError(
        f"cannot count the FLOPs of layer type {type(layer).__name__}; supported types are "
        f"{supported}: add a formula to faultfleet.models.flops.layer_flops for it"
    )


def flops_per_layer(model: nn.Module, sample_shape: tuple[int, ...]) -> list[LayerFlops]:
    """Forward-pass FLOPs of every leaf layer of ``model`` for one sample, in call order.

    Parameters
    ----------
    model : nn.Module
        A model built from :data:`SUPPORTED_LAYERS` (containers such as ``nn.Sequential`` are
        walked, not counted).
    sample_shape : tuple[int, ...]
        Shape of one input sample without the batch dimension, e.g. (1, 1024).

    Returns
    -------
    list[LayerFlops]
        One entry per leaf-layer call.

    Raises
    ------
    ValueError
        If the model holds a leaf layer of an unsupported type.
    """
    records: list[LayerFlops] = []
    handles = []
    for name, module in model.named_modules():
        if next(module.children(), None) is not None:
            continue

        def hook(
            layer: nn.Module,
            inputs: tuple[torch.Tensor, ...],
            output: torch.Tensor,
            layer_name: str = name,
        ) -> None:
            flops = layer_flops(layer, inputs[0].shape, output.shape)
            shape = tuple(output.shape[1:])
            records.append(LayerFlops(layer_name, type(layer).__name__, shape, flops))

        handles.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(torch.zeros((1, *sample_shape)))
    finally:
        for handle in handles:
            handle.remove()
    return records


def count_flops(model: nn.Module, sample_shape: tuple[int, ...]) -> int:
    """Total forward-pass FLOPs of ``model`` for one sample of shape ``sample_shape``.

    See :func:`flops_per_layer` for the parameters and the module docstring for the formulas.
    """
    return sum(record.flops for record in flops_per_layer(model, sample_shape))
