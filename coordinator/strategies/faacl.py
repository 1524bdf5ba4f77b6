"""FAACL: federated adaptive asymmetric clustered learning, with supportive clusters.

"FAACL: federated adaptive asymmetric clustered learning" (anonymous ICLR submission;
``shared/papers/faacl.txt``), §4 and Algorithms 1–7 of its appendix A. A cluster has member
devices, a model, and a set of *supportive clusters* (C.sup): the members of a supportive
cluster help train the cluster's model without predicting with it, so a machine with poor
or scarce data can learn from good ones without the reverse.

One federated round of the engine is one iteration of the paper's loops:

1. *Support* (probe step 0; Algorithm 3 or 4): every available member d of every cluster C1
   under test reports the per-sample validation losses of C1's model and of every other
   candidate cluster's model. C2 supports C1 when, on C1's answering members, C2's model is
   at most ε worse than C1's own: version 1 by a one-sided Wilcoxon signed-rank test per
   device (every member must reach p <= α), version 2 by the pooled mean difference
   (:mod:`.faacl_support`).
2. *Merge* (Algorithm 5): mutually supportive clusters merge — union of members,
   intersection of supports.
3. *Cluster train* (Algorithm 6): every sampled device trains its own cluster's model and,
   on behalf, the model of every cluster its cluster supports; each model becomes the
   sample-weighted mean of the updates it received (none received: unchanged).

*Flat* FAACL (Algorithm 7) repeats 1–2 until a round changes neither memberships nor
supports, then freezes the clustering. *Hierarchical* FAACL (Algorithm 1) starts from one
partition per device, runs flat FAACL inside every partition (candidates are the clusters
of the same partition) until all are stable, pairs the partitions at random and starts
again, and freezes once a single stable partition is left.

Decisions on what the paper leaves open (``shared/papers/README.md`` settles version 2):

- Initialisation (Algorithm 2): every device starts a singleton cluster from the same θ
  (``model_factory(0)``); in rounds 1 … ``init_rounds`` every available device trains its
  own cluster's model (the per-device argmin, as local training; no sampling), and the
  first support test runs in round ``init_rounds + 1``. A cluster whose model has never been
  trained (its device was offline, or joined later) takes no part in tests: it waits outside
  the partitions and enters one (hierarchical: a new one; flat: the only one) once it has
  received an update, which reactivates the clustering. Otherwise two untrained clusters
  would hold the very same θ and merge on no evidence.
- Supports are recomputed, not only added to: a tested cluster's C.sup becomes the set of
  candidates that pass this round. A cluster none of whose members answered the probe keeps
  its supports (the latest evidence). A device whose validation split is empty abstains.
- Version 1 zeros and small samples: see :func:`.faacl_support.wilcoxon_p_value` (a
  difference exactly at ε counts half each way; n samples cannot reach p < 2⁻ⁿ, so a member
  with fewer than log2(1/α) validation samples blocks every support of its cluster).
- Merge order: clusters are visited by their first member's registration order and each
  merges at most once per round. The merged model: the paper takes one of the two at
  random; we take the one with the lower mean per-sample validation loss over the answering
  members of both clusters — both were just measured by the probe — and the first
  cluster's on a tie. Merged clusters get a new key ``cluster-<n>``; keys are never reused.
- Other clusters' supports that named a merged cluster: X.sup holds the merged cluster iff
  it held both halves (the same intersection rule as the merged cluster's own supports);
  a half alone is dropped, to be re-tested in the next round.
- Stability: a partition under test is stable after a round in which at least one of its
  clusters answered and neither a merge nor a change of supports happened, or when it
  holds a single cluster. Support tests near their threshold can flip from round to round
  forever, and a partition whose devices are all offline cannot be tested at all: after
  ``patience`` consecutive rounds that changed supports without a merge, or in which none
  of its devices answered, the partition is declared stable (``patience=None``: the
  paper's rule, which waits for a quiet round however long it takes). Stable partitions
  are not probed while others are still running.
- Hierarchical pairing happens at the start of the round after the last partition became
  stable, from the engine's generator (one permutation); with an odd number the partition
  drawn last waits for the next level. Algorithm 1 as printed stops as soon as one partition
  remains, without running flat FAACL on it; we run it, or the last two halves would never
  be compared.
- Joining (:meth:`FAACL.add_clients`): a new singleton cluster on a copy of the model the
  device's own evaluation chose (else ``model_factory(0)``), trained first by its device
  when sampled, and only then tested against the others (so a copy never merges with its
  original on no evidence); leaving (:meth:`FAACL.remove_clients`): the device leaves its
  cluster, an emptied cluster is deleted with its model and removed from every C.sup, and
  the partition it was in is tested again.
- ``pairwise`` (:mod:`.pairwise`): FAACL's clustering compares losses — the asymmetric
  support test of Algorithms 3–4 reads per-sample validation losses, not updates — so
  there is nothing in it to sketch; the option applies to the same-model cosines of its
  evidence (:class:`~.evidence.SameModelSimilarity`) only. Under ``"sketch"`` a round
  streams (:meth:`FAACL.open_stream`): each update is folded into its model's running sum
  as it arrives and only its sketch is kept, for the evidence (the list's pairs and
  cosines); the robust policy's adaptive clip and weight cap then take the previous round's
  medians of the same model (a cluster new since has none), and a trimmed mean takes the
  list.
- Results and probe answers are validated: a device may only train its own cluster's model
  or one its cluster supports, and only the devices asked may answer a probe.

Where the pieces are: this module holds :class:`FAACL` itself (hyper-parameters, cluster
training, membership, the clustering's answers and saved state); it holds a
:class:`~.faacl_clusters.FAACLClusters` (the clusters, partitions and keys) and a
:class:`~.faacl_probing.FAACLProbing` (the probe rounds' support tests, merges and pairing);
the pure tests and bounds are in :mod:`.faacl_support`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from coordinator.strategies.base import JsonDict, Strategy
from coordinator.strategies.evidence import ClusterEvidence, SameModelSimilarity
from coordinator.strategies.faacl_clusters import FAACLClusters
from coordinator.strategies.faacl_parameters import FAACL_PARAMETERS
from coordinator.strategies.faacl_probing import FAACLProbing
from coordinator.strategies.faacl_support import Cluster, Partition
from coordinator.strategies.pairwise import strategy_comparer
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
from faultfleet.tasks import (
    Failure,
    FitInstruction,
    FitResult,
    LossesInstruction,
    ProbeResults,
)
from faultfleet.types import ModelFactory


class FAACL(Strategy):
    """Asymmetric clustering with supportive clusters (FAACL, flat or hierarchical).

    Hyper-parameters: the :attr:`parameters` table (``faultfleet sim --list-options faacl``).
    Why the defaults: after three local rounds of the quick ``mixed-fault`` profile, models
    of another fault group were >= 8 nats worse on average and those of the same group within
    ±0.5, so ε = 1 suits symmetric vibration federations; asymmetric ones need less (0.3 kept
    a low-data machine supported rather than merged in ``quantity-skew``). Three initial
    rounds give models whose losses already separate the fault groups. Same-group
    differences spanned [−5.6, 4.8] nats in that probe, hence ``loss_range`` = 10.

    Attributes
    ----------
    book_ : FAACLClusters
        The clusters and partitions; ``clusters_``, ``partitions_`` and ``next_cluster_``
        read its attributes of the same names.
    probing_ : FAACLProbing
        The support tests and merges of the probe rounds, on ``book_``.
    same_model_ : SameModelSimilarity
        Cosines of updates of the same model in the same round (cluster quality).
    """

    name: ClassVar[str] = "faacl"
    probes: ClassVar[bool] = True
    parameters: ClassVar[tuple[Param, ...]] = FAACL_PARAMETERS

    def __init__(
        self,
        *,
        fraction: float = 0.25,
        version: int = 1,
        epsilon: float = 1.0,
        alpha: float = 0.05,
        hierarchical: bool = True,
        init_rounds: int = 3,
        patience: int | None = 3,
        loss_range: float = 10.0,
        pairwise: str = "auto",
        sketch_epsilon: float = 0.25,
        sketch_seed: int = 0,
    ) -> None:
        super().__init__(fraction=fraction)
        self.version = version
        self.epsilon = epsilon
        self.alpha = alpha
        self.hierarchical = hierarchical
        self.init_rounds = init_rounds
        self.patience = patience
        self.loss_range = loss_range
        self.pairwise = pairwise
        self.sketch_epsilon = sketch_epsilon
        self.sketch_seed = sketch_seed

    # -- lifecycle -------------------------------------------------------------------------

    def _initialize(self, model_factory: ModelFactory) -> None:
        self._hold_clusters()
        theta = np.array(model_factory(0), dtype=np.float32)
        comparer = strategy_comparer(self, len(theta), len(self.client_ids_))
        self.same_model_ = SameModelSimilarity(self.client_ids_, comparer)
        self.stream_bounds_: dict[str, StreamBounds] = {}
        self.book_.new_singletons(self.client_ids_, theta)

    def _hold_clusters(self) -> None:
        """A fresh bookkeeping on ``models_`` and the probing that acts on it."""
        self.book_ = FAACLClusters(self.models_, self._index, hierarchical=self.hierarchical)
        self.probing_ = FAACLProbing(
            self.book_,
            version=self.version,
            epsilon=self.epsilon,
            alpha=self.alpha,
            init_rounds=self.init_rounds,
            patience=self.patience,
            loss_range=self.loss_range,
        )

    def _join(
        self, joining: list[str], keys: Mapping[str, str | None], model_factory: ModelFactory
    ) -> None:
        """Each joining device starts a singleton cluster (§4.4) on a copy of the model it
        was assigned, else on the initial θ; it enters the clustering once trained."""
        for client in joining:
            key = keys[client]
            theta = model_factory(0) if key is None else self.models_[key]
            self.book_.new_singletons([client], np.array(theta, dtype=np.float32))
        self.same_model_.resize(self.client_ids_)

    def _leave(self, leaving: set[str], kept: list[int]) -> None:
        """Devices leaving: out of their cluster; an emptied cluster is deleted (§4.4)."""
        self.book_.remove(leaving)
        self.same_model_.resize(self.client_ids_)
        self.book_.reindex()

    # -- the clusters, as they were named when they were attributes of the strategy --------

    @property
    def clusters_(self) -> dict[str, Cluster]:
        return self.book_.clusters

    @property
    def partitions_(self) -> dict[int, Partition]:
        return self.book_.partitions

    @property
    def next_cluster_(self) -> int:
        return self.book_.next_cluster

    # -- probes: support tests and merges (:mod:`.faacl_probing`) --------------------------

    def configure_probe(
        self, server_round: int, step: int, available: Sequence[str], rng: np.random.Generator
    ) -> list[LossesInstruction] | None:
        """Step 0 after the initial rounds: losses of the candidate models on every available
        member of the clusters under test; pairs the partitions first when all are stable."""
        return self.probing_.configure(server_round, step, available, rng)

    def aggregate_probe(
        self, server_round: int, step: int, results: ProbeResults, failures: Sequence[Failure]
    ) -> None:
        """Algorithms 3/4 (support) then 5 (merge) on the answers of probe step 0."""
        self.probing_.aggregate(server_round, step, results, failures)

    # -- training rounds -------------------------------------------------------------------

    def configure_round(
        self, server_round: int, available: Sequence[str], rng: np.random.Generator
    ) -> list[FitInstruction]:
        """Every available device in the initial rounds, ``fraction`` of them afterwards;
        each trains its cluster's model and those of the clusters its cluster supports."""
        if server_round <= self.init_rounds:
            chosen = sorted((c for c in set(available) if c in self.client_index_), key=self._index)
        else:
            chosen = self.sample_clients(available, rng)
        return [FitInstruction(c, (key,)) for c in chosen for key in self.training_keys(c)]

    def fit_models(self, server_round: int, client_id: str) -> tuple[str, ...]:
        """The client's own cluster model (its trainings on behalf are separate tasks)."""
        return (self.model_key_for(client_id),)

    def training_keys(self, client_id: str) -> tuple[str, ...]:
        """Models ``client_id`` trains when sampled (Algorithm 6): its cluster's, then those
        of the clusters its cluster supports, in cluster order."""
        own = self.model_key_for(client_id)
        helped = [
            k for k in self.book_.ordered(self.clusters_) if own in self.clusters_[k].supports
        ]
        return (own, *helped)

    def _aggregate(
        self, server_round: int, results: Sequence[FitResult], failures: Sequence[Failure]
    ) -> None:
        """Algorithm 6: each model is the sample-weighted mean of the updates it received."""
        for r in results:
            self._check_trained(r.client_id, r.model_key)
        stream = self.open_stream(server_round)
        if stream is not None:  # sketch mode: the same streaming path as a live round
            self._aggregate_stream(server_round, fold_all(stream, results))
            return
        by_key: dict[str, list[FitResult]] = {}
        for r in results:
            by_key.setdefault(r.model_key, []).append(r)
        for key, trained in by_key.items():
            self.models_[key] = self._average(trained)
        self.same_model_.record(server_round, results)
        self._enter_trained(by_key)

    def _check_trained(self, client_id: str, model_key: str) -> None:
        if client_id not in self.client_index_:
            raise ValueError(f"result from unknown client {client_id!r}")
        if model_key not in self.training_keys(client_id):
            raise ValueError(
                f"client {client_id!r} trained {model_key!r}, which is neither its "
                "cluster's model nor one its cluster supports"
            )

    def _enter_trained(self, trained: Sequence[str] | Mapping[str, object]) -> None:
        """A cluster waiting for its first update (a newcomer's) enters once trained."""
        for key in self.book_.ordered(trained):
            if self.clusters_[key].partition is None:
                self.book_.enter(key)

    # -- streaming (pairwise sketch) -------------------------------------------------------

    def open_stream(self, server_round: int) -> UpdateStream | None:
        """Under sketches, a stream folding the round's updates into their models' sums as
        they arrive (:mod:`.streaming`), keeping their sketches for the evidence; None under
        exact cosines or a trimmed mean, which need the list."""
        comparer = self.same_model_.comparer
        if comparer is None or comparer.sketcher is None:
            return None
        bounds = {k: b for k, b in self.stream_bounds_.items() if k in self.models_}
        self.stream_bounds_ = bounds  # clusters merged away leave theirs
        return self._stream(server_round, bounds, comparer.sketcher)

    def aggregate_stream(
        self, server_round: int, stream: FoldedRound, failures: Sequence[Failure]
    ) -> None:
        """The round's reaction to the updates folded into ``stream`` (sketch mode)."""
        for u in stream.updates():
            self._check_trained(u.client_id, u.model_key)
        self._aggregate_stream(server_round, stream)

    def _aggregate_stream(self, server_round: int, stream: FoldedRound) -> None:
        """Each trained model's average, the evidence from the sketches (in the list's
        order: by client, then model) and the newcomers' clusters entered."""
        updates = sorted(stream.updates(), key=lambda u: (self._index(u.client_id), u.model_key))
        self.averaged_ = fold_averages(self.models_, self.stream_bounds_, stream, server_round)
        self.same_model_.record_sketches(server_round, updates)
        self._enter_trained(stream.model_keys())

    # -- clustering ------------------------------------------------------------------------

    def model_key_for(self, client_id: str) -> str:
        return self.book_.owner(client_id)

    def model_ready(self, client_id: str) -> bool:
        """False while ``client_id``'s cluster waits for its first update (a newcomer)."""
        return self.clusters_[self.model_key_for(client_id)].partition is not None

    def cluster_labels(self) -> dict[str, int]:
        """Clusters numbered in order of their first member."""
        position = {k: i for i, k in enumerate(self.book_.ordered(self.clusters_))}
        return {c: position[self.book_.owner(c)] for c in self.client_ids_}

    @property
    def frozen(self) -> bool:
        """Whether the clustering is final: one stable partition at most, nobody waiting."""
        waiting = any(c.partition is None for c in self.clusters_.values())
        return not waiting and len(self.partitions_) <= 1 and self.book_.all_stable()

    def cluster_evidence(self) -> ClusterEvidence:
        """Cosines of updates of the same model in one round: members of a cluster, and
        devices that trained a supported cluster's model on its behalf."""
        labels = self.cluster_labels()
        return self.same_model_.evidence(
            [labels[c] for c in self.client_ids_],
            settled=self.frozen,
            merge_measure="n/a: FAACL merges on a loss test (mutual support), not on a similarity",
        )

    def supporters(self, key: str) -> list[str]:
        """Keys of the clusters that support cluster ``key`` (C.sup), in cluster order."""
        return self.book_.ordered(self.clusters_[key].supports)

    def round_metrics(self) -> dict[str, float]:
        """Clusters, support edges, partitions and whether the clustering is frozen; in rounds
        with a support test also the devices and models probed, merges, probe failures, the
        range of the per-sample loss differences and (version 2) ``hoeffding_split_bound``:
        eq. 20's 2·exp(−2nε²/(b−a)²), the chance that one test splits two devices of one
        distribution, for the smallest pooled sample count n tested."""
        metrics = {
            "clusters": float(len(self.clusters_)),
            "support_edges": float(self.book_.support_edges()),
            "partitions": float(len(self.partitions_)),
            "frozen": float(self.frozen),
        }
        metrics.update(self.probing_.metrics)
        return metrics

    # -- state -----------------------------------------------------------------------------

    def _extra_state(self) -> tuple[JsonDict, dict[str, np.ndarray[Any, Any]]]:
        meta = self.book_.state()
        meta["metrics"] = dict(self.probing_.metrics)
        meta["comparer"] = self.same_model_.comparer_state()
        meta["stream_bounds"] = bounds_state(self.stream_bounds_)
        return meta, self.same_model_.arrays("same_model_")

    def _load_extra_state(self, meta: JsonDict, arrays: Mapping[str, np.ndarray[Any, Any]]) -> None:
        self._hold_clusters()
        self.book_.load(meta, self.client_ids_)
        self.probing_.metrics = {str(k): float(v) for k, v in meta["metrics"].items()}
        comparer = strategy_comparer(
            self, self._model_size(), len(self.client_ids_), meta.get("comparer")
        )
        self.same_model_ = SameModelSimilarity(self.client_ids_, comparer)
        self.same_model_.load(self.client_ids_, arrays, "same_model_")
        self.stream_bounds_ = load_bounds(meta.get("stream_bounds", {}))
