"""FedAC's cluster centres: the low-rank map, the EM re-clustering and cluster-number tuning.

:class:`FedACCentres` is what :class:`coordinator.strategies.fedac.FedAC` holds to keep the
K cluster centres Ω_k and the assignment R (Zhang, Chen, Lin, Chen & Zhao, "FedAC: an
adaptive clustered federated learning framework for heterogeneous data" (2024); the
decisions it follows are in the notes of :mod:`coordinator.strategies.fedac`):

* the PCA map M of Algorithm 2, fitted on a buffer of per-round client-model deviations,
  and LrCos, the low-rank cosine similarity it gives;
* the seeding of the initial centres and the re-clustering of Algorithm 1, lines 10–12
  (M-step, E-step on LrCos, M-step; eqs. 5, 4, 5);
* the merges and splits of Algorithm 3 (cluster-number tuning by G_c);
* its part of the saved state.

The centres are models like any other, so they live in the strategy's model dict under
``cluster-<n>`` (:func:`~coordinator.strategies.keys.cluster_key`), next to the personalised
models ``client/<id>`` (:func:`client_key`); the centres object is handed that dict and
reads and writes it in place. The maths on arrays is in
:mod:`coordinator.strategies.fedac_clustering`; what clients train, the global embedding Φ
and the options in :mod:`coordinator.strategies.fedac`.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from coordinator.strategies.fedac_clustering import (
    assign_most_similar,
    bisect,
    cluster_means,
    cosine_matrix,
    farthest_first,
    granularity,
    leave_one_out_similarity,
    low_rank_scores,
    plan_tuning,
    principal_directions,
)
from coordinator.strategies.keys import CLUSTER_PREFIX, cluster_key, cluster_number
from faultfleet.types import Float64Array, FloatArray, IntArray

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]

OLD_CLUSTER_PREFIX = "cluster/"
"""How centre keys were spelt before every strategy used ``cluster-<n>``; checkpoints written
then are read with their keys renamed (:func:`renamed_centre`)."""


def client_key(client_id: str) -> str:
    """Key of a client's personalised model."""
    return f"client/{client_id}"


def renamed_centre(key: str) -> str:
    """``cluster/<n>``, the old spelling of a centre's key, as ``cluster-<n>``; other keys
    unchanged."""
    if key.startswith(OLD_CLUSTER_PREFIX):
        return cluster_key(int(key.removeprefix(OLD_CLUSTER_PREFIX)))
    return key


class FedACCentres:
    """FedAC's cluster centres and assignment, and how they change (module docstring).

    Parameters
    ----------
    models : dict of str to array of shape (n_params,), float32
        The strategy's models, shared: the personalised models are read from it, the
        centres written into it.
    client_ids : tuple of str
        The federation's clients, in registration order.
    n_clusters, components, map_every, buffer_size, gc_low, gc_high
        :class:`~coordinator.strategies.fedac.FedAC`'s hyper-parameters of the same names.
    n_params : int
        Length of a flat model.

    Attributes
    ----------
    labels : dict of str to str
        The assignment R: every client's centre key; round-robin over the K initial
        centres until they are seeded.
    trained : set of str
        Clients that have answered at least once.
    next_cluster : int
        Number of the next centre key.
    seeded_round : int or None
        Round the centres were seeded in; None during the warm-up.
    tuned_round : int
        Round of the last cluster-number tuning step.
    buffer : array of shape (n, n_params), float32
        Per-round deviations of client models that the PCA map is fitted on.
    directions : array of shape (D', n_params), float32
        The PCA map M, D' <= ``components`` orthonormal rows.
    map_round : int
        Round the map was last fitted in.
    """

    def __init__(
        self,
        models: dict[str, FloatArray],
        client_ids: Sequence[str],
        *,
        n_clusters: int,
        components: int,
        map_every: int,
        buffer_size: int,
        gc_low: float,
        gc_high: float,
        n_params: int,
    ) -> None:
        self.models = models
        self.client_ids = tuple(client_ids)
        self.n_clusters = n_clusters
        self.components = components
        self.map_every = map_every
        self.buffer_size = buffer_size
        self.gc_low = gc_low
        self.gc_high = gc_high
        self.labels = {c: cluster_key(i % n_clusters) for i, c in enumerate(self.client_ids)}
        self.trained: set[str] = set()
        self.next_cluster = n_clusters
        self.seeded_round: int | None = None
        self.tuned_round = 0
        self.buffer: FloatArray = np.zeros((0, n_params), dtype=np.float32)
        self.directions: FloatArray = np.zeros((0, n_params), dtype=np.float32)
        self.map_round = 0

    # -- joining and leaving -----------------------------------------------------------------

    def join(self, client_ids: Sequence[str], centres: Mapping[str, str | None]) -> None:
        """Clients appended to the registration order, each on its centre in ``centres``
        (None: the centre of most clients, the first in order of creation on a tie)."""
        counts = Counter(self.labels.values())
        keys = self.cluster_keys()
        most = max(keys, key=lambda k: (counts.get(k, 0), -keys.index(k)))
        for client in client_ids:
            self.labels[client] = centres[client] or most
        self.client_ids = (*self.client_ids, *client_ids)

    def leave(self, leaving: set[str]) -> None:
        """Clients leaving for good: out of the assignment; their centres keep their models."""
        for client in leaving:
            del self.labels[client]
            self.trained.discard(client)
        self.client_ids = tuple(c for c in self.client_ids if c not in leaving)

    # -- Algorithm 2: the low-rank map -----------------------------------------------------

    def accumulate(self, stacked: Float64Array) -> None:
        """Add this round's models minus their mean to the buffer (oldest rows drop out)."""
        if stacked.shape[0] < 2:
            return
        deviations = (stacked - stacked.mean(axis=0)).astype(np.float32)
        self.buffer = np.concatenate([self.buffer, deviations])[-self.buffer_size :]

    def refresh_map(self, server_round: int) -> None:
        growing = self.directions.shape[0] < self.components
        if growing or server_round - self.map_round >= self.map_every:
            directions = principal_directions(self.buffer, self.components)
            self.directions = directions.astype(np.float32)  # halves the checkpoint
            self.map_round = server_round

    def similarity(self, models: Float64Array, centres: Float64Array) -> Float64Array:
        """LrCos (Algorithm 2) of each model (n, n_params) with each centre (K, n_params)."""
        centre = self._population_mean()
        return cosine_matrix(
            low_rank_scores(models, self.directions, centre),
            low_rank_scores(centres, self.directions, centre),
        )

    def _population_mean(self) -> Float64Array:
        mean: Float64Array = self.client_models(self.trained_clients()).mean(axis=0)
        return mean

    # -- Algorithm 1, lines 10-12: re-clustering -------------------------------------------

    def seed(self, server_round: int) -> None:
        """Initial centres: farthest-first among trained clients, then E- and M-steps."""
        trained = self.trained_clients()
        models = self.client_models(trained)
        picks = farthest_first(self.similarity(models, models), self.n_clusters)
        for key in self.cluster_keys():
            del self.models[key]
        for n, pick in enumerate(sorted(picks)):
            self.models[cluster_key(n)] = models[pick].astype(np.float32)
            self.labels[trained[pick]] = cluster_key(n)
        self.seeded_round = server_round
        self.tuned_round = server_round
        self.recluster(update_first=False)

    def recluster(self, *, update_first: bool = True) -> None:
        """M-step, E-step on LrCos over every client, M-step (eq. 5, eq. 4, eq. 5).

        The first M-step brings the centres up to date with this round's models, so that a
        member's leave-one-out centre is exact (see
        :func:`~.fedac_clustering.leave_one_out_similarity`). With ``update_first=False``
        the centres are seeds, not means of members: the first E-step compares with them
        as they are. Clusters left without a trained member are dropped and the steps
        repeated.
        """
        if update_first:
            self.update_centres()
        while True:
            keys = self.cluster_keys()
            position = {k: n for n, k in enumerate(keys)}
            centres = np.stack([self.models[k].astype(np.float64) for k in keys])
            current = np.array([position.get(self.labels[c], -1) for c in self.client_ids])
            member = np.array([c in self.trained for c in self.client_ids])
            centre = self._population_mean()
            scores = low_rank_scores(self.client_models(self.client_ids), self.directions, centre)
            sizes = np.bincount(current[member & (current >= 0)], minlength=len(keys))
            sim = leave_one_out_similarity(
                scores,
                low_rank_scores(centres, self.directions, centre),
                np.where(member, current, -1) if update_first else np.full_like(current, -1),
                sizes,
            )
            labels = assign_most_similar(sim, current)
            self.labels = {c: keys[int(n)] for c, n in zip(self.client_ids, labels, strict=True)}
            members = {self.labels[c] for c in self.trained_clients()}
            empty = [k for k in keys if k not in members]
            for key in empty:
                del self.models[key]
            self.update_centres()
            update_first = True
            if not empty:
                return

    def update_centres(self) -> None:
        """M-step (eq. 5): each centre is the mean of its trained members' models."""
        keys, models, _, labels = self.granularity_inputs()
        means = cluster_means(models, labels, len(keys))
        for n, key in enumerate(keys):
            self.models[key] = means[n].astype(np.float32)

    # -- Algorithm 3: cluster-number tuning ------------------------------------------------

    def granularity_inputs(self) -> tuple[list[str], Float64Array, Float64Array, IntArray]:
        """Cluster keys, trained clients' models, centres and the clients' cluster indices."""
        trained = self.trained_clients()
        keys = self.cluster_keys()
        position = {k: n for n, k in enumerate(keys)}
        labels = np.array([position[self.labels[c]] for c in trained], dtype=np.int64)
        centres = np.stack([self.models[k].astype(np.float64) for k in keys])
        return keys, self.client_models(trained), centres, labels

    def tune(self, server_round: int) -> tuple[int, int]:
        """One merge or split as Algorithm 3 asks (at most one per tuning step)."""
        self.tuned_round = server_round
        keys, models, centres, labels = self.granularity_inputs()
        g = granularity(models, labels, centres)
        distinct = [
            len({models[i].tobytes() for i in np.flatnonzero(labels == n)})
            for n in range(len(keys))
        ]
        step = plan_tuning(
            g.ratio,
            1.0 - self.similarity(centres, centres),
            [d >= 2 for d in distinct],
            self.gc_low,
            self.gc_high,
        )
        if step is None:
            return 0, 0
        if step.kind == "merge":
            source, target = keys[step.cluster], keys[step.into]
            logger.debug("round %d: merge %s into %s", server_round, source, target)
            self.labels = {c: target if k == source else k for c, k in self.labels.items()}
            del self.models[source]
            self.update_centres()
            return 1, 0
        self._split(server_round, keys[step.cluster])
        return 0, 1

    def _split(self, server_round: int, key: str) -> None:
        """Two new centres from a bisection of the cluster, then one re-clustering."""
        members = [c for c in self.trained_clients() if self.labels[c] == key]
        models = self.client_models(members)
        first_side = bisect(low_rank_scores(models, self.directions, self._population_mean()))
        if first_side.all():  # no spread in the low-rank space: bisect the full models
            first_side = bisect(models)
        logger.debug(
            "round %d: split %s, %d + %d", server_round, key, first_side.sum(), (~first_side).sum()
        )
        del self.models[key]
        first, second = cluster_key(self.next_cluster), cluster_key(self.next_cluster + 1)
        self.next_cluster += 2
        self.models[first] = models[first_side].mean(axis=0).astype(np.float32)
        self.models[second] = models[~first_side].mean(axis=0).astype(np.float32)
        self.labels.update(
            {c: first if side else second for c, side in zip(members, first_side, strict=True)}
        )
        self.labels = {c: first if k == key else k for c, k in self.labels.items()}
        self.recluster()

    # -- helpers ---------------------------------------------------------------------------

    def cluster_keys(self) -> list[str]:
        """Keys of the current cluster centres, in order of creation."""
        keys = [k for k in self.models if k.startswith(CLUSTER_PREFIX)]
        return sorted(keys, key=cluster_number)

    def trained_clients(self) -> list[str]:
        return [c for c in self.client_ids if c in self.trained]

    def client_models(self, clients: Sequence[str]) -> Float64Array:
        return np.stack([self.models[client_key(c)].astype(np.float64) for c in clients])

    # -- what the strategy reports ----------------------------------------------------------

    def client_similarity(self) -> Float64Array:
        """LrCos between the personalised models of every pair of clients that have trained,
        array of shape (m, m) in registration order; NaN for the others, on the diagonal and
        before the map has a direction."""
        m = len(self.client_ids)
        similarity = np.full((m, m), np.nan)
        trained = self.trained_clients()
        if len(trained) >= 2 and self.directions.shape[0] > 0:
            models = self.client_models(trained)
            position = {c: i for i, c in enumerate(self.client_ids)}
            rows = np.array([position[c] for c in trained], dtype=np.intp)
            similarity[np.ix_(rows, rows)] = self.similarity(models, models)
            np.fill_diagonal(similarity, np.nan)
        return similarity

    def round_metrics(self, merges: int, splits: int) -> dict[str, float]:
        """K, the round's merges and splits, the PCA map's size and, once seeded, the mean,
        least and largest finite G_c over the clusters."""
        metrics = {
            "clusters": float(len(self.cluster_keys())),
            "merges": float(merges),
            "splits": float(splits),
            "map_components": float(self.directions.shape[0]),
        }
        if self.seeded_round is not None:
            _, models, centres, labels = self.granularity_inputs()
            ratio = granularity(models, labels, centres).ratio
            finite = ratio[np.isfinite(ratio)]
            if finite.size:
                metrics["gc_mean"] = float(finite.mean())
                metrics["gc_min"] = float(finite.min())
                metrics["gc_max"] = float(finite.max())
        return metrics

    # -- state -----------------------------------------------------------------------------

    def state(self) -> tuple[JsonDict, dict[str, np.ndarray[Any, Any]]]:
        """The assignment, counters and map: (metadata, arrays) for the strategy's state."""
        meta: JsonDict = {
            "labels": [self.labels[c] for c in self.client_ids],
            "trained": [c in self.trained for c in self.client_ids],
            "next_cluster": self.next_cluster,
            "seeded_round": self.seeded_round,
            "tuned_round": self.tuned_round,
            "map_round": self.map_round,
        }
        return meta, {"buffer": self.buffer.copy(), "directions": self.directions.copy()}

    def load(self, meta: JsonDict, arrays: Mapping[str, np.ndarray[Any, Any]]) -> None:
        """Inverse of :meth:`state`; centre keys of the old spelling ``cluster/<n>`` are
        read as ``cluster-<n>`` (the models must have been renamed the same way)."""
        labels = [renamed_centre(k) for k in meta["labels"]]
        trained = meta["trained"]
        if len(labels) != len(self.client_ids) or len(trained) != len(self.client_ids):
            raise ValueError(
                f"state lists {len(labels)} cluster labels for {len(self.client_ids)} clients"
            )
        unknown = sorted(set(labels) - set(self.cluster_keys()))
        if unknown:
            raise ValueError(f"state assigns clients to missing cluster centres {unknown}")
        self.labels = dict(zip(self.client_ids, labels, strict=True))
        self.trained = {c for c, t in zip(self.client_ids, trained, strict=True) if t}
        self.next_cluster = int(meta["next_cluster"])
        seeded = meta["seeded_round"]
        self.seeded_round = None if seeded is None else int(seeded)
        self.tuned_round = int(meta["tuned_round"])
        self.map_round = int(meta["map_round"])
        self.buffer = np.array(arrays["buffer"], dtype=np.float32)
        self.directions = np.array(arrays["directions"], dtype=np.float32)
