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
are those of count sketches of the updates, and a round *streams*
(:meth:`CFL.open_stream`): each update is folded into its cluster's running sum as it
arrives and only its norm and sketch are kept, so a round holds one sum per cluster and d
numbers per client instead of every client's update; the evidence keeps sampled pairs of
those cosines, each client with 32 others (:mod:`.pair_evidence`), instead of an m × m
matrix. The norm criterion stays exact: ‖Σ
(n_i/n_c) Δθ_i‖ could be estimated from the sketches (the sketch is linear, so the sketch
of the mean is the mean of the sketches, its norm within 1 ± ε), but the stream keeps the
sample-weighted sum of the updates as sent beside the robust one (a second sum per
cluster, where the robust policy changes updates), which keeps ε₁ and ε₂ in the units
they were tuned in; ε₂ reads the updates' exact norms. Streaming, the robust policy's
adaptive clip and weight cap take the previous round's medians, as FLACC's do
(:mod:`.streaming`); a trimmed mean, which needs every update at once, takes the list. The
bipartition (complete linkage) stays quadratic in the members whatever the comparison,
but under sketches it reads a condensed vector of their k(k − 1)/2 distances made from
the sketches block by block, and the similarity criterion sums of the halves' sketches
(:func:`~.bipartition.sketch_bipartition`, :func:`~.bipartition.sketch_bipartition_share`):
no k × k matrix is made, but for the evidence's sampled pairs of a round small enough
(:data:`~.pairwise.PAIRS_MATRIX_UP_TO`) that reading them from one is faster
(:class:`SketchCosines`).

A client joining later joins the cluster of the model it was assigned (else the cluster of
most clients) and trains its model from the next round; until a round in which every
member of that cluster answered, the cluster is not tested for a split. A cluster that
every member left keeps its model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, ClassVar, Protocol

import numpy as np

from coordinator.strategies.aggregate import update_norms, weighted_average
from coordinator.strategies.base import JsonDict, Strategy
from coordinator.strategies.bipartition import (
    bipartition_share,
    optimal_bipartition,
    sketch_bipartition,
    sketch_bipartition_share,
)
from coordinator.strategies.evidence import ClusterEvidence
from coordinator.strategies.joining import most_served_key
from coordinator.strategies.keys import cluster_key
from coordinator.strategies.pair_evidence import FOREVER, PairEvidence
from coordinator.strategies.pairwise import (
    PAIRWISE_PARAMETERS,
    sketch_pair_cosines,
    strategy_comparer,
)
from coordinator.strategies.parameters import FRACTION, Param
from coordinator.strategies.sketch import sketch_cosine_matrix
from coordinator.strategies.streaming import (
    FoldedRound,
    StreamBounds,
    UpdateStream,
    bounds_state,
    fold_all,
    fold_averages,
    load_bounds,
    unit_sketches,
)
from faultfleet.tasks import Failure, FitResult
from faultfleet.types import Float64Array, FloatArray, IntArray, ModelFactory

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
        self.stream_bounds_: dict[str, StreamBounds] = {}
        self._new_evidence()

    def _join(
        self, joining: list[str], keys: Mapping[str, str | None], model_factory: ModelFactory
    ) -> None:
        live = sorted(set(self.clusters_.values()))
        for client in joining:
            self.clusters_[client] = keys[client] or most_served_key(self, live, joining)
        self.evidence_.join(self.client_ids_, len(joining))

    def _leave(self, leaving: set[str], kept: list[int]) -> None:
        for client in leaving:
            del self.clusters_[client]
        self.evidence_.leave(self.client_ids_, kept)

    def fit_models(self, server_round: int, client_id: str) -> tuple[str, ...]:
        return (self.clusters_[client_id],)

    def model_key_for(self, client_id: str) -> str:
        return self.clusters_[client_id]

    def _check_key(self, client_id: str, model_key: str) -> None:
        if client_id not in self.clusters_:
            raise ValueError(f"result from unknown client {client_id!r}")
        if model_key != self.clusters_[client_id]:
            raise ValueError(
                f"client {client_id!r} trained {model_key!r}, but its cluster is "
                f"{self.clusters_[client_id]!r}"
            )

    def _aggregate(
        self, server_round: int, results: Sequence[FitResult], failures: Sequence[Failure]
    ) -> None:
        for r in results:
            self._check_key(r.client_id, r.model_key)
        stream = self.open_stream(server_round)
        if stream is not None:  # sketch mode: the same streaming path as a live round
            self._aggregate_stream(server_round, fold_all(stream, results))
            return
        by_cluster: dict[str, list[FitResult]] = {}
        for r in results:
            by_cluster.setdefault(r.model_key, []).append(r)
        self.last_norms_ = {}
        self.last_splits_ = []
        self.last_shares_ = {}
        if results and not self._has_split():
            rows = [self._index(r.client_id) for r in results]
            round_deltas = [r.delta for r in results]
            self._record(
                server_round, rows, MatrixCosines(partial(self.comparer_.matrix, round_deltas))
            )
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
            if self._eligible(server_round, key, len(members)):
                clients = [r.client_id for r in members]
                cosines = MatrixCosines(partial(self.comparer_.matrix, deltas))
                self._test_split(server_round, key, clients, cosines, mean_norm, max_norm)

    # -- streaming (pairwise sketch) -------------------------------------------------------

    def open_stream(self, server_round: int) -> UpdateStream | None:
        """Under sketches, a stream that folds the round's updates into one running sum per
        cluster as they arrive (:mod:`.streaming`), keeping of each update its norm and
        sketch, which are all the bipartition, both criteria and the evidence read. None
        under exact cosines, which need the updates, and under a trimmed mean, which needs
        them all at once: those take the list."""
        sketcher = self.comparer_.sketcher
        return self._sketched_stream(server_round, self.stream_bounds_, sketcher, raw_means=True)

    def aggregate_stream(
        self, server_round: int, stream: FoldedRound, failures: Sequence[Failure]
    ) -> None:
        """The round's reaction to the updates folded into ``stream`` (sketch mode)."""
        for u in self._answered_once(stream):
            self._check_key(u.client_id, u.model_key)
        self._aggregate_stream(server_round, stream)

    def _aggregate_stream(self, server_round: int, stream: FoldedRound) -> None:
        """Algorithm 1 on a folded round: each cluster's average and norms, then the tests.

        ε₁ compares the norm of the cluster's sample-weighted mean update as the members
        sent it (:meth:`~.streaming.UpdateStream.mean_update_norm`), ε₂ the largest member's
        norm, both exact; the cosines are the sketches'.
        """
        if not isinstance(stream, UpdateStream):
            raise ValueError("CFL needs the updates' raw means: fold them in this process")
        updates = sorted(stream.updates(), key=lambda u: self._index(u.client_id))
        by_cluster: dict[str, list[int]] = {}
        for position, u in enumerate(updates):
            by_cluster.setdefault(u.model_key, []).append(position)
        self.last_norms_ = {}
        self.last_splits_ = []
        self.last_shares_ = {}
        sketches = np.stack(unit_sketches(updates)) if updates else np.zeros((0, 0), np.float32)
        if updates and not self._has_split():
            rows = [self._index(u.client_id) for u in updates]
            self._record(server_round, rows, SketchCosines(sketches))
        tested = [k for k in self.models_ if k in by_cluster]  # before a split changes models_
        self.averaged_ = fold_averages(self.models_, self.stream_bounds_, stream, server_round)
        for key in tested:
            positions = by_cluster[key]
            mean_norm = stream.mean_update_norm(key)
            max_norm = max(updates[p].norm for p in positions)
            self.last_norms_[key] = (mean_norm, max_norm)
            if self._eligible(server_round, key, len(positions)):
                clients = [updates[p].client_id for p in positions]
                # before the first split the one cluster is the round, in its order
                whole = len(positions) == len(updates)
                cosines = SketchCosines(sketches if whole else sketches[positions])
                self._test_split(server_round, key, clients, cosines, mean_norm, max_norm)

    def _new_evidence(self) -> None:
        """No evidence yet: an m × m matrix under exact comparisons, sampled pairs (each kept
        until measured again) under sketches (:mod:`.pair_evidence`)."""
        sampled = self.comparer_.sketcher is not None
        self.evidence_ = PairEvidence(self.client_ids_, sampled=sampled, memory=FOREVER)

    def _record(self, server_round: int, rows: Sequence[int], cosines: Cosines) -> None:
        """The cosines of the clients at ``rows`` (in that order) become their latest
        evidence: the k × k block under exact comparisons, sampled pairs under sketches."""
        self.evidence_.record(server_round, rows, block=cosines.matrix, pairs=cosines.pairs)

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
            similarity=self.evidence_.similarity(),
            measure="cosine similarity of the weight updates in the round a cluster holding "
            "both clients was last split (before the first split: the last round; "
            f"{self.evidence_.describe()})",
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

    def _eligible(self, server_round: int, key: str, answered: int) -> bool:
        """The warm-up is over and the cluster is complete (``answered`` members of it
        answered) and large enough to be split."""
        everyone_answered = answered == sum(1 for k in self.clusters_.values() if k == key)
        return (
            everyone_answered
            and server_round >= self.min_rounds
            and answered > 2 * self.min_cluster_size - 1
        )

    def _test_split(
        self,
        server_round: int,
        key: str,
        members: Sequence[str],
        cosines: Cosines,
        mean_norm: float,
        max_norm: float,
    ) -> None:
        """Split ``key`` if the criterion says so: norms (Sattler et al.) or similarity.
        ``cosines`` are the members', in the order of ``members`` (computed only when the
        criterion needs them)."""
        if self.criterion == "norms":
            if mean_norm < self.eps1 and max_norm > self.eps2:
                self._split(server_round, key, members, cosines, cosines.halves())
            return
        halves = cosines.halves()
        share = cosines.share(halves)
        self.last_shares_[key] = share
        if share < self.cross_share:
            self._split(server_round, key, members, cosines, halves)

    def _split(
        self,
        server_round: int,
        key: str,
        members: Sequence[str],
        cosines: Cosines,
        halves: IntArray,
    ) -> None:
        """Replace cluster ``key`` by the bipartition ``halves``, both halves on its model
        (and, streaming, on its bounds).

        The members' cosines that decided the split become their evidence of cluster quality.
        """
        self._record(server_round, [self._index(c) for c in members], cosines)
        new_keys = (cluster_key(self.next_cluster_id_), cluster_key(self.next_cluster_id_ + 1))
        self.next_cluster_id_ += 2
        model = self.models_.pop(key)
        bounds = self.stream_bounds_.pop(key, None)
        for new_key in new_keys:
            self.models_[new_key] = model.copy()
            if bounds is not None:
                self.stream_bounds_[new_key] = bounds
        for client, half in zip(members, halves, strict=True):
            self.clusters_[client] = new_keys[int(half)]
        self.last_splits_.append((key, *new_keys))
        logger.debug("split %s into %s and %s", key, *new_keys)

    # -- state -----------------------------------------------------------------------------

    def _extra_state(self) -> tuple[JsonDict, dict[str, np.ndarray[Any, Any]]]:
        meta: JsonDict = {
            "clusters": [self.clusters_[c] for c in self.client_ids_],
            "next_cluster_id": self.next_cluster_id_,
            "comparer": self.comparer_.state(),
            "stream_bounds": bounds_state(self.stream_bounds_),
        }
        return meta, self.evidence_.arrays()

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
        self.stream_bounds_ = load_bounds(meta.get("stream_bounds", {}))
        self._new_evidence()
        self.evidence_.load(self.client_ids_, arrays)


class Cosines(Protocol):
    """The cosines of a cluster's members' updates, as the split test reads them."""

    def matrix(self) -> Float64Array:
        """All of them, (m, m)."""

    def pairs(self, first: IntArray, second: IntArray) -> Float64Array:
        """Those of the pairs of positions ``(first[q], second[q])``, shape (q,)."""

    def halves(self) -> IntArray:
        """The optimal bipartition (:func:`~.bipartition.optimal_bipartition`)."""

    def share(self, halves: IntArray) -> float:
        """:func:`~.bipartition.bipartition_share` of ``halves``."""


class MatrixCosines:
    """Cosines from the matrix ``make()`` returns (exact comparisons), made on first use."""

    def __init__(self, make: Callable[[], Float64Array]) -> None:
        self._make = make
        self._matrix: Float64Array | None = None

    def matrix(self) -> Float64Array:
        if self._matrix is None:
            self._matrix = self._make()
        return self._matrix

    def pairs(self, first: IntArray, second: IntArray) -> Float64Array:
        values: Float64Array = self.matrix()[first, second]
        return values

    def halves(self) -> IntArray:
        return optimal_bipartition(self.matrix())

    def share(self, halves: IntArray) -> float:
        return bipartition_share(self.matrix(), halves)


class SketchCosines:
    """Cosines of unit sketches, one row per member (sketch mode): the bipartition, the
    share and sampled pairs without the m × m matrix (:mod:`.bipartition`)."""

    def __init__(self, sketches: FloatArray) -> None:
        self.sketches = sketches

    def matrix(self) -> Float64Array:
        return sketch_cosine_matrix(self.sketches)

    def pairs(self, first: IntArray, second: IntArray) -> Float64Array:
        return sketch_pair_cosines(self.sketches, first, second)

    def halves(self) -> IntArray:
        return sketch_bipartition(self.sketches)

    def share(self, halves: IntArray) -> float:
        return sketch_bipartition_share(self.sketches, halves)
