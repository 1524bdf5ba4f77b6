"""IFCA: the Iterative Federated Clustering Algorithm, with a fixed number of clusters.

Ghosh, Chung, Yin & Ramchandran, "An efficient framework for clustered federated learning",
NeurIPS 2020 (FLACC's reference [24]). We follow Algorithm 1 of that paper with its
*model averaging* option:

* the server holds k cluster models θ_1 … θ_k from k independent initialisations;
* every sampled client i receives all k models, estimates its cluster identity
  ĵ = argmin_j F_i(θ_j), the empirical loss on its own training data (the cluster identity
  estimation step of Algorithm 1), and runs local training on θ_ĵ only;
* the server replaces each cluster model by the average of the local models of the clients
  that chose it (the model-averaging variant of Algorithm 1's server step); clusters that
  nobody chose this round keep their model.

Ghosh et al. average uniformly because their clients hold equal amounts of data; we weight
by sample count like FedAvg (FLACC Algorithm 1, line 20), which is the same when the counts
are equal. The loss comparison runs on the client (see :mod:`faultfleet.tasks`), so a
client's choice reaches the server as :attr:`FitResult.model_key`.

At evaluation time a client is again given all k models and predicts with the one of lowest
training loss, as IFCA prescribes; the server records the choice for reporting only.

A client joining later takes part from the next round it is sampled in, choosing among the
k models like every client; the model its own evaluation chose when it joined counts as
its evaluation choice until it trains.

``pairwise`` (:mod:`.pairwise`) sets how the same-model cosines of the evidence are taken;
IFCA's clustering compares losses, not updates, and has nothing to sketch. Under
``"sketch"`` a round *streams* (:meth:`IFCA.open_stream`): each update is folded into its
cluster's running sum as it arrives and only its sketch (and norm) is kept, for the
evidence, the same pairs and cosines as the list's; the robust policy's adaptive clip and
weight cap then take the previous round's medians, and a trimmed mean takes the list.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from coordinator.strategies.base import JsonDict, Strategy
from coordinator.strategies.evidence import ClusterEvidence, SameModelSimilarity
from coordinator.strategies.keys import cluster_key
from coordinator.strategies.pairwise import PAIRWISE_PARAMETERS, strategy_comparer
from coordinator.strategies.parameters import Param
from coordinator.strategies.streaming import (
    FoldedRound,
    StreamBounds,
    UpdateStream,
    bounds_state,
    fold_all,
    fold_averages,
    load_bounds,
)
from faultfleet.tasks import EvaluateResult, Failure, FitResult
from faultfleet.types import ModelFactory

logger = logging.getLogger(__name__)


class IFCA(Strategy):
    """k cluster models; each client trains (and predicts with) its lowest-loss one.

    Hyper-parameters: the :attr:`parameters` table (``faultfleet sim --list-options ifca``).

    Attributes
    ----------
    fit_keys_ : dict of str to str
        Cluster each client chose the last time it trained; absent before its first round.
    eval_keys_ : dict of str to str
        Cluster each client chose at an evaluation newer than its last training round.
        Reporting only: training never reads it.

    Notes
    -----
    :meth:`model_key_for` answers the most recent choice of a client: its evaluation choice
    if it was evaluated since it last trained, else its last training choice, and
    ``"cluster-0"`` for a client that has never been sampled nor evaluated. That answer
    feeds :meth:`cluster_labels` only; what a client trains or predicts with is always the
    client's own choice among all k models (:meth:`fit_models`, :meth:`predict_models`).
    """

    name: ClassVar[str] = "ifca"
    parameters: ClassVar[tuple[Param, ...]] = (
        Param(
            "n_clusters",
            "int",
            4,
            "the number k of cluster models, fixed for the whole run",
            "IFCA Algorithm 1: k is needed a priori",
            low=1,
        ),
        *PAIRWISE_PARAMETERS,
    )

    def __init__(
        self,
        *,
        fraction: float = 0.25,
        n_clusters: int = 4,
        pairwise: str = "auto",
        sketch_epsilon: float = 0.25,
        sketch_seed: int = 0,
    ) -> None:
        super().__init__(fraction=fraction)
        self.n_clusters = n_clusters
        self.pairwise = pairwise
        self.sketch_epsilon = sketch_epsilon
        self.sketch_seed = sketch_seed

    def _initialize(self, model_factory: ModelFactory) -> None:
        for j in range(self.n_clusters):
            self.models_[cluster_key(j)] = np.array(model_factory(j), dtype=np.float32)
        self.fit_keys_: dict[str, str] = {}
        self.eval_keys_: dict[str, str] = {}
        self.comparer_ = strategy_comparer(self, self._model_size(), len(self.client_ids_))
        self.same_model_ = SameModelSimilarity(self.client_ids_, self.comparer_)
        self.stream_bounds_: dict[str, StreamBounds] = {}

    def _join(
        self, joining: list[str], keys: Mapping[str, str | None], model_factory: ModelFactory
    ) -> None:
        self.eval_keys_.update({c: k for c, k in keys.items() if k is not None})
        self.same_model_.resize(self.client_ids_)

    def _leave(self, leaving: set[str], kept: list[int]) -> None:
        for client in leaving:
            self.fit_keys_.pop(client, None)
            self.eval_keys_.pop(client, None)
        self.same_model_.resize(self.client_ids_)

    # -- training --------------------------------------------------------------------------

    def fit_models(self, server_round: int, client_id: str) -> tuple[str, ...]:
        """All k cluster keys: the client picks the lowest-loss one (cluster identity estimate)."""
        return tuple(self.models_)

    def _aggregate(
        self, server_round: int, results: Sequence[FitResult], failures: Sequence[Failure]
    ) -> None:
        """Average each cluster over the clients that chose it (model averaging, Algorithm 1)."""
        stream = self.open_stream(server_round)
        if stream is not None:  # sketch mode: the same streaming path as a live round
            self._aggregate_stream(server_round, fold_all(stream, results))
            return
        by_cluster: dict[str, list[FitResult]] = {}
        for r in results:
            by_cluster.setdefault(r.model_key, []).append(r)
        self._chose(server_round, [(r.client_id, r.model_key) for r in results])
        self.same_model_.record(server_round, results)
        for key, members in by_cluster.items():
            self.models_[key] = self._average(members)

    def _chose(self, server_round: int, choices: Sequence[tuple[str, str]]) -> None:
        """Record each trained client's choice (client, model key)."""
        sizes: dict[str, int] = {}
        for client, key in choices:
            self.fit_keys_[client] = key
            self.eval_keys_.pop(client, None)
            sizes[key] = sizes.get(key, 0) + 1
        logger.debug("round %d: cluster sizes %s", server_round, dict(sorted(sizes.items())))

    # -- streaming (pairwise sketch) -------------------------------------------------------

    def open_stream(self, server_round: int) -> UpdateStream | None:
        """Under sketches, a stream folding the round's updates into their clusters' sums
        as they arrive (:mod:`.streaming`); None under exact cosines or a trimmed mean,
        which need the list."""
        return self._sketched_stream(server_round, self.stream_bounds_, self.comparer_.sketcher)

    def aggregate_stream(
        self, server_round: int, stream: FoldedRound, failures: Sequence[Failure]
    ) -> None:
        """The round's reaction to the updates folded into ``stream`` (sketch mode)."""
        self._known_updates(stream)
        self._aggregate_stream(server_round, stream)

    def _aggregate_stream(self, server_round: int, stream: FoldedRound) -> None:
        """The choices, the evidence from the sketches (in the list's order: by client, then
        model) and each chosen cluster's average."""
        updates = sorted(stream.updates(), key=lambda u: (self._index(u.client_id), u.model_key))
        self._chose(server_round, [(u.client_id, u.model_key) for u in updates])
        self.same_model_.record_sketches(server_round, updates)
        self.averaged_ = fold_averages(self.models_, self.stream_bounds_, stream, server_round)

    # -- evaluation and clustering -------------------------------------------------------

    def predict_models(self, client_id: str) -> tuple[str, ...]:
        """All k cluster keys: the client predicts with its lowest-training-loss model."""
        return tuple(self.models_)

    def model_key_for(self, client_id: str) -> str:
        """The client's most recent choice; ``"cluster-0"`` before it has made one."""
        if client_id not in self.client_index_:
            raise KeyError(f"unknown client {client_id!r}")
        latest = self.eval_keys_.get(client_id, self.fit_keys_.get(client_id))
        return cluster_key(0) if latest is None else latest

    def aggregate_evaluate(self, server_round: int, results: Sequence[EvaluateResult]) -> None:
        """Record the cluster each evaluated client chose, for :meth:`cluster_labels` only."""
        for r in results:
            if r.client_id not in self.client_index_:
                raise ValueError(f"evaluation result from unknown client {r.client_id!r}")
            if r.model_key not in self.models_:
                raise ValueError(f"client {r.client_id!r} evaluated unknown model {r.model_key!r}")
        for r in results:
            self.eval_keys_[r.client_id] = r.model_key

    def cluster_evidence(self) -> ClusterEvidence:
        """Cosines of updates of the same cluster model: the k models start from their own
        initialisations, so updates of different models are not compared."""
        labels = self.cluster_labels()
        return self.same_model_.evidence(
            [labels[c] for c in self.client_ids_],
            merge_measure="n/a: IFCA keeps k clusters and never merges them",
        )

    # -- state -----------------------------------------------------------------------------

    def _extra_state(self) -> tuple[JsonDict, dict[str, np.ndarray[Any, Any]]]:
        meta: JsonDict = {
            "fit_keys": [self.fit_keys_.get(c) for c in self.client_ids_],
            "eval_keys": [self.eval_keys_.get(c) for c in self.client_ids_],
            "comparer": self.same_model_.comparer_state(),
            "stream_bounds": bounds_state(self.stream_bounds_),
        }
        return meta, self.same_model_.arrays("same_model_")

    def _load_extra_state(self, meta: JsonDict, arrays: Mapping[str, np.ndarray[Any, Any]]) -> None:
        if len(self.models_) != self.n_clusters:
            raise ValueError(
                f"state holds {len(self.models_)} cluster models but n_clusters is "
                f"{self.n_clusters}; build the strategy with n_clusters={len(self.models_)}"
            )
        self.fit_keys_ = _present(self.client_ids_, meta["fit_keys"])
        self.eval_keys_ = _present(self.client_ids_, meta["eval_keys"])
        self.comparer_ = strategy_comparer(
            self, self._model_size(), len(self.client_ids_), meta.get("comparer")
        )
        self.same_model_ = SameModelSimilarity(self.client_ids_, self.comparer_)
        self.same_model_.load(self.client_ids_, arrays, "same_model_")
        self.stream_bounds_ = load_bounds(meta.get("stream_bounds", {}))


def _present(client_ids: Sequence[str], keys: Sequence[str | None]) -> dict[str, str]:
    """``{client: key}`` for the clients whose key is not None."""
    if len(keys) != len(client_ids):
        raise ValueError(f"state lists {len(keys)} cluster keys for {len(client_ids)} clients")
    return {c: k for c, k in zip(client_ids, keys, strict=True) if k is not None}
