"""FAACL's cluster bookkeeping: clusters, partitions, keys, membership and saved state.

:class:`FAACLClusters` is the base of :class:`coordinator.strategies.faacl.FAACL` that owns
its clustering state ("FAACL: federated adaptive asymmetric clustered learning", anonymous
ICLR submission; ``shared/papers/faacl.txt``; the decisions it follows are in the notes of
:mod:`coordinator.strategies.faacl`):

* the clusters by model key (§2, components 1–3) and the partitions of hierarchical FAACL,
  with the keys ``cluster-<n>`` handed out once each;
* Algorithm 2's singleton clusters on one common θ, at the start and for joining devices,
  and the removal of leaving devices (§4.4);
* a cluster's entry into a partition once trained, and the re-test of a partition whose
  clusters changed;
* the state's (de)serialisation, so a resumed run equals an uninterrupted one.

The support tests, merges and pairing of the probe rounds are in
:mod:`coordinator.strategies.faacl_probing`; the pure pieces in
:mod:`coordinator.strategies.faacl_support`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from coordinator.strategies.base import JsonDict, Strategy
from coordinator.strategies.evidence import SameModelSimilarity
from coordinator.strategies.faacl_support import Cluster, Partition
from faultfleet.types import ModelFactory


def cluster_key(n: int) -> str:
    """Model key of the n-th cluster ever formed: ``"cluster-n"``."""
    return f"cluster-{n}"


class FAACLClusters(Strategy):
    """FAACL's clustering state and its bookkeeping (see the module docstring).

    Attributes
    ----------
    clusters_ : dict of str to Cluster
        Clusters by model key.
    partitions_ : dict of int to Partition
        Partitions by id; every trained cluster is in one.
    next_cluster_ : int
        Number of the next cluster key.
    next_partition_ : int
        Id of the next partition.
    same_model_ : SameModelSimilarity
        Cosines of updates of the same model in the same round (cluster quality).
    """

    hierarchical: bool
    """Hierarchical FAACL (Algorithm 1) or flat (Algorithm 7); set by the subclass."""

    clusters_: dict[str, Cluster]
    partitions_: dict[int, Partition]
    next_cluster_: int
    next_partition_: int
    _metrics: dict[str, float]
    _plan: dict[str, tuple[str, ...]] | None
    _under_test: list[int]
    _owner: dict[str, str]

    @abstractmethod
    def _validate(self) -> None:
        """Raise a UsageError naming the first invalid hyper-parameter."""

    # -- lifecycle -------------------------------------------------------------------------

    def _initialize(self, model_factory: ModelFactory) -> None:
        self._validate()
        self.clusters_ = {}
        self.partitions_ = {}
        self.next_cluster_ = 0
        self.next_partition_ = 0
        self._metrics = {}
        self._plan = None
        self._under_test = []
        self.same_model_ = SameModelSimilarity(self.client_ids_)
        self._new_singletons(self.client_ids_, model_factory)

    def add_clients(self, client_ids: Sequence[str], model_factory: ModelFactory) -> None:
        """Devices joining the federation: each starts a singleton cluster (§4.4).

        The new cluster's model is ``model_factory(0)``, the initial θ of everyone; it is
        trained by its device when the device is sampled, and then enters the clustering.
        """
        self._new_singletons(self._register(client_ids), model_factory)
        self.same_model_.resize(self.client_ids_)

    def remove_clients(self, client_ids: Sequence[str]) -> None:
        """Devices leaving: out of their cluster; an emptied cluster is deleted (§4.4)."""
        leaving = self._check_leaving(client_ids)
        for key in list(self.clusters_):
            cluster = self.clusters_[key]
            if not leaving & set(cluster.members):
                continue
            cluster.members = [c for c in cluster.members if c not in leaving]
            if not cluster.members:
                del self.clusters_[key], self.models_[key]
                for other in self.clusters_.values():
                    other.supports.discard(key)
            if cluster.partition is not None:
                self._retest(cluster.partition)
        self._unregister(leaving)
        self.same_model_.resize(self.client_ids_)
        self._reindex()

    # -- state -----------------------------------------------------------------------------

    def _extra_state(self) -> tuple[JsonDict, dict[str, np.ndarray[Any, Any]]]:
        meta: JsonDict = {
            "clusters": [c.to_json(k) for k, c in self.clusters_.items()],
            "partitions": [[p, s.stable, s.changing_rounds] for p, s in self.partitions_.items()],
            "next_cluster": self.next_cluster_,
            "next_partition": self.next_partition_,
            "metrics": dict(self._metrics),
        }
        return meta, self.same_model_.arrays("same_model_")

    def _load_extra_state(self, meta: JsonDict, arrays: Mapping[str, np.ndarray[Any, Any]]) -> None:
        self._validate()
        clusters = dict(Cluster.from_json(record) for record in meta["clusters"])
        if set(clusters) != set(self.models_):
            raise ValueError("state's clusters and models do not match")
        members = sorted(m for c in clusters.values() for m in c.members)
        if members != sorted(self.client_ids_):
            raise ValueError("state's clusters do not hold every client exactly once")
        self.clusters_ = clusters
        self.partitions_ = {
            int(p): Partition(stable=bool(s), changing_rounds=int(n))
            for p, s, n in meta["partitions"]
        }
        self.next_cluster_ = int(meta["next_cluster"])
        self.next_partition_ = int(meta["next_partition"])
        self._metrics = {str(k): float(v) for k, v in meta["metrics"].items()}
        self._plan, self._under_test = None, []
        self.same_model_ = SameModelSimilarity(self.client_ids_)
        self.same_model_.load(self.client_ids_, arrays, "same_model_")
        self._reindex()

    # -- helpers ---------------------------------------------------------------------------

    def _new_key(self) -> str:
        key = cluster_key(self.next_cluster_)
        self.next_cluster_ += 1
        return key

    def _new_singletons(self, client_ids: Sequence[str], model_factory: ModelFactory) -> None:
        theta = np.array(model_factory(0), dtype=np.float32)
        for c in client_ids:
            key = self._new_key()
            self.models_[key] = theta.copy()
            self.clusters_[key] = Cluster(members=[c])
        self._reindex()

    def _reindex(self) -> None:
        self._owner = {m: k for k, c in self.clusters_.items() for m in c.members}

    def _ordered(self, keys: Sequence[str] | set[str] | Mapping[str, Any]) -> list[str]:
        """Cluster keys by their first member's registration order."""
        return sorted(keys, key=lambda k: self._index(self.clusters_[k].members[0]))

    def _keys_in(self, p: int) -> list[str]:
        return self._ordered([k for k, c in self.clusters_.items() if c.partition == p])

    def _all_stable(self) -> bool:
        return all(p.stable for p in self.partitions_.values())

    def _support_edges(self) -> int:
        return sum(len(c.supports) for c in self.clusters_.values())

    def _enter(self, key: str) -> None:
        """A cluster trained for the first time joins a partition (notes of :mod:`.faacl`)."""
        if self.hierarchical or not self.partitions_:
            p = self.next_partition_
            self.next_partition_ += 1
            self.partitions_[p] = Partition(stable=True)
        else:
            p = next(iter(self.partitions_))
        self.clusters_[key].partition = p
        self._retest(p)

    def _retest(self, p: int) -> None:
        """Mark partition ``p`` for testing again (or drop it if empty)."""
        count = len(self._keys_in(p))
        if count == 0:
            self.partitions_.pop(p, None)
        else:
            self.partitions_[p] = Partition(stable=count <= 1)
