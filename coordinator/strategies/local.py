"""Local training only ("NoFed" in FLACC Table I): every client keeps its own model.

Sampled clients continue training their own model each round, so Local spends the same
client compute as the federated strategies under the same fraction and round count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from coordinator.strategies.base import Strategy
from faultfleet.tasks import Failure, FitResult
from faultfleet.types import ModelFactory


class Local(Strategy):
    """One model per client, never shared."""

    name: ClassVar[str] = "local"
    clusters_learned: ClassVar[bool] = False

    def _initialize(self, model_factory: ModelFactory) -> None:
        initial = model_factory(0)
        for client_id in self.client_ids_:
            self.models_[client_id] = initial.copy()

    def fit_models(self, server_round: int, client_id: str) -> tuple[str, ...]:
        return (client_id,)

    def model_key_for(self, client_id: str) -> str:
        return client_id

    def _aggregate(
        self, server_round: int, results: Sequence[FitResult], failures: Sequence[Failure]
    ) -> None:
        for r in results:
            if r.model_key != r.client_id:
                raise ValueError(f"client {r.client_id!r} trained another client's model")
            self.models_[r.client_id] = r.weights.copy()
