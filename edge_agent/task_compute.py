"""The half of an agent's task that needs torch: the model architectures and the computation.

:class:`~edge_agent.task_runner.TaskRunner` checks a task from its header (the agent's
limits, the run's model, its own data: :mod:`edge_agent.task_needs`) without torch, and
imports this module only for the first task that passes those checks. An agent that only
diagnoses (ONNX Runtime, :mod:`edge_agent.inference`) therefore never loads torch, which
is most of an idle agent's memory (docs/runtime.md, "Agent memory"); the first task costs
the import once, about a second.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import torch
from torch import nn

from edge_agent.executor import ClientExecutor
from edge_agent.task_needs import AnyResult, AnyTask
from faultfleet.models.weights import parameter_count
from faultfleet.models.zoo import build_model
from faultfleet.tasks import Failure
from faultfleet.wire.messages import ModelSpec
from signal_pipeline.federation import ClientData


class TaskCompute:
    """Builds the architectures tasks name (least recently used dropped beyond a bound) and
    answers in-process tasks with :class:`~edge_agent.executor.ClientExecutor`.

    The agents of a process share one (:meth:`edge_agent.task_runner.TaskRunner.compute`):
    the cache is thread-safe, and :meth:`execute` must run during the caller's compute turn
    (an architecture is reparametrised while a task runs on it).

    Parameters
    ----------
    device : str or torch.device
        Where to compute, e.g. ``"cpu"`` or ``"cuda"``.
    max_cached_models : int
        Built architectures kept between tasks.
    """

    def __init__(self, device: str | torch.device, *, max_cached_models: int) -> None:
        self.device = torch.device(device)
        self.max_cached_models = max_cached_models
        self._models: OrderedDict[ModelSpec, tuple[nn.Module, int]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def cached_models(self) -> int:
        """Architectures currently kept built."""
        return len(self._models)

    def parameter_count(self, spec: ModelSpec) -> int:
        """Parameters of the architecture ``spec`` names, built (and kept) if need be.

        Raises
        ------
        ValueError
            An unknown architecture, or windows too short for it.
        """
        return self._architecture(spec)[1]

    def execute(
        self, data: ClientData, spec: ModelSpec, task: AnyTask, *, threads: int | None = None
    ) -> AnyResult | Failure:
        """The answer to ``task``, whose weights are of the architecture ``spec``, computed
        with ``threads`` torch threads (torch's current setting if None)."""
        if threads is not None:
            torch.set_num_threads(threads)
        model, _ = self._architecture(spec)
        executor = ClientExecutor(
            data,
            model,
            sample_shape=spec.sample_shape,
            n_classes=spec.n_classes,
            device=self.device,
        )
        return executor.execute(task)

    def _architecture(self, spec: ModelSpec) -> tuple[nn.Module, int]:
        with self._lock:
            if spec in self._models:
                self._models.move_to_end(spec)
                return self._models[spec]
            model = build_model(spec.name, tuple(spec.sample_shape), spec.n_classes)
            built = (model.to(self.device), parameter_count(model))
            self._models[spec] = built
            while len(self._models) > self.max_cached_models:
                self._models.popitem(last=False)
            return built
