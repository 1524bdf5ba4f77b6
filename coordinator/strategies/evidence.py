"""What a strategy has seen about how alike its clients are: the input of cluster quality.

A plant has no ground truth, so whether a clustering can be trusted must be judged from what
the strategy itself measured. Every strategy answers
:meth:`~coordinator.strategies.base.Strategy.cluster_evidence` with a
:class:`ClusterEvidence`: its clusters, a client-by-client similarity matrix in the
strategy's own measure (FLACC's update cosines of eq. 19, FedAC's low-rank cosines, …) with
unknown pairs left out (for large fleets the known pairs alone,
:class:`~coordinator.strategies.known_pairs.KnownPairs`), the weakest merge behind each
cluster where the strategy merges, and the merges of its last round.
:mod:`coordinator.strategies.quality` turns that into the figures.

:class:`SameModelSimilarity` is the evidence of strategies whose clusters train models of
their own from the start (IFCA, JGL, FAACL): updates are only comparable between clients
that trained the same model in the same round, so it keeps the latest cosine of each such
pair.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coordinator.strategies.aggregate import cosine_similarity_matrix
from coordinator.strategies.known_pairs import KnownPairs
from coordinator.strategies.pairwise import UpdateComparer
from faultfleet.tasks import FitResult
from faultfleet.types import Float64Array


@dataclass(frozen=True)
class Merge:
    """Two clusters that became one, as an agglomerative strategy records it.

    Attributes
    ----------
    round : int
        The server round whose aggregation merged them.
    first, second : tuple of str
        Client ids of the two clusters, each in registration order.
    similarity : float
        The similarity that let them merge (FLACC: α_min^cross of eq. 15, a cosine).
    threshold : float
        The bar that similarity had to clear (FLACC: α0 of eq. 16, under either rule; the
        cohesion test of its default rule compares means, see
        :mod:`coordinator.strategies.cohesion`); ``similarity - threshold`` is the margin.
    """

    round: int
    first: tuple[str, ...]
    second: tuple[str, ...]
    similarity: float
    threshold: float

    @classmethod
    def from_json(cls, saved: Mapping[str, Any]) -> Merge:
        """The merge ``dataclasses.asdict`` saved as JSON."""
        return cls(
            int(saved["round"]),
            tuple(saved["first"]),
            tuple(saved["second"]),
            float(saved["similarity"]),
            float(saved["threshold"]),
        )


@dataclass(frozen=True)
class ClusterEvidence:
    """A strategy's clusters and the similarities it measured between their clients.

    Attributes
    ----------
    client_ids : tuple of str
        Registered clients, in registration order; rows of ``similarity`` and ``labels``.
    labels : tuple of int
        Cluster of each client (:meth:`~coordinator.strategies.base.Strategy.cluster_labels`).
    similarity : array of shape (m, m), float64, KnownPairs, or None
        Similarity of every pair of clients in the strategy's measure (higher: more alike),
        NaN where the strategy never measured the pair; the diagonal is ignored. A strategy
        that knows few of the m² pairs of a large fleet gives those pairs alone
        (:class:`~coordinator.strategies.known_pairs.KnownPairs`, ``.dense()`` for the
        matrix). None when the clusters are not learned (``learned`` false) or the strategy
        exposes nothing.
    measure : str
        What ``similarity`` holds, for people reading the figures.
    learned : bool
        False for strategies whose clusters are given rather than learned (FedAvg, Local,
        Fixed): nothing about them can be wrong.
    settled : bool
        Whether the clusters are the strategy's final ones for now (False while FLACC is
        still merging before separation, or FL+HC before its clustering round).
    weakest_merges : mapping of int to float
        Per cluster label, the lowest similarity at which one of the strategy's merges built
        the cluster, in ``merge_measure``; clusters no merge built are absent.
    merge_measure : str
        What ``weakest_merges`` holds, or why the strategy has no merges to report.
    unrelated : float or None
        Similarity of two clients whose data share nothing, in this measure, where one is
        known (0 for cosines of updates of one shared model: such updates are about
        orthogonal); it stands in for the nearest cluster where a cluster has no known pair
        with any other (a single cluster). None: such a cluster gets no margin.
    merges : tuple of Merge
        Every merge of two clusters so far (:attr:`~coordinator.strategies.base.Strategy.
        merges`); :func:`~coordinator.strategies.quality.assess` scores those of the round
        it is asked about.
    """

    client_ids: tuple[str, ...]
    labels: tuple[int, ...]
    similarity: Float64Array | KnownPairs | None
    measure: str
    learned: bool = True
    settled: bool = True
    weakest_merges: Mapping[int, float] = field(default_factory=dict)
    merge_measure: str = "n/a: this strategy does not build clusters by merging"
    unrelated: float | None = None
    merges: tuple[Merge, ...] = ()

    def similarity_matrix(self) -> Float64Array | None:
        """``similarity`` as an m × m matrix (NaN: unknown) whichever form it has; None when
        there is none. Known pairs of a large fleet make a large matrix (m² floats)."""
        if isinstance(self.similarity, KnownPairs):
            return self.similarity.dense()
        return self.similarity

    def __post_init__(self) -> None:
        m = len(self.client_ids)
        if len(self.labels) != m:
            raise ValueError(f"evidence has {len(self.labels)} labels for {m} clients")
        if self.similarity is not None and self.similarity.shape != (m, m):
            raise ValueError(
                f"evidence has a similarity matrix of shape {self.similarity.shape} for "
                f"{m} clients; expected ({m}, {m})"
            )


def record_pairs(matrix: Float64Array, rows: Sequence[int], block: Float64Array) -> None:
    """Write ``block`` (k, k) into ``matrix`` at ``rows`` × ``rows``, the diagonal left NaN."""
    index = np.asarray(rows, dtype=np.intp)
    values = np.array(block, dtype=np.float64)
    np.fill_diagonal(values, np.nan)
    matrix[np.ix_(index, index)] = values


def load_matrix(arrays: Mapping[str, object], key: str, m: int) -> Float64Array:
    """The (m, m) matrix saved under ``key``; all NaN for a state saved before it existed."""
    saved = arrays.get(key)
    matrix = np.full((m, m), np.nan) if saved is None else np.array(saved, dtype=np.float64)
    if matrix.shape != (m, m):
        raise ValueError(f"state holds a {matrix.shape} similarity matrix for {m} clients")
    return matrix


def known_or_nan(matrix: Float64Array, unknown_at_most: float) -> Float64Array:
    """A copy of ``matrix`` with NaN wherever a value is <= ``unknown_at_most`` (FLACC's −1)."""
    return np.where(matrix > unknown_at_most, matrix, np.nan)


SAME_MODEL_MEMORY = 10
"""Rounds a same-model cosine is kept as evidence (FLACC's memory T of §VI): an older one
was measured on a model that has moved on, often before the clusters formed."""


class SameModelSimilarity:
    """Cosine similarity of two clients' updates of the same model in the same round.

    Parameters
    ----------
    client_ids : sequence of str
        Registered clients, in registration order.
    comparer : UpdateComparer, optional
        Takes the cosines (exact or of sketches, :mod:`.pairwise`); exact when None.

    Attributes
    ----------
    matrix_ : array of shape (m, m), float64
        The latest such cosine per pair, NaN for pairs never seen together.
    rounds_ : array of shape (m, m), int64
        The round each was measured in (0: never).
    last_round_ : int
        The latest round recorded.
    """

    def __init__(self, client_ids: Sequence[str], comparer: UpdateComparer | None = None) -> None:
        self.comparer = comparer
        self.client_ids_ = tuple(client_ids)
        m = len(self.client_ids_)
        self.matrix_ = np.full((m, m), np.nan)
        self.rounds_ = np.zeros((m, m), dtype=np.int64)
        self.last_round_ = 0

    def record(self, server_round: int, results: Sequence[FitResult]) -> None:
        """Take in a round's updates: pairs of clients that trained the same model."""
        index = {c: i for i, c in enumerate(self.client_ids_)}
        by_model: dict[str, list[FitResult]] = {}
        for r in results:
            by_model.setdefault(r.model_key, []).append(r)
        for members in by_model.values():
            if len(members) >= 2:
                rows = [index[r.client_id] for r in members]
                updates = [r.delta for r in members]
                cosines = (
                    cosine_similarity_matrix(updates)
                    if self.comparer is None
                    else self.comparer.matrix(updates)
                )
                record_pairs(self.matrix_, rows, cosines)
                self.rounds_[np.ix_(rows, rows)] = server_round
        self.last_round_ = server_round

    def comparer_state(self) -> dict[str, int | str] | None:
        """The comparer's :meth:`~.pairwise.UpdateComparer.state`, to save (None: exact)."""
        return None if self.comparer is None else self.comparer.state()

    def current(self) -> Float64Array:
        """The cosines measured in the last :data:`SAME_MODEL_MEMORY` rounds (others NaN)."""
        recent = self.last_round_ - self.rounds_ < SAME_MODEL_MEMORY
        return np.where(recent, self.matrix_, np.nan)

    def resize(self, client_ids: Sequence[str]) -> None:
        """Follow a change of the registered clients: kept clients keep their pairs."""
        old = {c: i for i, c in enumerate(self.client_ids_)}
        new_ids = tuple(client_ids)
        m = len(new_ids)
        matrix, rounds = np.full((m, m), np.nan), np.zeros((m, m), dtype=np.int64)
        kept = [(i, old[c]) for i, c in enumerate(new_ids) if c in old]
        if kept:
            new_rows = np.array([i for i, _ in kept], dtype=np.intp)
            old_rows = np.array([j for _, j in kept], dtype=np.intp)
            matrix[np.ix_(new_rows, new_rows)] = self.matrix_[np.ix_(old_rows, old_rows)]
            rounds[np.ix_(new_rows, new_rows)] = self.rounds_[np.ix_(old_rows, old_rows)]
        self.client_ids_, self.matrix_, self.rounds_ = new_ids, matrix, rounds

    def arrays(self, prefix: str) -> dict[str, np.ndarray[Any, Any]]:
        """The state to save, keyed ``<prefix>similarity``, ``…rounds``, ``…last_round``."""
        return {
            f"{prefix}similarity": self.matrix_.copy(),
            f"{prefix}rounds": self.rounds_.copy(),
            f"{prefix}last_round": np.array(self.last_round_, dtype=np.int64),
        }

    def load(self, client_ids: Sequence[str], arrays: Mapping[str, object], prefix: str) -> None:
        """Restore what :meth:`arrays` saved; an older state without it starts empty."""
        self.client_ids_ = tuple(client_ids)
        m = len(self.client_ids_)
        self.matrix_ = load_matrix(arrays, f"{prefix}similarity", m)
        saved = arrays.get(f"{prefix}rounds")
        rounds = np.zeros((m, m)) if saved is None else np.asarray(saved)
        self.rounds_ = np.array(rounds, dtype=np.int64)
        last = arrays.get(f"{prefix}last_round")
        self.last_round_ = int(np.asarray(last)) if last is not None else 0

    def evidence(
        self, labels: Sequence[int], *, settled: bool = True, merge_measure: str
    ) -> ClusterEvidence:
        """The evidence of a strategy whose clusters train models of their own."""
        return ClusterEvidence(
            client_ids=self.client_ids_,
            labels=tuple(labels),
            similarity=self.current(),
            measure="cosine similarity of weight updates of the same model in the same round "
            f"(latest per pair, last {SAME_MODEL_MEMORY} rounds)",
            settled=settled,
            merge_measure=merge_measure,
        )
