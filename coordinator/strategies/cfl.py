"""CFL: clustered federated learning by recursive optimal bipartitioning.

Sattler, Müller & Samek, "Clustered federated learning: model-agnostic distributed multitask
optimization under privacy constraints", IEEE TNNLS 32(8), 2021 (FLACC's reference [26]).
We follow Algorithm 1 of that paper:

* all clients start in one cluster with one model and *every* client trains its cluster's
  model every round;
* each cluster's model moves by the sample-weighted mean of its members' updates Δθ_i,
  i.e. becomes the sample-weighted mean of their weights (FLACC Algorithm 1, line 20);
* a cluster c is split when the federation has reached a stationary point of its joint
  objective while some member is still far from a stationary point of its own (Sattler et
  al.'s two splitting criteria)::

      ‖Σ_{i∈c} (n_i/n_c) Δθ_i‖ < ε₁   and   max_{i∈c} ‖Δθ_i‖ > ε₂

  and, as in the authors' experiments, only after a warm-up of ``min_rounds`` rounds and
  only when the cluster is large enough to be split. ε₁ and ε₂ compare update norms, which
  depend on the model, the optimiser and the epochs; ``criterion="similarity"`` asks the
  data instead: a cluster splits when the mean cosine across its optimal bipartition is
  below ``cross_share`` times the mean cosine inside the two halves — the halves are less
  than half as alike to each other as to themselves. It is Sattler et al.'s separation gap
  (the least similar pair inside the halves against the most similar pair across, which
  noise makes useless once groups hold more than a few clients) taken on means, and it does
  not depend on the unit of anything;
* the split is the optimal bipartition of the members' cosine-similarity matrix α
  (FLACC eq. 19): the bipartition c₁ ∪ c₂ minimising max_{i∈c₁, j∈c₂} α_ij (FLACC §III,
  Remark 3), which Sattler et al. compute by complete-linkage hierarchical clustering of −α
  into two clusters. Both halves start from a copy of the cluster's (just averaged) model.

CFL needs every client's update every round, so it is only defined for ``fraction = 1.0``;
FLACC (§II-C) names this full participation as CFL's main cost.

``pairwise`` (:mod:`.pairwise`; exact below 1,000 clients by default): under ``"sketch"``
the cosines α (eq. 9) that the bipartition, the similarity criterion and the evidence read
are those of count sketches of the updates. The norm criterion stays exact: ‖Σ (n_i/n_c)
Δθ_i‖ could be estimated from the sketches (the sketch is linear, so the sketch of the
mean is the mean of the sketches, its norm within 1 ± ε), but an exact norm costs n
operations per update, as a sketch does, and keeps ε₁ and ε₂ in the units they were
tuned in. The bipartition (complete linkage on the k × k cosines) stays quadratic in the
members whatever the comparison.

A client joining later joins the cluster of the model it was assigned (else the cluster of
most clients) and trains its model from the next round; until a round in which every
member of that cluster answered, the cluster is not tested for a split. A cluster that
every member left keeps its model.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from coordinator.strategies.aggregate import update_norms, weighted_average
from coordinator.strategies.base import JsonDict, Strategy
from coordinator.strategies.bipartition import bipartition_share, optimal_bipartition
from coordinator.strategies.evidence import ClusterEvidence, load_matrix, record_pairs
from coordinator.strategies.joining import grow_square, keep_square, most_served_key
from coordinator.strategies.keys import cluster_key
from coordinator.strategies.pairwise import PAIRWISE_PARAMETERS, strategy_comparer
from coordinator.strategies.parameters import FRACTION, Param
from faultfleet.tasks import Failure, FitResult
from faultfleet.types import Float64Array, IntArray, ModelFactory

logger = logging.getLogger(__name__)

CRITERIA = ("norms", "similarity")
"""When CFL splits a cluster: Sattler et al.'s update norms, or the bipartition's similarity."""


class CFL(Strategy):
    """Recursive bipartitioning of the federation, one model per cluster.

    Hyper-parameters: the :attr:`parameters` table (``faultfleet sim --list-options cfl``).

    Attributes
    ----------
    clusters_ : dict of str to str
        Model key of each client's cluster.
    next_cluster_id_ : int
        Integer of the next new cluster key ``"cluster-{id}"``.
    last_norms_ : dict of str to (float, float)
        Per cluster trained in the last round: (mean update norm, max update norm).
        Not saved in the state; it is for logging.
    last_splits_ : list of (str, str, str)
        ``(parent, half_0, half_1)`` for every split of the last round.

    Notes
    -----
    The defaults ε₁ = 0.4, ε₂ = 1.6 are those Sattler et al. publish for their experiments.
    Update norms scale with the model, optimiser, learning rate and local epochs, so with
    ``criterion="norms"`` they must be tuned per setup: log :attr:`last_norms_` for a few
    runs without splitting and set ε₁ just above the mean-norm plateau and ε₂ below the max
    norms it still shows. ``criterion="similarity"`` needs no such tuning.

    A cluster is tested only in a round where *all* its members answered: a bipartition of
    a subset would leave the silent members without a half. Its model is still averaged
    over the members that did answer.
    """

    name: ClassVar[str] = "cfl"
    full_participation: ClassVar[bool] = True
    """Every client trains every round: the registry does not pass a fraction to CFL."""
    parameters: ClassVar[tuple[Param, ...]] = (
        Param(
            "eps1",
            "float",
            0.4,
            "ε₁: a cluster is stationary when the norm of its mean update is below this",
            "Sattler et al., Algorithm 1; 0.4 in their experiments",
            low=0.0,
        ),
        Param(
            "eps2",
            "float",
            1.6,
            "ε₂: a cluster splits only if some member's update norm exceeds this",
            "Sattler et al., Algorithm 1; 1.6 in their experiments",
            low=0.0,
        ),
        Param(
            "min_rounds",
            "int",
            20,
            "the server round before which nothing splits (warm-up)",
            "Sattler et al. use 20",
            low=0,
        ),
        Param(
            "min_cluster_size",
            "int",
            2,
            "half the answering members a cluster needs to be split (the bipartition "
            "itself is not constrained)",
            low=1,
        ),
        Param(
            "criterion",
            "str",
            "norms",
            "when to split: Sattler et al.'s update norms (eps1, eps2), or the "
            "bipartition's similarity (cross_share)",
            "Sattler et al.'s two criteria, or ours",
            choices=CRITERIA,
        ),
        Param(
            "cross_share",
            "float",
            0.5,
            "with criterion 'similarity': split when the mean cosine across the "
            "bipartition is below this share of the mean cosine inside its halves",
            low=0.0,
            low_open=True,
            high=1.0,
            high_open=True,
        ),
        replace(
            FRACTION,
            default=1.0,
            low=1.0,
            low_open=False,
            description="the client fraction, 1 as CFL trains every client every round "
            "(flacc and ifca take partial participation)",
            reference="FLACC §II-C",
        ),
        *PAIRWISE_PARAMETERS,
    )

    def __init__(
        self,
        *,
        eps1: float = 0.4,
        eps2: float = 1.6,
        min_rounds: int = 20,
        min_cluster_size: int = 2,
        criterion: str = "norms",
        cross_share: float = 0.5,
        fraction: float = 1.0,
        pairwise: str = "auto",
        sketch_epsilon: float = 0.25,
        sketch_seed: int = 0,
    ) -> None:
        super().__init__(fraction=fraction)
        self.eps1 = eps1
        self.eps2 = eps2
        self.min_rounds = min_rounds
        self.min_cluster_size = min_cluster_size
        self.criterion = criterion
        self.cross_share = cross_share
        self.pairwise = pairwise
        self.sketch_epsilon = sketch_epsilon
        self.sketch_seed = sketch_seed

    def _initialize(self, model_factory: ModelFactory) -> None:
        first = cluster_key(0)
        self.models_[first] = np.array(model_factory(0), dtype=np.float32)
        self.comparer_ = strategy_comparer(self, self._model_size(), len(self.client_ids_))
        self.clusters_: dict[str, str] = dict.fromkeys(self.client_ids_, first)
        self.next_cluster_id_ = 1
        self.last_norms_: dict[str, tuple[float, float]] = {}
        self.last_splits_: list[tuple[str, str, str]] = []
        self.last_shares_: dict[str, float] = {}
        m = len(self.client_ids_)
        self.similarity_: Float64Array = np.full((m, m), np.nan)

    def _join(
        self, joining: list[str], keys: Mapping[str, str | None], model_factory: ModelFactory
    ) -> None:
        live = sorted(set(self.clusters_.values()))
        for client in joining:
            self.clusters_[client] = keys[client] or most_served_key(self, live, joining)
        self.similarity_ = grow_square(self.similarity_, len(joining), np.nan)

    def _leave(self, leaving: set[str], kept: list[int]) -> None:
        for client in leaving:
            del self.clusters_[client]
        self.similarity_ = keep_square(self.similarity_, kept)

    def fit_models(self, server_round: int, client_id: str) -> tuple[str, ...]:
        return (self.clusters_[client_id],)

    def model_key_for(self, client_id: str) -> str:
        return self.clusters_[client_id]

    def _aggregate(
        self, server_round: int, results: Sequence[FitResult], failures: Sequence[Failure]
    ) -> None:
        by_cluster: dict[str, list[FitResult]] = {}
        for r in results:
            if r.model_key != self.clusters_[r.client_id]:
                raise ValueError(
                    f"client {r.client_id!r} trained {r.model_key!r}, but its cluster is "
                    f"{self.clusters_[r.client_id]!r}"
                )
            by_cluster.setdefault(r.model_key, []).append(r)
        self.last_norms_ = {}
        self.last_splits_ = []
        self.last_shares_ = {}
        if results and not self._has_split():
            rows = [self._index(r.client_id) for r in results]
            record_pairs(self.similarity_, rows, self.comparer_.matrix([r.delta for r in results]))
        for key in [k for k in self.models_ if k in by_cluster]:
            members = by_cluster[key]
            counts = [r.num_samples for r in members]
            self.models_[key] = self._average(members)
            deltas = [r.delta for r in members]
            mean_norm = float(np.linalg.norm(weighted_average(deltas, counts)))
            max_norm = float(np.max(update_norms(deltas)))
            self.last_norms_[key] = (mean_norm, max_norm)
            logger.debug(
                "round %d, %s: mean update norm %.4g, max %.4g",
                server_round,
                key,
                mean_norm,
                max_norm,
            )
            if self._eligible(server_round, key, members):
                self._test_split(key, members, mean_norm, max_norm)

    def _has_split(self) -> bool:
        """Whether any cluster has been split yet."""
        return self.next_cluster_id_ > 1

    def cluster_evidence(self) -> ClusterEvidence:
        """Per pair of clients, the cosine of their updates when a cluster holding both was
        last split (before the first split: the last round's). A cluster's updates turn to
        noise once its model fits its members, so later rounds would say nothing; the
        round of a split is when the members' updates disagreed enough to decide it."""
        labels = self.cluster_labels()
        return ClusterEvidence(
            client_ids=self.client_ids_,
            labels=tuple(labels[c] for c in self.client_ids_),
            similarity=self.similarity_.copy(),
            measure="cosine similarity of the weight updates in the round a cluster holding "
            "both clients was last split (before the first split: the last round)",
            merge_measure="n/a: CFL splits clusters and never merges them",
            unrelated=0.0,
        )

    def round_metrics(self) -> dict[str, float]:
        """Largest mean and max update norms over the clusters of the last round: the two
        numbers eps1 and eps2 are compared with; with ``criterion="similarity"`` also the
        lowest cross share of a bipartition tested (``cross_share``)."""
        if not self.last_norms_:
            return {}
        metrics = {
            "mean_update_norm": max(mean for mean, _ in self.last_norms_.values()),
            "max_update_norm": max(largest for _, largest in self.last_norms_.values()),
        }
        if self.last_shares_:
            metrics["cross_share"] = min(self.last_shares_.values())
        return metrics

    def _eligible(self, server_round: int, key: str, members: Sequence[FitResult]) -> bool:
        """The warm-up is over and the cluster is complete and large enough to be split."""
        everyone_answered = len(members) == sum(1 for k in self.clusters_.values() if k == key)
        return (
            everyone_answered
            and server_round >= self.min_rounds
            and len(members) > 2 * self.min_cluster_size - 1
        )

    def _test_split(
        self, key: str, members: Sequence[FitResult], mean_norm: float, max_norm: float
    ) -> None:
        """Split ``key`` if the criterion says so: norms (Sattler et al.) or similarity."""
        if self.criterion == "norms":
            if mean_norm < self.eps1 and max_norm > self.eps2:
                similarity = self.comparer_.matrix([r.delta for r in members])
                self._split(key, members, similarity, optimal_bipartition(similarity))
            return
        similarity = self.comparer_.matrix([r.delta for r in members])
        halves = optimal_bipartition(similarity)
        share = bipartition_share(similarity, halves)
        self.last_shares_[key] = share
        if share < self.cross_share:
            self._split(key, members, similarity, halves)

    def _split(
        self,
        key: str,
        members: Sequence[FitResult],
        similarity: Float64Array,
        halves: IntArray,
    ) -> None:
        """Replace cluster ``key`` by the bipartition ``halves``, both halves on its model.

        The members' cosines that decided the split become their evidence of cluster quality.
        """
        record_pairs(self.similarity_, [self._index(r.client_id) for r in members], similarity)
        new_keys = (cluster_key(self.next_cluster_id_), cluster_key(self.next_cluster_id_ + 1))
        self.next_cluster_id_ += 2
        model = self.models_.pop(key)
        for new_key in new_keys:
            self.models_[new_key] = model.copy()
        for r, half in zip(members, halves, strict=True):
            self.clusters_[r.client_id] = new_keys[int(half)]
        self.last_splits_.append((key, *new_keys))
        logger.debug("split %s into %s and %s", key, *new_keys)

    # -- state -----------------------------------------------------------------------------

    def _extra_state(self) -> tuple[JsonDict, dict[str, np.ndarray[Any, Any]]]:
        meta: JsonDict = {
            "clusters": [self.clusters_[c] for c in self.client_ids_],
            "next_cluster_id": self.next_cluster_id_,
            "comparer": self.comparer_.state(),
        }
        return meta, {"similarity": self.similarity_.copy()}

    def _load_extra_state(self, meta: JsonDict, arrays: Mapping[str, np.ndarray[Any, Any]]) -> None:
        clusters = list(meta["clusters"])
        if len(clusters) != len(self.client_ids_):
            raise ValueError(
                f"state lists {len(clusters)} clusters for {len(self.client_ids_)} clients"
            )
        unknown = sorted(set(clusters) - set(self.models_))
        if unknown:
            raise ValueError(f"state assigns clients to clusters without a model: {unknown}")
        self.clusters_ = dict(zip(self.client_ids_, clusters, strict=True))
        self.comparer_ = strategy_comparer(
            self, self._model_size(), len(clusters), meta.get("comparer")
        )
        self.next_cluster_id_ = int(meta["next_cluster_id"])
        self.last_norms_ = {}
        self.last_splits_ = []
        self.last_shares_ = {}
        self.similarity_ = load_matrix(arrays, "similarity", len(self.client_ids_))
