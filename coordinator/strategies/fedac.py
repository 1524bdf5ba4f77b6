"""FedAC: personalised models, a global embedding and adaptively many cluster centres.

Zhang, Chen, Lin, Chen & Zhao, "FedAC: an adaptive clustered federated learning framework
for heterogeneous data" (2024), eq. 3 and Algorithms 1–3. The server holds

* one personalised model ω_i per client (``"client/<id>"``), which the client trains and
  predicts with;
* K cluster centres Ω_k (``"cluster-<n>"``; the K placeholders of the warm-up are
  replaced by the seeded centres under the same keys ``cluster-0`` … ``cluster-<K−1>``,
  and from then on a key is never used twice, so a centre made by a merge or split never
  takes the name of an older one);
* the global embedding Φ (``"embedding"``, a full-length vector of which only the
  embedding part φ — every layer but the last linear one — is ever used).

Each round (Algorithm 1): the sampled clients train ω_i with the proximal terms of
LocalUpdate line 4 — μ·(ω − Ω_k*) over the whole model and λ·(φ − Φ) over the embedding
(:class:`~faultfleet.tasks.ProximalTerm`); the server sets Φ to the mean of the new models
(line 9), computes the low-rank cosine similarity of every client with every centre
(Algorithm 2, :mod:`.fedac_clustering`), assigns every client to its most similar centre
(E-step, eq. 4), recomputes the centres as their members' means (M-step, eq. 5) and, every
``tune_every`` rounds, merges or splits one cluster by its granularity G_c (Algorithm 3).
The map, the centres and their tuning are kept by the
:class:`~.fedac_centres.FedACCentres` the strategy holds (:attr:`FedAC.centres_`).

Decisions on what the paper leaves open (``docs/federated.md`` gives the measurements):

- Φ is the plain mean of the sampled clients' models (papers/README.md: eq. 3's sum is an
  average), unweighted like eq. 5 and eq. 3's "macroscopic view".
- The PCA map M (Algorithm 2, UpdateMap) is fitted on a buffer of client models accumulated
  over rounds: each round with at least two answers adds its models minus that round's mean
  (``buffer_size`` rows kept, oldest dropped). A round of |S| models gives at most |S| − 1
  directions; accumulating deviations reaches D = ``components`` after a few rounds, and
  centring each round on its own mean keeps the directions about how clients *differ*
  rather than how training moves them all over time. The map is refitted after every round
  while it has fewer than D directions, then every ``map_every`` rounds.
- LrCos is the cosine of M(ω − c) and M(Ω − c) with c the mean of the current models of all
  clients that have trained. Without centring every model is the shared initialisation plus
  a small update, so all cosines are close to 1 and nothing is discriminated.
- Eq. 4's argmin of a similarity is read as the *most* similar centre. Before the E-step
  the centres are brought up to date with this round's models (an M-step), and a client is
  compared with its own centre *without itself* (the mean of the other members): a centre
  that contains a client always looks like it, which kept clients in wrong clusters of a
  few members. Ties keep the current cluster. Lone members keep their own centre; the tuning
  merges them (their G_c is 0).
- Clustering starts after ``warmup`` rounds of training with the λ term only (no centre
  exists yet): the K initial centres are then seeded by farthest-first traversal on LrCos
  among the clients that have trained (the paper does not say how Ω^0 is initialised; K
  copies of one model would tie every similarity). Before that, clients are labelled
  round-robin over the K initial clusters.
- Clients that have never trained still hold the initial model. They are assigned by the
  E-step like the others but do not enter the M-step or G_c: their model says nothing about
  their data. A cluster left without trained members is dropped.
- G_c uses squared distances between full weight vectors, as Algorithm 3 writes; with K = 1
  there is no inter-cluster distance and the lone cluster splits (G_c = ∞). A tuning step
  makes at most one change, merges first: the cluster of smallest G_c below ``gc_low``
  merges into the cluster whose centre is most similar in LrCos (in Euclidean distance the
  centre of a lone client is noisy and looked closer to a big cluster of another group than
  to its own group's other pieces); otherwise the cluster of largest G_c above ``gc_high``
  (with at least two distinct members) splits: its members are bisected along their first
  principal direction in the low-rank space, each half's mean is a new centre, and one
  re-clustering (M-, E- and M-step over every client) follows, the paper's "initialising
  two new centres and conducting one re-clustering iteration".
- A round in which no client answered changes nothing.
- Checkpoints written when centres were keyed ``cluster/<n>`` load with their keys read as
  ``cluster-<n>``, the one spelling of cluster keys (:mod:`.keys`).
- A client joining later starts its personalised model from a copy of the model it was
  assigned (another client's) and joins that client's centre; without one, from the centre
  of most clients. It is not served that copy (:meth:`FedAC.model_ready`) before it trained.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from coordinator.strategies.base import JsonDict, Strategy
from coordinator.strategies.evidence import ClusterEvidence
from coordinator.strategies.fedac_centres import FedACCentres, client_key, renamed_centre
from coordinator.strategies.fedac_parameters import PARAMETERS
from coordinator.strategies.keys import cluster_key
from coordinator.strategies.parameters import Param
from faultfleet.errors import UsageError
from faultfleet.tasks import Failure, FitInstruction, FitResult, ProximalTerm
from faultfleet.types import FloatArray, ModelFactory

EMBEDDING = "embedding"
"""Key of the global embedding Φ."""


class FedAC(Strategy):
    """Personalised models regularised towards adaptive cluster centres and a global embedding.

    Hyper-parameters: the :attr:`parameters` table (``faultfleet sim --list-options fedac``).

    Attributes
    ----------
    centres_ : FedACCentres
        The centres, the assignment R and the PCA map; ``labels_``, ``trained_``,
        ``next_cluster_``, ``seeded_round_``, ``tuned_round_``, ``buffer_``, ``directions_``
        and ``map_round_`` read its attributes of the same names.
    """

    name: ClassVar[str] = "fedac"
    parameters: ClassVar[tuple[Param, ...]] = PARAMETERS

    def __init__(
        self,
        *,
        fraction: float = 0.25,
        n_clusters: int = 2,
        mu: float = 0.03,
        lam: float = 0.01,
        components: int = 50,
        map_every: int = 10,
        buffer_size: int = 100,
        gc_low: float = 0.2,
        gc_high: float = 0.8,
        tune_every: int = 3,
        warmup: int = 3,
    ) -> None:
        super().__init__(fraction=fraction)
        self.n_clusters = n_clusters
        self.mu = mu
        self.lam = lam
        self.components = components
        self.map_every = map_every
        self.buffer_size = buffer_size
        self.gc_low = gc_low
        self.gc_high = gc_high
        self.tune_every = tune_every
        self.warmup = warmup

    # -- lifecycle -------------------------------------------------------------------------

    def _check_parameter_rules(self) -> None:
        if self.buffer_size <= self.components:
            raise UsageError(
                f"fedac: buffer_size must be > components to fit {self.components} directions, "
                f"got {self.buffer_size}; use at least {2 * self.components}"
            )
        if not self.gc_low < self.gc_high:
            raise UsageError(
                f"fedac: gc_low must be < gc_high, got gc_low={self.gc_low!r}, "
                f"gc_high={self.gc_high!r}; the paper uses 0.2 and 0.8"
            )

    def _initialize(self, model_factory: ModelFactory) -> None:
        initial = np.array(model_factory(0), dtype=np.float32)
        for c in self.client_ids_:
            self.models_[client_key(c)] = initial.copy()
        for n in range(self.n_clusters):
            self.models_[cluster_key(n)] = initial.copy()
        self.models_[EMBEDDING] = initial.copy()
        self.centres_ = self._new_centres()
        self.metrics_: dict[str, float] = {}
        self.joined_: set[str] = set()

    def _join(
        self, joining: list[str], keys: Mapping[str, str | None], model_factory: ModelFactory
    ) -> None:
        owner = {client_key(c): c for c in self.centres_.client_ids}
        centres = {c: None if k is None else self.labels_[owner[k]] for c, k in keys.items()}
        self.centres_.join(joining, centres)
        for client in joining:
            start = self.models_[keys[client] or self.labels_[client]]
            self.models_[client_key(client)] = np.array(start, dtype=np.float32)
        self.joined_ |= set(joining)

    def _leave(self, leaving: set[str], kept: list[int]) -> None:
        self.centres_.leave(leaving)
        for client in leaving:
            del self.models_[client_key(client)]
        self.joined_ -= leaving

    def model_ready(self, client_id: str) -> bool:
        """False for a client that joined and has not trained its own model yet."""
        return client_id not in self.joined_

    def _new_centres(self) -> FedACCentres:
        """The centres' keeper, sharing ``models_`` and holding this strategy's settings."""
        return FedACCentres(
            self.models_,
            self.client_ids_,
            n_clusters=self.n_clusters,
            components=self.components,
            map_every=self.map_every,
            buffer_size=self.buffer_size,
            gc_low=self.gc_low,
            gc_high=self.gc_high,
            n_params=self._model_size(),
        )

    # the centres' state, under the names it had on the strategy
    @property
    def labels_(self) -> dict[str, str]:
        return self.centres_.labels

    @property
    def trained_(self) -> set[str]:
        return self.centres_.trained

    @property
    def next_cluster_(self) -> int:
        return self.centres_.next_cluster

    @property
    def seeded_round_(self) -> int | None:
        return self.centres_.seeded_round

    @property
    def tuned_round_(self) -> int:
        return self.centres_.tuned_round

    @property
    def buffer_(self) -> FloatArray:
        return self.centres_.buffer

    @property
    def directions_(self) -> FloatArray:
        return self.centres_.directions

    @property
    def map_round_(self) -> int:
        return self.centres_.map_round

    def cluster_keys(self) -> list[str]:
        """Keys of the current cluster centres, in order of creation."""
        return self.centres_.cluster_keys()

    # -- training rounds -------------------------------------------------------------------

    def configure_round(
        self, server_round: int, available: Sequence[str], rng: np.random.Generator
    ) -> list[FitInstruction]:
        """Sampled clients train their own model with the μ and λ terms (Algorithm 1, l. 5)."""
        return [
            FitInstruction(c, self.fit_models(server_round, c), self.proximal_terms(c))
            for c in self.sample_clients(available, rng)
        ]

    def fit_models(self, server_round: int, client_id: str) -> tuple[str, ...]:
        return (client_key(client_id),)

    def proximal_terms(self, client_id: str) -> tuple[ProximalTerm, ...]:
        """LocalUpdate line 4: μ towards the client's centre (once seeded), λ towards Φ."""
        terms = []
        if self.centres_.seeded_round is not None and self.mu > 0:
            terms.append(ProximalTerm(self.labels_[client_id], float(self.mu), "all"))
        if self.lam > 0:
            terms.append(ProximalTerm(EMBEDDING, float(self.lam), "embedding"))
        return tuple(terms)

    def _aggregate(
        self, server_round: int, results: Sequence[FitResult], failures: Sequence[Failure]
    ) -> None:
        for r in results:
            if r.model_key != client_key(r.client_id):
                raise ValueError(
                    f"client {r.client_id!r} trained {r.model_key!r}, expected its own model "
                    f"{client_key(r.client_id)!r}"
                )
        self.metrics_ = {}
        if not results:
            return
        centres = self.centres_
        for r in results:
            self.models_[client_key(r.client_id)] = np.array(r.weights, dtype=np.float32)
            centres.trained.add(r.client_id)
            self.joined_.discard(r.client_id)
        stacked = np.stack([np.asarray(r.weights, dtype=np.float64) for r in results])
        self.models_[EMBEDDING] = stacked.mean(axis=0).astype(np.float32)  # line 9
        centres.accumulate(stacked)
        centres.refresh_map(server_round)
        merges = splits = 0
        if centres.seeded_round is None:
            if server_round >= self.warmup:
                centres.seed(server_round)
        else:
            centres.recluster()  # lines 10-12
            if server_round - centres.tuned_round >= self.tune_every:
                merges, splits = centres.tune(server_round)  # line 13
        self.metrics_ = centres.round_metrics(merges, splits)

    # -- evaluation and clustering -----------------------------------------------------------

    def model_key_for(self, client_id: str) -> str:
        """Every client predicts with its personalised model."""
        if client_id not in self.client_index_:
            raise KeyError(f"unknown client {client_id!r}")
        return client_key(client_id)

    def cluster_labels(self) -> dict[str, int]:
        """The assignment R (not the serving model, which is personal), clusters numbered in
        order of creation."""
        index = {k: n for n, k in enumerate(self.cluster_keys())}
        return {c: index[self.labels_[c]] for c in self.client_ids_}

    def cluster_evidence(self) -> ClusterEvidence:
        """LrCos (Algorithm 2) between the personalised models of the clients that have
        trained; NaN for the others and before the map has a direction."""
        labels = self.cluster_labels()
        return ClusterEvidence(
            client_ids=self.client_ids_,
            labels=tuple(labels[c] for c in self.client_ids_),
            similarity=self.centres_.client_similarity(),
            measure="low-rank cosine similarity of the personalised models (FedAC "
            "Algorithm 2, LrCos)",
            settled=self.seeded_round_ is not None,
            merge_measure="n/a: FedAC merges clusters by granularity G_c (Algorithm 3), "
            "not by a similarity",
        )

    def round_metrics(self) -> dict[str, float]:
        """K, G_c statistics, merges and splits of the last round, PCA map size."""
        return dict(self.metrics_)

    # -- state -----------------------------------------------------------------------------

    def _extra_state(self) -> tuple[JsonDict, dict[str, np.ndarray[Any, Any]]]:
        meta, arrays = self.centres_.state()
        meta["metrics"] = self.metrics_
        meta["joined"] = sorted(self.joined_)
        return meta, arrays

    def _load_extra_state(self, meta: JsonDict, arrays: Mapping[str, np.ndarray[Any, Any]]) -> None:
        # a checkpoint of the time centres were keyed cluster/<n>: the same models, renamed
        self.models_ = {renamed_centre(k): v for k, v in self.models_.items()}
        self.centres_ = self._new_centres()
        self.centres_.load(meta, arrays)
        self.metrics_ = {str(k): float(v) for k, v in meta["metrics"].items()}
        self.joined_ = set(meta.get("joined", []))
