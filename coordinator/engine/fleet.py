"""How the round engine reaches clients, whatever carries the messages.

The engine only ever calls a :class:`Fleet`. The in-process simulator
(:class:`faultfleet_apps.simulation.fleet.InProcessFleet`) implements it by answering every
task in this process with the agents' own client executor (:mod:`edge_agent.executor`); the
MQTT transport implements it by publishing tasks and collecting answers
until a deadline. Clients that do not answer come back as :class:`~faultfleet.tasks.Failure`
entries, never as exceptions.

A strategy that streams (:class:`~coordinator.strategies.streaming.StreamingStrategy`)
folds each update into running sums; a :class:`StreamingFleet` folds them as they arrive,
any other fleet's results are folded by the engine.

Strategies that place clients by probing them — per-sample losses of several models
(FAACL), or the loss and gradient of every cluster model on one mini-batch (joint gradient
and loss clustering) — need a :class:`ProbingFleet`, which adds those two task kinds; a
:class:`StreamingProbeFleet` also hands gradient answers to a stream as they arrive.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from coordinator.strategies.probe_streaming import GradientStream
from coordinator.strategies.streaming import UpdateStream
from faultfleet.tasks import (
    EvaluateOutcome,
    EvaluateTask,
    FitOutcome,
    FitTask,
    GradientOutcome,
    GradientTask,
    LossesOutcome,
    LossesTask,
)


class Fleet(Protocol):
    """The clients of a federation, as the coordinator sees them."""

    def client_ids(self) -> list[str]:
        """Every registered client, in a stable order."""
        ...

    def available(self) -> list[str]:
        """Clients that can take a task now (online)."""
        ...

    def fit(self, server_round: int, tasks: Sequence[FitTask]) -> FitOutcome:
        """Run local training for every task; one result or failure per task."""
        ...

    def evaluate(self, server_round: int, tasks: Sequence[EvaluateTask]) -> EvaluateOutcome:
        """Evaluate models on clients' data; one result or failure per task."""
        ...


@runtime_checkable
class ProbingFleet(Fleet, Protocol):
    """A :class:`Fleet` whose clients also answer probes (see :mod:`faultfleet.tasks`).

    :class:`~faultfleet_apps.simulation.fleet.InProcessFleet` and
    :class:`~coordinator.adapters.mqtt_fleet.MqttFleet` implement it. Probes fail as evaluations do:
    a client that does not answer in time (over MQTT: by the round deadline, or at once
    when its last will fires) comes back as a :class:`~faultfleet.tasks.Failure`, never as
    an exception, and a probe has no quorum.
    """

    def losses(self, server_round: int, tasks: Sequence[LossesTask]) -> LossesOutcome:
        """Losses of every task's models on its split; one result or failure per task."""
        ...

    def gradients(self, server_round: int, tasks: Sequence[GradientTask]) -> GradientOutcome:
        """Mean loss and gradient of every task's models on one shared mini-batch of the
        client's training data; one result or failure per task."""
        ...


@runtime_checkable
class StreamingFleet(Fleet, Protocol):
    """A :class:`Fleet` that folds each update into a stream as it arrives and keeps none
    (:class:`~coordinator.adapters.mqtt_fleet.MqttFleet` does)."""

    def fit_streaming(
        self, server_round: int, tasks: Sequence[FitTask], stream: UpdateStream
    ) -> FitOutcome:
        """As :meth:`Fleet.fit`, every accepted update folded into ``stream`` instead of
        returned: the outcome's results are empty; the round's quorum applies to the
        updates folded."""
        ...


@runtime_checkable
class StreamingProbeFleet(ProbingFleet, Protocol):
    """A :class:`ProbingFleet` that hands each gradient answer to a stream as it arrives and
    keeps none (:class:`~coordinator.adapters.mqtt_fleet.MqttFleet` does)."""

    def gradients_streaming(
        self, server_round: int, tasks: Sequence[GradientTask], stream: GradientStream
    ) -> GradientOutcome:
        """As :meth:`ProbingFleet.gradients`, every answer taken into ``stream`` instead of
        returned (one that ``stream`` refuses counts as its device's failure): the
        outcome's results are empty; the round's quorum applies to the answers taken."""
        ...
