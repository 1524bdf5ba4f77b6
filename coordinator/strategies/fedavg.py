"""FedAvg: one global model, sample-weighted model averaging.

McMahan et al., "Communication-efficient learning of deep networks from decentralized
data", AISTATS 2017 (FLACC's reference [5]; FLACC Algorithm 1, line 20).

``streaming`` (:data:`~.streaming.STREAMING`; from 1,000 registered clients by default):
the round's updates are folded into the average as they arrive (:mod:`.streaming`), so a
round holds one running sum, not every update (2,500 ``paper`` updates are 44 GB). The
robust policy's adaptive clip and weight cap then take the previous round's medians; a
trimmed mean, which needs every update at once, takes the list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from coordinator.strategies.base import JsonDict, Strategy
from coordinator.strategies.keys import GLOBAL
from coordinator.strategies.parameters import Param
from coordinator.strategies.streaming import (
    STREAMING,
    FoldedRound,
    StreamBounds,
    UpdateStream,
    bounds_state,
    fold_all,
    fold_averages,
    load_bounds,
    streams,
)
from faultfleet.tasks import Failure, FitResult
from faultfleet.types import ModelFactory


class FedAvg(Strategy):
    """One model for every client.

    Attributes
    ----------
    stream_bounds_ : dict of str to StreamBounds
        The medians a streamed round's robust rules measure against (the last round's).
    """

    name: ClassVar[str] = "fedavg"
    clusters_learned: ClassVar[bool] = False
    parameters: ClassVar[tuple[Param, ...]] = (STREAMING,)

    def __init__(self, *, fraction: float = 0.25, streaming: str = "auto") -> None:
        super().__init__(fraction=fraction)
        self.streaming = streaming

    def _initialize(self, model_factory: ModelFactory) -> None:
        self.models_[GLOBAL] = model_factory(0)
        self.stream_bounds_: dict[str, StreamBounds] = {}

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
        stream = self.open_stream(server_round)
        if stream is not None:  # streaming: the same path as a live round
            self.aggregate_stream(server_round, fold_all(stream, results), failures)
            return
        if results:
            self.models_[GLOBAL] = self._average(results)

    # -- streaming -------------------------------------------------------------------------

    def open_stream(self, server_round: int) -> UpdateStream | None:
        """A stream folding the round's updates as they arrive, when ``streaming`` says so
        and the policy is no trimmed mean; None: the round takes the list."""
        if not streams(self.streaming, len(self.client_ids_)):
            return None
        return self._stream(server_round, self.stream_bounds_)

    def aggregate_stream(
        self, server_round: int, stream: FoldedRound, failures: Sequence[Failure]
    ) -> None:
        """The global model from the updates folded into ``stream``."""
        for update in stream.updates():
            if update.model_key != GLOBAL or update.client_id not in self.client_index_:
                raise ValueError(
                    f"client {update.client_id!r} trained {update.model_key!r}; FedAvg has "
                    f"{GLOBAL!r} only"
                )
        self.averaged_ = fold_averages(self.models_, self.stream_bounds_, stream, server_round)

    # -- state -----------------------------------------------------------------------------

    def _extra_state(self) -> tuple[JsonDict, dict[str, np.ndarray[Any, Any]]]:
        return {"stream_bounds": bounds_state(self.stream_bounds_)}, {}

    def _load_extra_state(self, meta: JsonDict, arrays: Mapping[str, np.ndarray[Any, Any]]) -> None:
        self.stream_bounds_ = load_bounds(meta.get("stream_bounds", {}))
