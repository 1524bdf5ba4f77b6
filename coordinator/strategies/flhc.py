"""FL+HC: federated learning with hierarchical clustering of local updates.

Briggs, Fan & Andras, "Federated learning with hierarchical clustering of local updates to
improve training on non-IID data", IJCNN 2020. The algorithm:

* *Warm-up*: ``n_warmup`` rounds of FedAvg on one global model (the paper's "number of
  FedAvg rounds before clustering"), with the usual client fraction;
* *clustering round* (round ``n_warmup + 1``): every available client trains the global
  model once, and the clients are clustered once, by agglomerative hierarchical clustering
  of their weight updates Δθ_i, the dendrogram being cut at the distance ``distance_threshold``;
* *afterwards*: each cluster is its own federation, trained with FedAvg (sample-weighted
  averaging, FLACC Algorithm 1, line 20) from the global model; a client's model is its
  cluster's.

Decisions on points the paper leaves open (the paper is not in ``shared/papers``):

- The clustering round is *full participation* for that one round, as in CFL: every
  available client is asked, whatever ``fraction``; the sampling generator is not drawn
  from in that round. All other rounds sample ``fraction`` of the clients.
- The clustering round's updates both define the clusters and train them: each cluster's
  model becomes the sample-weighted mean of its members' weights of that round, i.e. the
  global model moved by the weighted mean of the members' Δθ (streaming, under sketches:
  the global model moved by the mean of all of them; see ``pairwise``). Nothing is trained
  twice and no update is thrown away.
- Two clients end in one cluster when the dendrogram joins them at a height ≤
  ``distance_threshold`` (scipy's ``fcluster(criterion="distance")``); with
  ``distance_threshold=None`` the height is read from the dendrogram itself, in the
  largest gap between log merge heights (:func:`.flhc_tree.largest_gap_cut`), the default:
  the paper leaves the height to the user, and a number measured for one model, optimiser
  and number of local epochs does not carry to another. Heights are those of
  :func:`scipy.cluster.hierarchy.linkage`: for ``ward`` on Euclidean distances, two single
  clients merge at their Euclidean distance and larger clusters at the Ward distance
  √(2·n_a·n_b/(n_a+n_b))·‖c_a − c_b‖ of their centroids; ``average``, ``complete`` and
  ``single`` use the mean, largest and smallest pairwise distance.
- ``metric="cosine"`` is the cosine distance 1 − cos(Δθ_i, Δθ_j) ∈ [0, 2] (a zero update has
  distance 1 to every other). Ward is defined for Euclidean distances only, so
  ``linkage="ward"`` requires ``metric="euclidean"``; ``average``, ``complete`` and
  ``single`` accept either metric.
- ``pairwise`` (:mod:`.pairwise`; exact below 1,000 clients by default): under
  ``"sketch"`` every round *streams* (:meth:`FLHC.open_stream`, :mod:`.streaming`): each
  update is folded into its model's running sum as it arrives and only its norm and unit
  count sketch are kept. The dendrogram is built on the rows ‖Δθ_i‖·S·Δθ_i/‖S·Δθ_i‖ (the
  exact norm, the sketched direction), whose Euclidean distances
  √(‖a‖² + ‖b‖² − 2‖a‖‖b‖·cos) differ from the updates' only through the cosine, within
  the JL bound's ε; Ward's centroid distances follow from them, and the evidence cosines
  are the sketches'. Streaming, the clustering round's updates are not held until the
  labels are known, so they cannot average each cluster over its members: they train the
  global model (one FedAvg step over every answering client), and every cluster starts
  from that model, as in the paper, where the clusters are trained on from the global
  model; the exact path keeps the member averages (below). Memory: d numbers per update
  and the k²/2 distances of the linkage (k answering clients; float32 from 2,048 clients,
  linked in place, :func:`.flhc_tree.linkage_tree`), plus one running sum per model;
  exactly, k·n for the updates.
- Clusters are keyed ``"cluster-k"``, k numbering clusters in order of their first client
  (registration order).
- Clients that did not answer in the clustering round (offline or failed) stay on the
  ``"global"`` model, which keeps training by FedAvg among them alone: together they act as
  one more cluster, the "unclustered" one. Nobody is re-clustered later. When every client
  was clustered the global model is dropped.
- If nobody answers in the clustering round, nothing changes and the next round is the
  clustering round again.
- A client joining before the clustering round trains the global model of the warm-up and
  is clustered with the others; one joining after it joins the cluster of the model it was
  assigned (the global model: the unclustered clients), else the cluster of most clients.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from coordinator.strategies.aggregate import cosine_similarity_matrix
from coordinator.strategies.base import JsonDict, Strategy
from coordinator.strategies.evidence import ClusterEvidence
from coordinator.strategies.flhc_tree import (
    LINKAGES,
    METRICS,
    LinkageName,
    MetricName,
    flat_labels,
    largest_gap_cut,
    linkage_tree,
    weakest_heights,
)
from coordinator.strategies.joining import most_served_key
from coordinator.strategies.keys import GLOBAL, cluster_key
from coordinator.strategies.pair_evidence import FOREVER, PairEvidence
from coordinator.strategies.pairwise import (
    PAIRWISE_PARAMETERS,
    sketch_pair_cosines,
    strategy_comparer,
)
from coordinator.strategies.parameters import Param
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
    vector_norm,
)
from faultfleet.errors import UsageError
from faultfleet.tasks import Failure, FitInstruction, FitResult
from faultfleet.types import Float64Array, FloatArray, IntArray, ModelFactory

logger = logging.getLogger(__name__)


class FLHC(Strategy):
    """FedAvg warm-up, one hierarchical clustering of the updates, then FedAvg per cluster.

    Hyper-parameters: the :attr:`parameters` table (``faultfleet sim --list-options flhc``).
    ``distance_threshold`` is in the units of ``metric`` (Euclidean norm of weight
    differences, or cosine distance in [0, 2]) and depends on the model, optimiser and local
    epochs: the run history's ``strategy_metrics.merge_height_below_threshold`` /
    ``…_above_threshold`` show the dendrogram heights around the cut. ``min_clusters`` and
    ``max_clusters`` bound only the largest-gap cut (``distance_threshold=None``).

    Attributes
    ----------
    clustered_ : bool
        Whether the clustering round has happened.
    clusters_ : dict of str to str
        Model key of each clustered client; absent clients train and predict with ``"global"``.
    last_heights_ : array of shape (k - 1,) or None
        Merge heights of the clustering round, only just after it (not saved in the state).
    cut_ : float or None
        The height the dendrogram was cut at (``distance_threshold`` or the one chosen).
    evidence_ : PairEvidence
        Cosine similarity of the clustering round's updates, unknown for clients that did
        not answer it (the evidence of cluster quality): every pair under exact
        comparisons, sampled pairs under sketches.
    weakest_ : dict of str to float
        Per cluster key, the height of the highest merge inside the cluster.
    stream_bounds_ : dict of str to StreamBounds
        The medians a streamed round's robust rules measure against (the last round's).
    """

    name: ClassVar[str] = "flhc"
    parameters: ClassVar[tuple[Param, ...]] = (
        Param(
            "n_warmup",
            "int",
            10,
            "the FedAvg rounds before the clustering round",
            "FL+HC's rounds before clustering",
            low=0,
        ),
        Param(
            "distance_threshold",
            "float",
            None,
            "the dendrogram height to cut at, in the units of metric",
            "FL+HC's distance threshold",
            low=0.0,
            optional=True,
            none="cut in the largest gap between merge heights",
        ),
        Param(
            "linkage",
            "str",
            "ward",
            "the linkage criterion ('ward' needs metric 'euclidean')",
            "FL+HC uses ward",
            choices=LINKAGES,
        ),
        Param(
            "metric",
            "str",
            "euclidean",
            "the distance between two clients' updates",
            choices=METRICS,
        ),
        Param(
            "min_clusters",
            "int",
            2,
            "the fewest clusters the largest-gap cut may leave",
            low=1,
        ),
        Param(
            "max_clusters",
            "int",
            None,
            "the most clusters the largest-gap cut may leave",
            low=1,
            optional=True,
            none="no bound",
        ),
        *PAIRWISE_PARAMETERS,
    )

    def __init__(
        self,
        *,
        fraction: float = 0.25,
        n_warmup: int = 10,
        distance_threshold: float | None = None,
        linkage: LinkageName = "ward",
        metric: MetricName = "euclidean",
        min_clusters: int = 2,
        max_clusters: int | None = None,
        pairwise: str = "auto",
        sketch_epsilon: float = 0.25,
        sketch_seed: int = 0,
    ) -> None:
        super().__init__(fraction=fraction)
        self.n_warmup = n_warmup
        self.distance_threshold = distance_threshold
        self.linkage = linkage
        self.metric = metric
        self.min_clusters = min_clusters
        self.max_clusters = max_clusters
        self.pairwise = pairwise
        self.sketch_epsilon = sketch_epsilon
        self.sketch_seed = sketch_seed

    # -- lifecycle -------------------------------------------------------------------------

    def _initialize(self, model_factory: ModelFactory) -> None:
        self.models_[GLOBAL] = np.array(model_factory(0), dtype=np.float32)
        self.comparer_ = strategy_comparer(self, self._model_size(), len(self.client_ids_))
        self.clustered_ = False
        self.clusters_: dict[str, str] = {}
        self.last_heights_: Float64Array | None = None
        self.cut_: float | None = None
        self._new_evidence()
        self.weakest_: dict[str, float] = {}
        self.stream_bounds_: dict[str, StreamBounds] = {}

    def _join(
        self, joining: list[str], keys: Mapping[str, str | None], model_factory: ModelFactory
    ) -> None:
        self.evidence_.join(self.client_ids_, len(joining))
        if not self.clustered_:
            return
        for client in joining:
            key = keys[client] or most_served_key(self, list(self.models_), joining)
            if key != GLOBAL:
                self.clusters_[client] = key

    def _leave(self, leaving: set[str], kept: list[int]) -> None:
        for client in leaving:
            self.clusters_.pop(client, None)
        self.evidence_.leave(self.client_ids_, kept)

    def _new_evidence(self) -> None:
        """No evidence yet: an m × m matrix under exact comparisons, sampled pairs (kept for
        the run) under sketches (:mod:`.pair_evidence`)."""
        sampled = self.comparer_.sketcher is not None
        self.evidence_ = PairEvidence(self.client_ids_, sampled=sampled, memory=FOREVER)

    def _check_parameter_rules(self) -> None:
        if self.max_clusters is not None and self.max_clusters < self.min_clusters:
            raise UsageError(
                f"flhc: max_clusters must be an integer >= {self.min_clusters} (min_clusters) "
                f"or none, got {self.max_clusters!r}; raise max_clusters or lower min_clusters"
            )
        if self.linkage == "ward" and self.metric != "euclidean":
            raise UsageError(
                f"linkage='ward' needs metric='euclidean', got metric={self.metric!r}; use "
                "linkage='average', 'complete' or 'single' with cosine distances"
            )

    # -- training rounds -------------------------------------------------------------------

    def is_clustering_round(self, server_round: int) -> bool:
        """Whether ``server_round`` clusters: the first round after the warm-up not yet done."""
        return not self.clustered_ and server_round > self.n_warmup

    def configure_round(
        self, server_round: int, available: Sequence[str], rng: np.random.Generator
    ) -> list[FitInstruction]:
        """Every available client in the clustering round, ``fraction`` of them otherwise."""
        if not self.is_clustering_round(server_round):
            return super().configure_round(server_round, available, rng)
        pool = sorted((c for c in set(available) if c in self.client_index_), key=self._index)
        return [FitInstruction(c, (GLOBAL,)) for c in pool]

    def fit_models(self, server_round: int, client_id: str) -> tuple[str, ...]:
        return (self.model_key_for(client_id),)

    def model_key_for(self, client_id: str) -> str:
        if client_id not in self.client_index_:
            raise KeyError(f"unknown client {client_id!r}")
        return self.clusters_.get(client_id, GLOBAL)

    def _check_key(self, client_id: str, model_key: str) -> None:
        expected = self.model_key_for(client_id)
        if model_key != expected:
            raise ValueError(f"client {client_id!r} trained {model_key!r}, expected {expected!r}")

    def _aggregate(
        self, server_round: int, results: Sequence[FitResult], failures: Sequence[Failure]
    ) -> None:
        if len({r.client_id for r in results}) != len(results):
            raise ValueError("a client answered more than once in one round")
        for r in results:
            self._check_key(r.client_id, r.model_key)
        stream = self.open_stream(server_round)
        if stream is not None:  # sketch mode: the same streaming path as a live round
            self._aggregate_stream(server_round, fold_all(stream, results))
            return
        self.last_heights_ = None
        if results and self.is_clustering_round(server_round):
            self._cluster(server_round, results)
            return
        by_model: dict[str, list[FitResult]] = {}
        for r in results:
            by_model.setdefault(r.model_key, []).append(r)
        for key, members in by_model.items():
            self.models_[key] = self._average(members)

    def _cluster(self, server_round: int, results: Sequence[FitResult]) -> None:
        """Cluster the answering clients by their updates; each cluster averages its members."""
        clients = [r.client_id for r in results]
        sketcher = self.comparer_.sketcher
        if sketcher is None:
            rows = np.stack([np.asarray(r.delta, dtype=np.float64) for r in results])
            labels = self._settle(
                server_round,
                clients,
                rows,
                lambda: cosine_similarity_matrix(list(rows)),
                lambda a, b: cosine_similarity_matrix(list(rows))[a, b],
            )
        else:  # sketches under a trimmed mean, which takes the list
            deltas = [np.asarray(r.delta, dtype=np.float32) for r in results]
            labels = self._settle_sketched(
                server_round,
                clients,
                np.stack([sketcher.unit_sketch(d) for d in deltas]),
                np.array([vector_norm(d) for d in deltas]),
            )
        for position in range(int(labels.max()) + 1):
            members = [r for r, label in zip(results, labels, strict=True) if label == position]
            self.models_[cluster_key(position)] = self._average(members)
        if len(self.clusters_) == len(self.client_ids_):
            del self.models_[GLOBAL]

    def _settle(
        self,
        server_round: int,
        clients: Sequence[str],
        rows: Float64Array,
        cosines: Callable[[], Float64Array],
        pair_cosines: Callable[[IntArray, IntArray], Float64Array],
        *,
        gram: bool = False,
    ) -> np.ndarray[Any, np.dtype[np.intp]]:
        """Cut the dendrogram of ``rows`` (one per client of ``clients``), assign every one
        of them its cluster key and record the evidence (made once the linkage's distances
        are gone): the k × k matrix ``cosines()`` returns, or under sketches the cosines of
        sampled pairs, ``pair_cosines(a, b)``; returns the labels, 0-based, in the order of
        ``clients``."""
        tree = linkage_tree(rows, linkage_name=self.linkage, metric=self.metric, gram=gram)
        heights = np.asarray(tree[:, 2], dtype=np.float64)
        if self.distance_threshold is None:
            cut = largest_gap_cut(
                heights, min_clusters=self.min_clusters, max_clusters=self.max_clusters
            )
        else:
            cut = float(self.distance_threshold)
        labels = flat_labels(tree, cut, len(clients))
        where = [self._index(c) for c in clients]
        self.evidence_.record(server_round, where, block=cosines, pairs=pair_cosines, take=True)
        self.weakest_ = {cluster_key(k): h for k, h in weakest_heights(tree, labels).items()}
        self.cut_ = cut
        for client, label in zip(clients, labels, strict=True):
            self.clusters_[client] = cluster_key(int(label))
        self.clustered_ = True
        self.last_heights_ = heights
        logger.debug(
            "round %d: %d clients in %d clusters, %d unclustered",
            server_round,
            len(clients),
            int(labels.max()) + 1,
            len(self.client_ids_) - len(self.clusters_),
        )
        return labels

    def _settle_sketched(
        self, server_round: int, clients: Sequence[str], units: FloatArray, norms: Float64Array
    ) -> np.ndarray[Any, np.dtype[np.intp]]:
        """:meth:`_settle` on the unit sketches ``units`` (k, d) scaled by the updates' norms."""
        rows = units.astype(np.float64) * norms[:, None]
        return self._settle(
            server_round,
            clients,
            rows,
            lambda: sketch_cosine_matrix(units),
            lambda a, b: sketch_pair_cosines(units, a, b),
            gram=True,
        )

    # -- streaming (pairwise sketch) -------------------------------------------------------

    def open_stream(self, server_round: int) -> UpdateStream | None:
        """Under sketches, a stream folding the round's updates into their models' running
        sums as they arrive (:mod:`.streaming`), keeping of each update its norm and unit
        sketch, all the dendrogram and the evidence read. None under exact distances, which
        need the updates, and under a trimmed mean, which needs them all at once: those
        take the list."""
        return self._sketched_stream(server_round, self.stream_bounds_, self.comparer_.sketcher)

    def aggregate_stream(
        self, server_round: int, stream: FoldedRound, failures: Sequence[Failure]
    ) -> None:
        """The round's reaction to the updates folded into ``stream`` (sketch mode)."""
        for u in self._answered_once(stream):
            self._check_key(u.client_id, u.model_key)
        self._aggregate_stream(server_round, stream)

    def _aggregate_stream(self, server_round: int, stream: FoldedRound) -> None:
        """Each model the average of its folded updates; in the clustering round the
        clusters from the sketches (in client order), each starting from the new global
        model with its medians."""
        self.last_heights_ = None
        updates = sorted(stream.updates(), key=lambda u: self._index(u.client_id))
        clustering = bool(updates) and self.is_clustering_round(server_round)
        self.averaged_ = fold_averages(self.models_, self.stream_bounds_, stream, server_round)
        if not clustering:
            return
        labels = self._settle_sketched(
            server_round,
            [u.client_id for u in updates],
            np.stack(unit_sketches(updates)),
            np.array([u.norm for u in updates]),
        )
        start, bounds = self.models_[GLOBAL], self.stream_bounds_.get(GLOBAL, StreamBounds())
        for position in range(int(labels.max()) + 1):
            self.models_[cluster_key(position)] = start.copy()
            self.stream_bounds_[cluster_key(position)] = bounds
        if len(self.clusters_) == len(self.client_ids_):
            del self.models_[GLOBAL]
            self.stream_bounds_.pop(GLOBAL, None)

    # -- reporting -------------------------------------------------------------------------

    def round_metrics(self) -> dict[str, float]:
        """Whether the clients are clustered (1) or not (0); just after the clustering round
        also the number of clusters found, the number of clients clustered, and the
        dendrogram heights on either side of the cut (the highest merge made and the lowest
        merge refused), where they exist, and the cut itself (``distance_threshold``)."""
        metrics = {"clustered": float(self.clustered_)}
        heights = self.last_heights_
        if heights is None or self.cut_ is None:
            return metrics
        threshold = self.cut_
        metrics["distance_threshold"] = threshold
        metrics["n_clusters"] = float(len(set(self.clusters_.values())))
        metrics["clustered_clients"] = float(len(self.clusters_))
        below, above = heights[heights <= threshold], heights[heights > threshold]
        if below.size:
            metrics["merge_height_below_threshold"] = float(below.max())
        if above.size:
            metrics["merge_height_above_threshold"] = float(above.min())
        return metrics

    def cluster_evidence(self) -> ClusterEvidence:
        """The cosines of the clustering round's updates, and per cluster the height of the
        highest dendrogram merge inside it (FL+HC's weakest merge)."""
        labels = self.cluster_labels()
        keys = sorted({self.model_key_for(c) for c in self.client_ids_})
        return ClusterEvidence(
            client_ids=self.client_ids_,
            labels=tuple(labels[c] for c in self.client_ids_),
            similarity=self.evidence_.similarity(),
            measure="cosine similarity of the weight updates of FL+HC's clustering round "
            f"({self.evidence_.describe()})",
            settled=self.clustered_,
            weakest_merges={keys.index(k): h for k, h in self.weakest_.items() if k in keys},
            merge_measure=f"{self.linkage} linkage height of the highest merge inside the "
            f"cluster ({self.metric} distance between updates; higher is weaker)",
            unrelated=0.0,
        )

    # -- state -----------------------------------------------------------------------------

    def _extra_state(self) -> tuple[JsonDict, dict[str, np.ndarray[Any, Any]]]:
        meta: JsonDict = {
            "clustered": bool(self.clustered_),
            "clusters": [self.clusters_.get(c) for c in self.client_ids_],
            "cut": self.cut_,
            "weakest": dict(self.weakest_),
            "comparer": self.comparer_.state(),
            "stream_bounds": bounds_state(self.stream_bounds_),
        }
        return meta, self.evidence_.arrays()

    def _load_extra_state(self, meta: JsonDict, arrays: Mapping[str, np.ndarray[Any, Any]]) -> None:
        clusters: list[str | None] = list(meta["clusters"])
        if len(clusters) != len(self.client_ids_):
            raise ValueError(
                f"state lists {len(clusters)} clusters for {len(self.client_ids_)} clients"
            )
        needed = {GLOBAL if k is None else k for k in clusters}
        missing = sorted(needed - set(self.models_))
        if missing:
            raise ValueError(f"state assigns clients to models it does not hold: {missing}")
        self.comparer_ = strategy_comparer(
            self, self._model_size(), len(clusters), meta.get("comparer")
        )
        self.clustered_ = bool(meta["clustered"])
        self.clusters_ = {
            c: k for c, k in zip(self.client_ids_, clusters, strict=True) if k is not None
        }
        self.last_heights_ = None
        cut = meta.get("cut")
        self.cut_ = None if cut is None else float(cut)
        self.weakest_ = {str(k): float(v) for k, v in meta.get("weakest", {}).items()}
        self._new_evidence()
        self.evidence_.load(self.client_ids_, arrays)
        self.stream_bounds_ = load_bounds(meta.get("stream_bounds", {}))
