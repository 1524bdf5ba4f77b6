"""FAACL's cluster bookkeeping: clusters, partitions, keys, membership and saved state.

:class:`FAACLClusters` is what :class:`coordinator.strategies.faacl.FAACL` holds to keep its
clustering ("FAACL: federated adaptive asymmetric clustered learning", anonymous ICLR
submission; ``shared/papers/faacl.txt``; the decisions it follows are in the notes of
:mod:`coordinator.strategies.faacl`):

* the clusters by model key (§2, components 1–3) and the partitions of hierarchical FAACL,
  with the keys ``cluster-<n>`` (:func:`~coordinator.strategies.keys.cluster_key`) handed
  out once each;
* Algorithm 2's singleton clusters on one common θ, at the start and for joining devices,
  and the removal of leaving devices (§4.4);
* a cluster's entry into a partition once trained, and the re-test of a partition whose
  clusters changed;
* its part of the saved state, so a resumed run equals an uninterrupted one.

A cluster's model lives in the strategy's model dict under the cluster's key; the
bookkeeping is handed that dict and adds and deletes models in place. The support tests,
merges and pairing of the probe rounds are in :mod:`coordinator.strategies.faacl_probing`;
the pure pieces in :mod:`coordinator.strategies.faacl_support`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coordinator.strategies.faacl_support import Cluster, Partition
from coordinator.strategies.keys import cluster_key
from faultfleet.types import FloatArray

JsonDict = dict[str, Any]


class FAACLClusters:
    """FAACL's clustering state and its bookkeeping (see the module docstring).

    Parameters
    ----------
    models : dict of str to array of shape (n_params,), float32
        The strategy's models, shared: a new cluster's model is added to it, a deleted
        cluster's removed.
    rank : callable
        A client's position in the registration order (the strategy's, which changes as
        devices join and leave).
    hierarchical : bool
        Hierarchical FAACL (a new partition per trained cluster) or flat (one partition).

    Attributes
    ----------
    clusters : dict of str to Cluster
        Clusters by model key.
    partitions : dict of int to Partition
        Partitions by id; every trained cluster is in one.
    next_cluster : int
        Number of the next cluster key.
    next_partition : int
        Id of the next partition.
    """

    def __init__(
        self, models: dict[str, FloatArray], rank: Callable[[str], int], *, hierarchical: bool
    ) -> None:
        self.models = models
        self.rank = rank
        self.hierarchical = hierarchical
        self.clusters: dict[str, Cluster] = {}
        self.partitions: dict[int, Partition] = {}
        self.next_cluster = 0
        self.next_partition = 0
        self._owner: dict[str, str] = {}

    # -- membership ------------------------------------------------------------------------

    def new_singletons(self, client_ids: Sequence[str], theta: FloatArray) -> None:
        """A singleton cluster on a copy of ``theta`` for each device (Algorithm 2, §4.4)."""
        for c in client_ids:
            key = self.new_key()
            self.models[key] = theta.copy()
            self.clusters[key] = Cluster(members=[c])
        self.reindex()

    def remove(self, leaving: set[str]) -> None:
        """Devices leaving: out of their cluster; an emptied cluster is deleted with its
        model and dropped from every C.sup, and its partition is tested again (§4.4)."""
        touched: set[int] = set()
        for key in list(self.clusters):
            cluster = self.clusters[key]
            if not leaving & set(cluster.members):
                continue
            cluster.members = [c for c in cluster.members if c not in leaving]
            if not cluster.members:
                del self.clusters[key], self.models[key]
                for other in self.clusters.values():
                    other.supports.discard(key)
            if cluster.partition is not None:
                touched.add(cluster.partition)
        for p in sorted(touched):  # once no cluster holds a leaving device
            self.retest(p)

    def owner(self, client_id: str) -> str:
        """Key of the cluster ``client_id`` is a member of; a KeyError for an unknown one."""
        if client_id not in self._owner:
            raise KeyError(f"unknown client {client_id!r}")
        return self._owner[client_id]

    def new_key(self) -> str:
        """A cluster key never handed out before."""
        key = cluster_key(self.next_cluster)
        self.next_cluster += 1
        return key

    def reindex(self) -> None:
        """Recompute which cluster each device is in, after the clusters changed."""
        self._owner = {m: k for k, c in self.clusters.items() for m in c.members}

    # -- partitions ------------------------------------------------------------------------

    def enter(self, key: str) -> None:
        """A cluster trained for the first time joins a partition (notes of :mod:`.faacl`)."""
        if self.hierarchical or not self.partitions:
            p = self.next_partition
            self.next_partition += 1
            self.partitions[p] = Partition(stable=True)
        else:
            p = next(iter(self.partitions))
        self.clusters[key].partition = p
        self.retest(p)

    def retest(self, p: int) -> None:
        """Mark partition ``p`` for testing again (or drop it if empty)."""
        count = len(self.keys_in(p))
        if count == 0:
            self.partitions.pop(p, None)
        else:
            self.partitions[p] = Partition(stable=count <= 1)

    def ordered(self, keys: Sequence[str] | set[str] | Mapping[str, Any]) -> list[str]:
        """Cluster keys by their first member's registration order."""
        return sorted(keys, key=lambda k: self.rank(self.clusters[k].members[0]))

    def keys_in(self, p: int) -> list[str]:
        """Keys of the clusters of partition ``p``, in cluster order."""
        return self.ordered([k for k, c in self.clusters.items() if c.partition == p])

    def all_stable(self) -> bool:
        """Whether flat FAACL has converged on every partition."""
        return all(p.stable for p in self.partitions.values())

    def support_edges(self) -> int:
        """Number of (cluster, supporter) pairs."""
        return sum(len(c.supports) for c in self.clusters.values())

    # -- state -----------------------------------------------------------------------------

    def state(self) -> JsonDict:
        """Clusters, partitions and counters, JSON-ready."""
        return {
            "clusters": [c.to_json(k) for k, c in self.clusters.items()],
            "partitions": [[p, s.stable, s.changing_rounds] for p, s in self.partitions.items()],
            "next_cluster": self.next_cluster,
            "next_partition": self.next_partition,
        }

    def load(self, meta: JsonDict, client_ids: Sequence[str]) -> None:
        """Inverse of :meth:`state`, checked against the models and the clients."""
        clusters = dict(Cluster.from_json(record) for record in meta["clusters"])
        if set(clusters) != set(self.models):
            raise ValueError("state's clusters and models do not match")
        members = sorted(m for c in clusters.values() for m in c.members)
        if members != sorted(client_ids):
            raise ValueError("state's clusters do not hold every client exactly once")
        self.clusters = clusters
        self.partitions = {
            int(p): Partition(stable=bool(s), changing_rounds=int(n))
            for p, s, n in meta["partitions"]
        }
        self.next_cluster = int(meta["next_cluster"])
        self.next_partition = int(meta["next_partition"])
        self.reindex()
