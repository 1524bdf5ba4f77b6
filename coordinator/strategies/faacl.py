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
- Joining (:meth:`FAACL.add_clients`): a new singleton cluster from ``model_factory(0)``,
  trained first by its device when sampled; leaving (:meth:`FAACL.remove_clients`): the
  device leaves its cluster, an emptied cluster is deleted with its model and removed from
  every C.sup, and the partition it was in is tested again.
- Results and probe answers are validated: a device may only train its own cluster's model
  or one its cluster supports, and only the devices asked may answer a probe.

Where the pieces are: this module holds :class:`FAACL` itself (hyper-parameters, cluster
training, the clustering's answers); its bases hold the probe rounds' support tests, merges
and pairing (:mod:`.faacl_probing`) and the clusters, partitions, membership and saved state
(:mod:`.faacl_clusters`); the pure tests and bounds are in :mod:`.faacl_support`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from coordinator.strategies.evidence import ClusterEvidence
from coordinator.strategies.faacl_probing import FAACLProbing
from coordinator.strategies.faacl_support import check_real, is_int_at_least
from faultfleet.errors import UsageError
from faultfleet.tasks import Failure, FitInstruction, FitResult


class FAACL(FAACLProbing):
    """Asymmetric clustering with supportive clusters (FAACL, flat or hierarchical).

    Parameters
    ----------
    fraction : float
        Client fraction c sampled for cluster training after the initial rounds.
    version : {1, 2}
        Support test: 1, Wilcoxon signed-rank per device (Algorithm 3); 2, pooled mean
        difference against ε (§4.2, with Theorem 4.1's Hoeffding bound).
    epsilon : float
        Margin ε >= 0 in loss units (nats of cross-entropy): a candidate supports a
        cluster when its model is at most ε worse on the cluster's devices. The default 1.0
        suits symmetric vibration federations: after three local rounds of the quick
        ``mixed-fault`` profile, models of another fault group were >= 8 nats worse on
        average and those of the same group within ±0.5; asymmetric federations need less
        (0.3 kept a low-data machine supported rather than merged in ``quantity-skew``).
    alpha : float
        Significance level α in (0, 1) of version 1.
    hierarchical : bool
        Hierarchical FAACL (Algorithm 1, the paper's experiments) or flat (Algorithm 7).
    init_rounds : int
        Rounds (>= 0) of local training by every available device before the first support
        test (Algorithm 2); 3 gives models whose losses already separate the fault groups.
    patience : int or None
        Rounds (>= 1) a partition may keep changing supports without merging, or go without
        an answer, before it is declared stable; None waits for a round without change, as
        the paper.
    loss_range : float
        b − a > 0 of Theorem 4.1: width of the interval per-sample loss differences lie in,
        loss units; used only for the Hoeffding bound reported with version 2. Same-group
        differences spanned [−5.6, 4.8] nats in the probe quoted for ``epsilon``.

    Attributes
    ----------
    clusters_ : dict of str to Cluster
        Clusters by model key.
    partitions_ : dict of int to Partition
        Partitions by id; every trained cluster is in one.
    """

    name: ClassVar[str] = "faacl"
    probes: ClassVar[bool] = True
    dynamic_membership: ClassVar[bool] = True

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
    ) -> None:
        super().__init__(fraction=fraction)
        self.version = version
        self.epsilon = epsilon
        self.alpha = alpha
        self.hierarchical = hierarchical
        self.init_rounds = init_rounds
        self.patience = patience
        self.loss_range = loss_range

    # -- hyper-parameters ------------------------------------------------------------------

    def _validate(self) -> None:
        if isinstance(self.version, bool) or self.version not in (1, 2):
            raise UsageError(
                f"version must be 1 (Wilcoxon signed-rank test) or 2 (mean loss difference), "
                f"got {self.version!r}"
            )
        check_real("epsilon", self.epsilon, low=0.0, closed=True, hint="a margin in nats")
        check_real("alpha", self.alpha, low=0.0, high=1.0, closed=False, hint="e.g. 0.05")
        check_real("loss_range", self.loss_range, low=0.0, closed=False, hint="b - a, in nats")
        if not isinstance(self.hierarchical, bool):
            raise UsageError(f"hierarchical must be True or False, got {self.hierarchical!r}")
        if not is_int_at_least(self.init_rounds, 0):
            raise UsageError(
                f"init_rounds must be an integer >= 0 (rounds of local training before the "
                f"first support test), got {self.init_rounds!r}"
            )
        if self.patience is not None and not is_int_at_least(self.patience, 1):
            raise UsageError(
                f"patience must be an integer >= 1 (rounds) or None to wait for a round "
                f"without change, got {self.patience!r}"
            )

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
        helped = [k for k in self._ordered(self.clusters_) if own in self.clusters_[k].supports]
        return (own, *helped)

    def _aggregate(
        self, server_round: int, results: Sequence[FitResult], failures: Sequence[Failure]
    ) -> None:
        """Algorithm 6: each model is the sample-weighted mean of the updates it received."""
        by_key: dict[str, list[FitResult]] = {}
        for r in results:
            if r.model_key not in self.training_keys(r.client_id):
                raise ValueError(
                    f"client {r.client_id!r} trained {r.model_key!r}, which is neither its "
                    "cluster's model nor one its cluster supports"
                )
            by_key.setdefault(r.model_key, []).append(r)
        for key, trained in by_key.items():
            self.models_[key] = self._average(trained)
        self.same_model_.record(server_round, results)
        for key in self._ordered(by_key):
            if self.clusters_[key].partition is None:
                self._enter(key)

    # -- clustering ------------------------------------------------------------------------

    def model_key_for(self, client_id: str) -> str:
        if client_id not in self._owner:
            raise KeyError(f"unknown client {client_id!r}")
        return self._owner[client_id]

    def model_ready(self, client_id: str) -> bool:
        """False while ``client_id``'s cluster waits for its first update (a newcomer)."""
        return self.clusters_[self.model_key_for(client_id)].partition is not None

    def cluster_labels(self) -> dict[str, int]:
        """Clusters numbered in order of their first member."""
        position = {k: i for i, k in enumerate(self._ordered(self.clusters_))}
        return {c: position[self._owner[c]] for c in self.client_ids_}

    @property
    def frozen(self) -> bool:
        """Whether the clustering is final: one stable partition at most, nobody waiting."""
        waiting = any(c.partition is None for c in self.clusters_.values())
        return not waiting and len(self.partitions_) <= 1 and self._all_stable()

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
        return self._ordered(self.clusters_[key].supports)

    def round_metrics(self) -> dict[str, float]:
        """Clusters, support edges, partitions and whether the clustering is frozen; in rounds
        with a support test also the devices and models probed, merges, probe failures, the
        range of the per-sample loss differences and (version 2) ``hoeffding_split_bound``:
        eq. 20's 2·exp(−2nε²/(b−a)²), the chance that one test splits two devices of one
        distribution, for the smallest pooled sample count n tested."""
        metrics = {
            "clusters": float(len(self.clusters_)),
            "support_edges": float(self._support_edges()),
            "partitions": float(len(self.partitions_)),
            "frozen": float(self.frozen),
        }
        metrics.update(self._metrics)
        return metrics
