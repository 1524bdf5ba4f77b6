"""How the round engine reaches clients, whatever carries the messages.

The engine only ever calls a :class:`Fleet`. The in-process simulator
(:class:`faultfleet.simulation.fleet.InProcessFleet`) implements it by training clients
directly; the MQTT transport implements it by publishing tasks and collecting answers
until a deadline. Clients that do not answer come back as :class:`~faultfleet.tasks.Failure`
entries, never as exceptions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from faultfleet.tasks import EvaluateOutcome, EvaluateTask, FitOutcome, FitTask


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
