"""Streaming for strategies that only average: FedAvg and fixed clusters.

They compare no updates, so nothing in them is sketched; a round can still fold each update
into its model's running sum as it arrives (:mod:`.streaming`) instead of holding every
update until the round ends (2,500 updates of the ``paper`` model are 44 GB). Their
``streaming`` option (:data:`~.streaming.STREAMING`) says when: from 1,000 registered
clients by default. Streaming, the robust policy's adaptive clip and weight cap take the
previous round's medians of the same model; a trimmed mean takes the list.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from coordinator.strategies.base import JsonDict, Strategy
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


class StreamedAverages(Strategy):
    """A strategy whose round is one sample-weighted average per model key, streamed when
    its ``streaming`` option says so.

    Subclasses set :attr:`streaming` in ``__init__``, call :meth:`_start_streams` when they
    initialise, average with :meth:`_average_round` and save :meth:`_streams_state`.

    Attributes
    ----------
    stream_bounds_ : dict of str to StreamBounds
        The medians a streamed round's robust rules measure against (the last round's).
    """

    parameters: ClassVar[tuple[Param, ...]] = (STREAMING,)
    streaming: str = "auto"

    @abstractmethod
    def _check_key(self, client_id: str, model_key: str) -> None:
        """Raise ValueError unless ``client_id`` may train ``model_key``."""

    def _start_streams(self) -> None:
        self.stream_bounds_: dict[str, StreamBounds] = {}

    def open_stream(self, server_round: int) -> UpdateStream | None:
        """A stream folding the round's updates as they arrive, when ``streaming`` says so
        and the policy is no trimmed mean; None: the round takes the list."""
        if not streams(self.streaming, len(self.client_ids_)):
            return None
        return self._stream(server_round, self.stream_bounds_)

    def aggregate_stream(
        self, server_round: int, stream: FoldedRound, failures: Sequence[Failure]
    ) -> None:
        """Each model from the updates folded into ``stream``."""
        for update in self._known_updates(stream):
            self._check_key(update.client_id, update.model_key)
        self.averaged_ = fold_averages(self.models_, self.stream_bounds_, stream, server_round)

    def _average_round(self, server_round: int, results: Sequence[FitResult]) -> None:
        """Each model the sample-weighted average of its updates: streamed, or the list."""
        for r in results:
            self._check_key(r.client_id, r.model_key)
        stream = self.open_stream(server_round)
        if stream is not None:  # streaming: the same path as a live round
            self.averaged_ = fold_averages(
                self.models_, self.stream_bounds_, fold_all(stream, results), server_round
            )
            return
        by_key: dict[str, list[FitResult]] = {}
        for r in results:
            by_key.setdefault(r.model_key, []).append(r)
        for key, own in by_key.items():
            self.models_[key] = self._average(own)

    def _streams_state(self) -> JsonDict:
        return {"stream_bounds": bounds_state(self.stream_bounds_)}

    def _load_streams_state(self, meta: JsonDict) -> None:
        self.stream_bounds_ = load_bounds(meta.get("stream_bounds", {}))
