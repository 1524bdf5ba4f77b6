"""Layers of k models with different weights, computed as one operation each.

The activations of k clients travel in one of two layouts:

* *merged*: shape (k·b, C, *space), client-major — any layer that treats samples
  independently (Flatten, a reshape in ``forward``) runs on it unchanged;
* *side by side*: shape (b, k·C, *space), the clients' channels next to each other — the
  layout of a grouped convolution with ``groups = k · groups``, so consecutive
  convolutions, activations and pools need no transposition between them.

:func:`to_side` and :func:`to_merged` convert. Convolutions take and give the side-by-side
layout, linear layers the merged one. ``MaxPool1d(2)`` — every zoo CNN pools so — is
replaced by :func:`pair_max_pool`, whose CPU kernels are several times faster than ATen's
``max_pool2d_with_indices`` for short rows.

Measured on two CPU cores for the ``compact`` model (k = 12 clients, b = 32), a step is
bound by oneDNN's grouped convolutions. Alternatives that looked faster for one layer in
isolation were not faster within a whole step, and were dropped: the wide first layer as
unfolded windows times a batched matmul (slower: the copy of overlapping windows),
the same layer rewritten space-to-depth as a stride-1 convolution over s·C channels, and
channels-last activations (each within noise of the plain grouped convolution).

Nor was the whole network channels last, every plain 1-D convolution as its windows
unrolled into a (b·L, K·C) matrix per client times the weights in one batched matrix
product (a layout and an autograd function of its own, equal to ``conv1d`` in outputs and
gradients over generated geometries). A first version ran a whole training step on one
thread at 0.82–1.14× the grouped convolution's speed (k = 2, 6, 12); a second, unrolling
a tap at a time and giving its gradient back contiguous, at 0.93–1.13× in two lanes of
k = 6 (median about 1.07×, twelve sets), 0.96–1.15× at k = 12 and 0.98–1.12× at k = 3
(six sets each), and slower for the ``paper`` model's wide layers. Whole rounds settled
it: ``bench_round_training.py --threads 2 --repeats 3`` in four interleaved pairs, batched
in two lanes (what the simulator runs on the CPU), 1.90 / 2.52 / 3.11 / 2.72 s grouped
against 1.92 / 2.71 / 2.74 / 2.91 s as matrix products. What the search did find:
``x[..., :even]`` of a row already even is still a view with a backward that copies the
gradient into a zero-filled tensor, so :func:`pair_max_pool` slices only odd lengths
(1.00–1.05× a step, the same gradients to the bit).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def to_side(x: torch.Tensor, k: int) -> torch.Tensor:
    """(k·b, C, *space) -> (b, k·C, *space)."""
    return x.reshape(k, -1, *x.shape[1:]).transpose(0, 1).flatten(1, 2)


def to_merged(x: torch.Tensor, k: int) -> torch.Tensor:
    """(b, k·C, *space) -> (k·b, C, *space)."""
    return x.reshape(x.shape[0], k, -1, *x.shape[2:]).transpose(0, 1).flatten(0, 1)


class PairMax(torch.autograd.Function):
    """``max_pool1d(x, 2)`` of an even-length last dimension, with max_pool1d's gradient.

    The gradient of a pair goes to its first element unless the second is strictly larger,
    as in max_pool1d, so training follows the same trajectory as with the original layer.
    The backward pass multiplies the gradient by float masks of the winners and writes the
    products straight into the even and odd positions of one new tensor; ``stack``-ing
    them, bool masks (a type promotion and a copy) or broadcasting over a trailing pair
    dimension are several times slower on the CPU.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        first, second = x[..., 0::2], x[..., 1::2]
        to_second = (second > first).to(x.dtype)
        ctx.save_for_backward(1 - to_second, to_second)
        return torch.maximum(first, second)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        to_first, to_second = ctx.saved_tensors
        grad_x = grad.new_empty(*grad.shape[:-1], 2 * grad.shape[-1])
        torch.mul(grad, to_first, out=grad_x[..., 0::2])
        torch.mul(grad, to_second, out=grad_x[..., 1::2])
        return grad_x


def pair_max_pool(x: torch.Tensor) -> torch.Tensor:
    """``max_pool1d(x, 2)`` along the last dimension (an odd last element is dropped).

    Inputs holding NaN are the one difference: the gradient of a pair with a NaN goes to
    its first element.
    """
    even = x.shape[-1] // 2 * 2
    if even < x.shape[-1]:  # a view of all of x would still cost a copy of its gradient
        x = x[..., :even]
    return PairMax.apply(x)  # type: ignore[no-untyped-call,no-any-return]


def is_pair_pool(module: nn.Module) -> bool:
    """Whether ``module`` is ``MaxPool1d(2)``: kernel 2, stride 2, no padding or dilation."""
    if not isinstance(module, nn.MaxPool1d) or module.return_indices or module.ceil_mode:
        return False
    settings = (module.kernel_size, module.stride, module.padding, module.dilation)
    return [v[0] if isinstance(v, tuple) else v for v in settings] == [2, 2, 0, 1]


def grouped_conv(
    conv: nn.Conv1d | nn.Conv2d, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """k convolutions: side x (b, k·C, *space), weight (k, O, C/g, *kernel) -> (b, k·O, ...)."""
    k = weight.shape[0]
    function = nn.functional.conv1d if isinstance(conv, nn.Conv1d) else nn.functional.conv2d
    return function(
        x,
        weight.flatten(0, 1),
        None if bias is None else bias.flatten(),
        conv.stride,
        conv.padding,
        conv.dilation,
        k * conv.groups,
    )


def stacked_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """k linear maps: merged x (k·b, ..., F), weight (k, O, F), bias (k, O) -> (k·b, ..., O)."""
    k = weight.shape[0]
    rows = x.reshape(k, -1, x.shape[-1])
    kernels = weight.transpose(1, 2)
    out = rows @ kernels if bias is None else torch.baddbmm(bias.unsqueeze(1), rows, kernels)
    return out.reshape(*x.shape[:-1], weight.shape[1])
