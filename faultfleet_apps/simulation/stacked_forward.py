"""Gradients of k copies of one architecture with different weights, as one autograd graph.

``torch.func.vmap`` of ``grad`` computes per-client gradients for any model but pays a large
fixed cost per call on the CPU: a step of one client of the ``compact`` model took about
10 ms under vmap, 3.6 ms here and about 4.5 ms with plain ``torch.optim``, a cost that
dominates the tail of lockstep training, where few clients are left. For models whose
parameters all sit in ``Conv1d``, ``Conv2d`` and ``Linear`` layers (every zoo model) this
module runs the k models directly:

* the model is traced once with ``torch.fx`` and its graph interpreted with per-client
  parameters of shape (k, *shape), using the layers of
  :mod:`~faultfleet_apps.simulation.stacked_layers`: convolutions as one grouped convolution,
  linear layers as one batched matmul, ``MaxPool1d(2)`` as
  :func:`~faultfleet_apps.simulation.stacked_layers.pair_max_pool`;
* activations stay side by side (b, k·C, ...) through chains of convolutions, activation
  functions and pools, and are merged (k·b, ...) for anything else, which therefore runs
  unchanged (Flatten, reshapes in ``forward``);
* the loss is the sum over clients of each client's masked mean cross-entropy, so one
  backward pass gives every client the gradient of its own loss.

:func:`stacked_step_function` returns None for models it cannot take (tracing fails, or a
parameter lives outside those layers); callers then fall back to vmap.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx, nn

from faultfleet_apps.simulation.stacked_layers import (
    grouped_conv,
    is_pair_pool,
    pair_max_pool,
    stacked_linear,
    to_merged,
    to_side,
)

StepFunction = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]
]
"""(params (k, P), x (k, b, *shape), y (k, b), mask (k, b)) -> (grads (k, P), losses (k,))."""

logger = logging.getLogger(__name__)

_STACKABLE = (nn.Conv1d, nn.Conv2d, nn.Linear)
_CHANNELWISE = (
    nn.ReLU,
    nn.LeakyReLU,
    nn.ELU,
    nn.GELU,
    nn.Tanh,
    nn.Sigmoid,
    nn.Identity,
    nn.MaxPool1d,
    nn.MaxPool2d,
    nn.AvgPool1d,
    nn.AvgPool2d,
)
"""Parameter-free layers that treat every channel of every sample alike: they run on the
side-by-side layout as on the merged one."""


@dataclass(frozen=True)
class _Side:
    """Activations of k clients side by side, shape (b, k·C, *space)."""

    tensor: torch.Tensor
    k: int

    def merged(self) -> torch.Tensor:
        return to_merged(self.tensor, self.k)


def _merged(value: Any) -> Any:
    return value.merged() if isinstance(value, _Side) else value


class _StackedInterpreter(fx.Interpreter):
    """Runs a traced model on a merged batch (k·b, ...) with parameters of shape (k, ...)."""

    def __init__(self, module: fx.GraphModule, params: dict[str, torch.Tensor], k: int) -> None:
        super().__init__(module)
        self.params = params
        self.k = k

    def run_node(self, n: fx.Node) -> Any:
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        if n.op == "call_module" and len(args) == 1 and not kwargs:
            module = self.fetch_attr(str(n.target))
            result = self._layer(str(n.target), module, args[0])
            if result is not None:
                return result
        args, kwargs = fx.node.map_aggregate((args, kwargs), _merged)
        return getattr(self, n.op)(n.target, args, kwargs)

    def _layer(self, target: str, module: nn.Module, x: Any) -> Any:
        """The stacked layer's output, or None to run ``module`` on merged activations."""
        weight, bias = self.params.get(f"{target}.weight"), self.params.get(f"{target}.bias")
        if isinstance(module, nn.Conv1d | nn.Conv2d) and weight is not None:
            side = x.tensor if isinstance(x, _Side) else to_side(x, self.k)
            return _Side(grouped_conv(module, side, weight, bias), self.k)
        if isinstance(module, nn.Linear) and weight is not None:
            return stacked_linear(_merged(x), weight, bias)
        pool: Callable[[torch.Tensor], torch.Tensor] | None = None
        if is_pair_pool(module):
            pool = pair_max_pool
        elif isinstance(module, _CHANNELWISE):
            pool = module
        if pool is None:
            return None
        return _Side(pool(x.tensor), self.k) if isinstance(x, _Side) else pool(x)


def _traceable(model: nn.Module) -> fx.GraphModule | None:
    """The fx trace of ``model`` if every parameter lives in a stackable leaf layer."""
    try:
        traced = fx.symbolic_trace(model)
    except (fx.proxy.TraceError, TypeError, NotImplementedError, RuntimeError) as error:
        logger.debug("cannot trace %s (%s); per-client gradients fall back to vmap", model, error)
        return None
    called: set[str] = set()
    for node in traced.graph.nodes:
        if node.op == "get_attr":
            return None
        if node.op == "call_module":
            module = traced.get_submodule(node.target)
            own = list(module.parameters()) + list(module.buffers())
            if own and not (
                isinstance(module, _STACKABLE)
                and getattr(module, "padding_mode", "zeros") == "zeros"
            ):
                return None
            called.update(f"{node.target}.{name}" for name, _ in module.named_parameters())
    names = {name for name, _ in model.named_parameters()}
    return traced if called == names and not list(model.buffers()) else None


def stacked_step_function(model: nn.Module) -> StepFunction | None:
    """Per-client gradients and masked losses of ``model`` for a stack of weight rows.

    Returns None when the model cannot be run this way (see the module docstring). The
    answer is kept for the life of ``model`` (its architecture is never changed), so the
    model is traced once. Tracing patches ``torch.nn.Module.__call__`` for the whole
    process while it runs: call this first from one thread, before other threads compute
    with any model (:class:`~faultfleet_apps.simulation.lanes.Lanes` does, through its
    ``prepare``).
    """
    with _TRACING:
        if model not in _STEPS:
            _STEPS[model] = _step_function(model)
        return _STEPS[model]


_STEPS: weakref.WeakKeyDictionary[nn.Module, StepFunction | None] = weakref.WeakKeyDictionary()
"""Each model's step function (or None), made once."""
_TRACING = threading.Lock()
"""Held while a model is traced: two traces at once would see each other's modules."""


def _step_function(model: nn.Module) -> StepFunction | None:
    traced = _traceable(model)
    if traced is None:
        return None
    named = [(name, p.shape) for name, p in model.named_parameters()]

    def step(
        flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        k = flat.shape[0]
        leaves, offset = {}, 0
        for name, shape in named:
            size = shape.numel()
            view = flat[:, offset : offset + size].reshape(k, *shape)
            leaves[name] = view.detach().requires_grad_(True)
            offset += size
        logits = _StackedInterpreter(traced, leaves, k).run(x.flatten(0, 1))
        ce = nn.functional.cross_entropy(logits, y.flatten(), reduction="none")
        losses = (ce.reshape(k, -1) * mask).sum(dim=1) / mask.sum(dim=1)
        grads = torch.autograd.grad(losses.sum(), list(leaves.values()))
        return torch.cat([g.flatten(1) for g in grads], dim=1), losses.detach()

    return step
