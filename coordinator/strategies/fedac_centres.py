"""FedAC's cluster centres: the low-rank map, the EM re-clustering and cluster-number tuning.

:class:`FedACCentres` is the base of :class:`coordinator.strategies.fedac.FedAC` that keeps
the K cluster centres Ω_k and the assignment R (Zhang, Chen, Lin, Chen & Zhao, "FedAC: an
adaptive clustered federated learning framework for heterogeneous data" (2024); the
decisions it follows are in the notes of :mod:`coordinator.strategies.fedac`):

* the PCA map M of Algorithm 2, fitted on a buffer of per-round client-model deviations,
  and LrCos, the low-rank cosine similarity it gives;
* the seeding of the initial centres and the re-clustering of Algorithm 1, lines 10–12
  (M-step, E-step on LrCos, M-step; eqs. 5, 4, 5);
* the merges and splits of Algorithm 3 (cluster-number tuning by G_c);
* the model keys of the personalised models and of the centres.

The maths on arrays is in :mod:`coordinator.strategies.fedac_clustering`; what clients
train, the global embedding Φ, the options and the saved state in
:mod:`coordinator.strategies.fedac`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from coordinator.strategies.base import Strategy
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
from faultfleet.types import Float64Array, FloatArray, IntArray

logger = logging.getLogger(__name__)


def client_key(client_id: str) -> str:
    """Key of a client's personalised model."""
    return f"client/{client_id}"


def cluster_key(number: int) -> str:
    """Key of cluster centre number ``number``."""
    return f"cluster/{number}"


class FedACCentres(Strategy):
    """FedAC's cluster centres and assignment, and how they change (module docstring).

    The hyper-parameters are :class:`~coordinator.strategies.fedac.FedAC`'s; it creates
    the state below in ``_initialize`` and documents it.
    """

    n_clusters: int
    components: int
    map_every: int
    buffer_size: int
    gc_low: float
    gc_high: float

    labels_: dict[str, str]
    trained_: set[str]
    next_cluster_: int
    seeded_round_: int | None
    tuned_round_: int
    buffer_: FloatArray
    directions_: FloatArray
    map_round_: int

    # -- Algorithm 2: the low-rank map -----------------------------------------------------

    def _accumulate(self, stacked: Float64Array) -> None:
        """Add this round's models minus their mean to the buffer (oldest rows drop out)."""
        if stacked.shape[0] < 2:
            return
        deviations = (stacked - stacked.mean(axis=0)).astype(np.float32)
        self.buffer_ = np.concatenate([self.buffer_, deviations])[-self.buffer_size :]

    def _refresh_map(self, server_round: int) -> None:
        growing = self.directions_.shape[0] < self.components
        if growing or server_round - self.map_round_ >= self.map_every:
            directions = principal_directions(self.buffer_, self.components)
            self.directions_ = directions.astype(np.float32)  # halves the checkpoint
            self.map_round_ = server_round

    def similarity(self, models: Float64Array, centres: Float64Array) -> Float64Array:
        """LrCos (Algorithm 2) of each model (n, n_params) with each centre (K, n_params)."""
        centre = self._population_mean()
        return cosine_matrix(
            low_rank_scores(models, self.directions_, centre),
            low_rank_scores(centres, self.directions_, centre),
        )

    def _population_mean(self) -> Float64Array:
        mean: Float64Array = self._client_models(self._trained_clients()).mean(axis=0)
        return mean

    # -- Algorithm 1, lines 10-12: re-clustering -------------------------------------------

    def _seed(self, server_round: int) -> None:
        """Initial centres: farthest-first among trained clients, then E- and M-steps."""
        trained = self._trained_clients()
        models = self._client_models(trained)
        picks = farthest_first(self.similarity(models, models), self.n_clusters)
        for key in self.cluster_keys():
            del self.models_[key]
        for n, pick in enumerate(sorted(picks)):
            self.models_[cluster_key(n)] = models[pick].astype(np.float32)
            self.labels_[trained[pick]] = cluster_key(n)
        self.seeded_round_ = server_round
        self.tuned_round_ = server_round
        self._recluster(update_first=False)

    def _recluster(self, *, update_first: bool = True) -> None:
        """M-step, E-step on LrCos over every client, M-step (eq. 5, eq. 4, eq. 5).

        The first M-step brings the centres up to date with this round's models, so that a
        member's leave-one-out centre is exact (see
        :func:`~.fedac_clustering.leave_one_out_similarity`). With ``update_first=False``
        the centres are seeds, not means of members: the first E-step compares with them
        as they are. Clusters left without a trained member are dropped and the steps
        repeated.
        """
        if update_first:
            self._update_centres()
        while True:
            keys = self.cluster_keys()
            position = {k: n for n, k in enumerate(keys)}
            centres = np.stack([self.models_[k].astype(np.float64) for k in keys])
            current = np.array([position.get(self.labels_[c], -1) for c in self.client_ids_])
            member = np.array([c in self.trained_ for c in self.client_ids_])
            centre = self._population_mean()
            scores = low_rank_scores(
                self._client_models(self.client_ids_), self.directions_, centre
            )
            sizes = np.bincount(current[member & (current >= 0)], minlength=len(keys))
            sim = leave_one_out_similarity(
                scores,
                low_rank_scores(centres, self.directions_, centre),
                np.where(member, current, -1) if update_first else np.full_like(current, -1),
                sizes,
            )
            labels = assign_most_similar(sim, current)
            self.labels_ = {c: keys[int(n)] for c, n in zip(self.client_ids_, labels, strict=True)}
            members = {self.labels_[c] for c in self._trained_clients()}
            empty = [k for k in keys if k not in members]
            for key in empty:
                del self.models_[key]
            self._update_centres()
            update_first = True
            if not empty:
                return

    def _update_centres(self) -> None:
        """M-step (eq. 5): each centre is the mean of its trained members' models."""
        keys, models, _, labels = self._granularity_inputs()
        means = cluster_means(models, labels, len(keys))
        for n, key in enumerate(keys):
            self.models_[key] = means[n].astype(np.float32)

    # -- Algorithm 3: cluster-number tuning ------------------------------------------------

    def _granularity_inputs(self) -> tuple[list[str], Float64Array, Float64Array, IntArray]:
        """Cluster keys, trained clients' models, centres and the clients' cluster indices."""
        trained = self._trained_clients()
        keys = self.cluster_keys()
        position = {k: n for n, k in enumerate(keys)}
        labels = np.array([position[self.labels_[c]] for c in trained], dtype=np.int64)
        centres = np.stack([self.models_[k].astype(np.float64) for k in keys])
        return keys, self._client_models(trained), centres, labels

    def _tune(self, server_round: int) -> tuple[int, int]:
        """One merge or split as Algorithm 3 asks (at most one per tuning step)."""
        self.tuned_round_ = server_round
        keys, models, centres, labels = self._granularity_inputs()
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
            self.labels_ = {c: target if k == source else k for c, k in self.labels_.items()}
            del self.models_[source]
            self._update_centres()
            return 1, 0
        self._split(server_round, keys[step.cluster])
        return 0, 1

    def _split(self, server_round: int, key: str) -> None:
        """Two new centres from a bisection of the cluster, then one re-clustering."""
        members = [c for c in self._trained_clients() if self.labels_[c] == key]
        models = self._client_models(members)
        first_side = bisect(low_rank_scores(models, self.directions_, self._population_mean()))
        if first_side.all():  # no spread in the low-rank space: bisect the full models
            first_side = bisect(models)
        logger.debug(
            "round %d: split %s, %d + %d", server_round, key, first_side.sum(), (~first_side).sum()
        )
        del self.models_[key]
        first, second = cluster_key(self.next_cluster_), cluster_key(self.next_cluster_ + 1)
        self.next_cluster_ += 2
        self.models_[first] = models[first_side].mean(axis=0).astype(np.float32)
        self.models_[second] = models[~first_side].mean(axis=0).astype(np.float32)
        self.labels_.update(
            {c: first if side else second for c, side in zip(members, first_side, strict=True)}
        )
        self.labels_ = {c: first if k == key else k for c, k in self.labels_.items()}
        self._recluster()

    # -- helpers ---------------------------------------------------------------------------

    def cluster_keys(self) -> list[str]:
        """Keys of the current cluster centres, in order of creation."""
        keys = [k for k in self.models_ if k.startswith("cluster/")]
        return sorted(keys, key=lambda k: int(k.removeprefix("cluster/")))

    def _trained_clients(self) -> list[str]:
        return [c for c in self.client_ids_ if c in self.trained_]

    def _client_models(self, clients: Sequence[str]) -> Float64Array:
        return np.stack([self.models_[client_key(c)].astype(np.float64) for c in clients])
