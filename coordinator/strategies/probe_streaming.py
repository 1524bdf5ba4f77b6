"""Streamed probes: a probe's gradient answers taken one by one as they arrive.

JGL's probe asks every sampled device for the loss and gradient of each of the K cluster
models (:class:`~faultfleet.tasks.GradientResult`): K model-sized arrays per device, 3.6 GB
at 2,500 devices with K = 6 and the compact model if the answers are kept as a list until
the probe ends. A strategy that can decide on each answer alone (eq. 4 needs only the
device's own losses and gradients and the clusters' last updates) opens a
:class:`GradientStream` instead: the fleet hands it every answer as soon as it is checked
and keeps none (:class:`~coordinator.engine.fleet.StreamingProbeFleet`), and the engine
hands it a list fleet's answers in client order. The stream keeps what the strategy needs
of each answer (JGL: its identity and unit sketches of its gradients) and the strategy
reads it back when the probe step ends (:class:`StreamingProbeStrategy`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from faultfleet.tasks import Failure, GradientResult


class GradientStream(Protocol):
    """One probe step's gradient answers, each taken as it arrives; safe to call from
    several threads at once."""

    def add(self, result: GradientResult) -> None:
        """Take one answer; its arrays are not kept.

        Raises
        ------
        ValueError
            The answer does not fit the probe (not probed, answered twice, wrong models or
            shapes): the fleet counts it as the device's failure.
        """
        ...

    def answered(self) -> frozenset[str]:
        """The devices whose answers were taken."""
        ...


@runtime_checkable
class StreamingProbeStrategy(Protocol):
    """A strategy that may take a probe step's gradient answers as a stream (JGL under
    ``pairwise = "sketch"``)."""

    def open_probe_stream(self, server_round: int, step: int) -> GradientStream | None:
        """A stream for this probe step's answers, or None to take them as a list."""
        ...

    def aggregate_probe_stream(
        self, server_round: int, step: int, stream: GradientStream, failures: Sequence[Failure]
    ) -> None:
        """The probe step's reaction to the answers taken into ``stream``."""
        ...
