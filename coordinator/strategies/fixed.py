"""Fixed clusters: FedAvg inside clusters that are given, not learned.

The upper bound FAACL's tables call *FedAvg (optimal)* ("a decentralized technique that is
given the true underlying clusters", FAACL §5.4 and Table 2): every cluster of a known
assignment runs its own FedAvg (McMahan et al. 2017), sample-weighted, from one common
initialisation. The gap between a clustering method and this strategy is the accuracy lost
to imperfect clustering.

Outside benchmarks it is the strategy for a plant that already knows which machines belong
together (same model, same mounting, same fault history): ``assignment`` maps every
machine's client id to a group name or number. A machine joining later goes to the
cluster ``assignment`` names for it; one it does not name goes to the cluster its own
evaluation chose, else to the cluster of most machines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from coordinator.strategies.base import JsonDict
from coordinator.strategies.joining import most_served_key
from coordinator.strategies.keys import cluster_key
from coordinator.strategies.parameters import Param
from coordinator.strategies.streamed_averages import StreamedAverages
from faultfleet.errors import UsageError
from faultfleet.tasks import Failure, FitResult
from faultfleet.types import ModelFactory


class FixedClusters(StreamedAverages):
    """One FedAvg model per cluster of a fixed, known assignment (``streaming``:
    :class:`~.streamed_averages.StreamedAverages`).

    Hyper-parameters: the :attr:`parameters` table (``faultfleet sim --list-options fixed``).
    ``assignment`` must list every client of the federation; clients it lists that are not in
    the federation are ignored.

    Attributes
    ----------
    keys_ : dict of str to str
        Model key of each client.
    """

    name: ClassVar[str] = "fixed"
    clusters_learned: ClassVar[bool] = False
    parameters: ClassVar[tuple[Param, ...]] = (
        Param(
            "assignment",
            "mapping",
            None,
            "the cluster (a name or number) of every client, by client id",
            "FAACL §5.4's FedAvg (optimal)",
            optional=True,
            none="one cluster: plain FedAvg",
        ),
    )

    def __init__(
        self,
        *,
        fraction: float = 0.25,
        assignment: Mapping[str, int | str] | None = None,
        streaming: str = "auto",
    ) -> None:
        super().__init__(fraction=fraction)
        self.assignment = assignment
        self.streaming = streaming

    def _initialize(self, model_factory: ModelFactory) -> None:
        self.keys_: dict[str, str] = self._keys()
        initial = model_factory(0)
        for key in sorted(set(self.keys_.values())):
            self.models_[key] = initial.copy()
        self._start_streams()

    def _join(
        self, joining: list[str], keys: Mapping[str, str | None], model_factory: ModelFactory
    ) -> None:
        """``assignment``'s cluster if it names the client, else its evaluation's, else the
        cluster of most clients."""
        given = self._keys(joining)
        for client_id in joining:
            key = keys[client_id]
            if client_id in (self.assignment or {}) or self.assignment is None:
                key = given[client_id]
            if key is None or key not in self.models_:
                key = most_served_key(self, list(self.models_), exclude=joining)
            self.keys_[client_id] = key

    def _leave(self, leaving: set[str], kept: list[int]) -> None:
        """Leaving clients' clusters keep their models, even a cluster left empty."""
        for client_id in leaving:
            del self.keys_[client_id]

    def _keys(self, clients: Sequence[str] | None = None) -> dict[str, str]:
        """Model key of every registered client (or of ``clients``, which the assignment
        need not name), from the validated ``assignment``."""
        assignment = dict(self.assignment) if self.assignment is not None else {}
        if self.assignment is not None:
            named = self.client_ids_ if clients is None else ()
            missing = [c for c in named if c not in assignment]
            if missing:
                shown = ", ".join(missing[:5]) + (" …" if len(missing) > 5 else "")
                raise UsageError(
                    f"assignment gives no cluster for {len(missing)} client(s): {shown}; "
                    "list every client of the federation"
                )
            bad = sorted({repr(v) for v in assignment.values() if isinstance(v, bool) or v is None})
            if bad:
                raise UsageError(
                    f"assignment values must be cluster names or numbers, got {', '.join(bad)}"
                )
            by_key: dict[str, set[str]] = {}
            for value in assignment.values():
                by_key.setdefault(cluster_key(value), set()).add(repr(value))
            clashes = sorted(" and ".join(sorted(v)) for v in by_key.values() if len(v) > 1)
            if clashes:
                raise UsageError(
                    f"assignment names clusters {'; '.join(clashes)}, which read the same; "
                    "use one spelling per cluster"
                )
        ids = self.client_ids_ if clients is None else clients
        return {c: cluster_key(assignment.get(c, 0)) for c in ids}

    def _extra_state(self) -> tuple[JsonDict, dict[str, np.ndarray[Any, Any]]]:
        return {"keys": dict(self.keys_), **self._streams_state()}, {}

    def _load_extra_state(self, meta: JsonDict, arrays: Mapping[str, np.ndarray[Any, Any]]) -> None:
        self._load_streams_state(meta)
        saved = {str(c): str(k) for c, k in meta.get("keys", {}).items()}
        named = [c for c in self.client_ids_ if self.assignment is None or c in self.assignment]
        self.keys_ = {**saved, **self._keys(named)}
        if saved != self.keys_ or set(saved) != set(self.client_ids_):
            raise UsageError(
                "the saved run used another assignment of clients to clusters; restore it "
                "with the assignment it was started with"
            )

    def fit_models(self, server_round: int, client_id: str) -> tuple[str, ...]:
        return (self.keys_[client_id],)

    def model_key_for(self, client_id: str) -> str:
        return self.keys_[client_id]

    def _check_key(self, client_id: str, model_key: str) -> None:
        if model_key != self.keys_[client_id]:
            raise ValueError(
                f"client {client_id!r} trained model {model_key!r}, not its cluster's "
                f"{self.keys_[client_id]!r}"
            )

    def _aggregate(
        self, server_round: int, results: Sequence[FitResult], failures: Sequence[Failure]
    ) -> None:
        self._average_round(server_round, results)
