"""FedAvg: one global model, sample-weighted model averaging.

McMahan et al., "Communication-efficient learning of deep networks from decentralized
data", AISTATS 2017 (FLACC's reference [5]; FLACC Algorithm 1, line 20).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from coordinator.strategies.base import Strategy
from coordinator.strategies.keys import GLOBAL
from faultfleet.tasks import Failure, FitResult
from faultfleet.types import ModelFactory


class FedAvg(Strategy):
    """One model for every client."""

    name: ClassVar[str] = "fedavg"
    clusters_learned: ClassVar[bool] = False

    def _initialize(self, model_factory: ModelFactory) -> None:
        self.models_[GLOBAL] = model_factory(0)

    def _join(
        self, joining: list[str], keys: Mapping[str, str | None], model_factory: ModelFactory
    ) -> None:
        """Joining clients train the global model, the only candidate."""

    def _leave(self, leaving: set[str], kept: list[int]) -> None:
        """Leaving clients are no longer sampled; the global model keeps what they taught it."""

    def fit_models(self, server_round: int, client_id: str) -> tuple[str, ...]:
        return (GLOBAL,)

    def model_key_for(self, client_id: str) -> str:
        return GLOBAL

    def _aggregate(
        self, server_round: int, results: Sequence[FitResult], failures: Sequence[Failure]
    ) -> None:
        if results:
            self.models_[GLOBAL] = self._average(results)
