"""FedAvg: one global model, sample-weighted model averaging.

McMahan et al., "Communication-efficient learning of deep networks from decentralized
data", AISTATS 2017 (FLACC's reference [5]; FLACC Algorithm 1, line 20).

``streaming`` (:mod:`.streamed_averages`; from 1,000 registered clients by default): the
round's updates are folded into the average as they arrive, so a round holds one running
sum, not every update.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from coordinator.strategies.base import JsonDict
from coordinator.strategies.keys import GLOBAL
from coordinator.strategies.streamed_averages import StreamedAverages
from faultfleet.tasks import Failure, FitResult
from faultfleet.types import ModelFactory


class FedAvg(StreamedAverages):
    """One model for every client (``streaming``: :class:`~.streamed_averages.
    StreamedAverages`)."""

    name: ClassVar[str] = "fedavg"
    clusters_learned: ClassVar[bool] = False

    def __init__(self, *, fraction: float = 0.25, streaming: str = "auto") -> None:
        super().__init__(fraction=fraction)
        self.streaming = streaming

    def _initialize(self, model_factory: ModelFactory) -> None:
        self.models_[GLOBAL] = model_factory(0)
        self._start_streams()

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

    def _check_key(self, client_id: str, model_key: str) -> None:
        if model_key != GLOBAL:
            raise ValueError(
                f"client {client_id!r} trained {model_key!r}; FedAvg has {GLOBAL!r} only"
            )

    def _aggregate(
        self, server_round: int, results: Sequence[FitResult], failures: Sequence[Failure]
    ) -> None:
        self._average_round(server_round, results)

    def _extra_state(self) -> tuple[JsonDict, dict[str, np.ndarray[Any, Any]]]:
        return self._streams_state(), {}

    def _load_extra_state(self, meta: JsonDict, arrays: Mapping[str, np.ndarray[Any, Any]]) -> None:
        self._load_streams_state(meta)
