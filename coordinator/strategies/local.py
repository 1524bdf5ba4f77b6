"""Local training only ("NoFed" in FLACC Table I): every client keeps its own model.

Sampled clients continue training their own model each round, so Local spends the same
client compute as the federated strategies under the same fraction and round count.

A client joining later starts its own model from a copy of the model its evaluation chose
(another client's), or from the common initialisation; that copy is not its own work, so
the client is not served it (:meth:`Local.model_ready`) until it has trained it once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from coordinator.strategies.base import JsonDict, Strategy
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
        self.untrained_: set[str] = set()

    def _join(
        self, joining: list[str], keys: Mapping[str, str | None], model_factory: ModelFactory
    ) -> None:
        """Each joining client's model: a copy of its assigned one, else the initial θ."""
        for client_id in joining:
            key = keys[client_id]
            start = model_factory(0) if key is None else self.models_[key]
            self.models_[client_id] = np.array(start, dtype=np.float32)
        self.untrained_ |= set(joining)

    def _leave(self, leaving: set[str], kept: list[int]) -> None:
        for client_id in leaving:
            del self.models_[client_id]
        self.untrained_ -= leaving

    def model_ready(self, client_id: str) -> bool:
        """False for a client that joined and has not trained its model yet."""
        return client_id not in self.untrained_

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
            self.untrained_.discard(r.client_id)

    def _extra_state(self) -> tuple[JsonDict, dict[str, np.ndarray[Any, Any]]]:
        return {"untrained": sorted(self.untrained_)}, {}

    def _load_extra_state(self, meta: JsonDict, arrays: Mapping[str, np.ndarray[Any, Any]]) -> None:
        self.untrained_ = set(meta.get("untrained", []))
