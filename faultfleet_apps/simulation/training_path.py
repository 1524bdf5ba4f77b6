"""Which of the simulator's two paths computes a round: batched (vectorised) or sequential.

:class:`~faultfleet_apps.simulation.fleet.InProcessFleet` answers a round's fit, evaluate and
losses tasks either together, as one vectorised computation over the clients
(:mod:`~faultfleet_apps.simulation.batched_answers`), or client by client through the
agent's executor. Both give the same answers to float rounding (the tests of
``batched_training`` and ``batched_answers`` hold them to it); they differ in speed, and
which one is faster depends on the model and the device:

* on a GPU the batched path wins for every zoo model (one H100: ``compact`` 2.7-5.2x,
  ``paper`` 2.8x the sequential path, docs/federated.md "Vectorised training");
* on the CPU it wins for small models, whose per-client computations are too small to keep
  the cores busy one at a time, and loses for large ones, whose grouped convolutions and
  batched matrix products are slower than the plain ones and whose stacked parameters,
  gradients and optimiser states for every client no longer fit the caches.

Measured with ``benchmarks/bench_round_training.py`` (one round of 12 clients, 3,715
windows of (1, 1024), E = 5, B = 32, Adam 5e-4; median of 3 runs; throughput ratio
batched / sequential, above 1 when batched is faster), on the 2-core development machine
unless said otherwise:

==========  ==========  ===========================================================
model       parameters  batched / sequential on the CPU
==========  ==========  ===========================================================
compact         60,432  1.92x and 1.95x (2 threads, idle), 1.72x (1 thread, idle),
                        1.70x (1 thread, CPU seconds, on a machine loaded ~6x over)
paper        4,409,036  0.70x (2 threads, ``--clients 4 --repeats 1``), 0.52x (16
                        threads, H100 host)
==========  ==========  ===========================================================

In two lanes of one thread each, as the simulator runs on the CPU
(:mod:`~faultfleet_apps.simulation.lanes`), the order holds: ``compact`` batched 2.17 s
against 2.94 s sequential, ``paper`` 31.35 s against 26.45 s (4 clients). So the CPU
threshold :data:`BATCHED_CPU_MAX_PARAMETERS` lies between the two models measured; a zoo
model between them (``mlp-faacl-512``: 530,956; ``cnn-jgl``: 1,199,882) is placed by its
size alone and may sit on its slower side. ``faultfleet sim
--training-path batched|sequential`` overrides the choice.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from faultfleet.errors import UsageError

TrainingPath = Literal["batched", "sequential"]
TRAINING_PATHS = ("auto", "batched", "sequential")
"""Values of ``faultfleet sim --training-path`` (and of ``SimConfig.training_path``)."""

BATCHED_CPU_MAX_PARAMETERS = 1_000_000
"""On the CPU, models with at most this many parameters train batched, larger ones
sequentially (the measurements in the module docstring)."""


def parameter_count(model: nn.Module) -> int:
    """Trainable and frozen parameters of ``model`` (buffers excluded)."""
    return sum(p.numel() for p in model.parameters())


def choose_training_path(preference: str, parameters: int, device: torch.device) -> TrainingPath:
    """The path a run takes.

    Parameters
    ----------
    preference : {"auto", "batched", "sequential"}
        ``"auto"`` decides from the model's size and the device; the others are kept.
    parameters : int
        Parameters of the model (:func:`parameter_count`).
    device : torch.device
        Where the clients train.

    Returns
    -------
    "batched" or "sequential"
        ``"batched"`` on a GPU, and on the CPU for models of at most
        :data:`BATCHED_CPU_MAX_PARAMETERS` parameters; ``"sequential"`` otherwise.

    Raises
    ------
    UsageError
        For any other ``preference``.
    """
    forced: dict[str, TrainingPath] = {"batched": "batched", "sequential": "sequential"}
    if preference in forced:
        return forced[preference]
    if preference != "auto":
        raise UsageError(
            f"training_path must be one of {', '.join(TRAINING_PATHS)}, got {preference!r}"
        )
    if device.type != "cpu":
        return "batched"
    return "batched" if parameters <= BATCHED_CPU_MAX_PARAMETERS else "sequential"


def compute_lanes(device: torch.device, threads: int) -> int:
    """Compute lanes for a run on ``device`` given ``threads`` torch threads
    (:mod:`~faultfleet_apps.simulation.lanes`): on the CPU one lane per thread, each
    computing on one thread; on a GPU one lane, the device doing the parallel work.

    Raises
    ------
    ValueError
        ``threads`` is below 1.
    """
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    return threads if device.type == "cpu" else 1
