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
their own from the start (IFCA, FAACL): updates are only comparable between clients that
trained the same model in the same round, so it keeps the latest cosine of each such pair.
Both it and the evidence JGL, FL+HC and CFL keep under sketches
(:mod:`.pair_evidence`) are :class:`RecentPairs`: the latest similarity of sampled pairs,
linear in the fleet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

from coordinator.strategies.aggregate import cosine_similarity_matrix
from coordinator.strategies.known_pairs import KnownPairs
from coordinator.strategies.pair_memory import PairMemory, sample_pairs
from coordinator.strategies.pairwise import UpdateComparer, sketch_pair_cosines
from coordinator.strategies.streaming import StreamedUpdate, unit_sketches
from faultfleet.tasks import FitResult
from faultfleet.types import Float64Array, IntArray


class _Answer(Protocol):
    """What the same-model evidence reads of an answer besides its cosines."""

    @property
    def client_id(self) -> str: ...

    @property
    def model_key(self) -> str: ...


_U = TypeVar("_U", bound=_Answer)


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


_PAIR_ARRAYS = ("first", "second", "value", "measured")

SAME_MODEL_MEMORY = 10
"""Rounds a same-model cosine is kept as evidence (FLACC's memory T of §VI): an older one
was measured on a model that has moved on, often before the clusters formed."""

SAME_MODEL_PARTNERS = 32
"""Partners of each update when more than ``SAME_MODEL_PARTNERS + 1`` clients trained one
model in one round (fewer: every pair), as FLACC samples its pairs under sketches
(:func:`~.pair_memory.sample_pairs`): the pairs kept grow with the clients, not with their
square."""


class RecentPairs:
    """The latest similarity of pairs of clients measured together, for large fleets.

    Kept as a list of pairs (:class:`~.pair_memory.PairMemory`, 16 bytes a pair), not an
    m × m matrix (800 MB at 10,000 clients in float64, in memory and in every saved
    state): each :meth:`record_rows` measures every pair of up to ``partners + 1`` clients, or
    each client with ``partners`` others chosen at random (:func:`~.pair_memory.
    sample_pairs`, seeded by the round), and a pair not measured again within ``memory``
    rounds is forgotten.

    Parameters
    ----------
    client_ids : sequence of str
        Registered clients, in registration order.
    partners : int
        :data:`SAME_MODEL_PARTNERS`.
    memory : int
        :data:`SAME_MODEL_MEMORY`.

    Attributes
    ----------
    pairs_ : PairMemory
        The latest similarity of each pair measured in the last ``memory`` rounds, with its
        round.
    last_round_ : int
        The latest round recorded.
    """

    def __init__(
        self,
        client_ids: Sequence[str],
        *,
        partners: int = SAME_MODEL_PARTNERS,
        memory: int = SAME_MODEL_MEMORY,
    ) -> None:
        self.partners = partners
        self.memory = memory
        self.client_ids_ = tuple(client_ids)
        self.pairs_ = PairMemory.empty(len(self.client_ids_))
        self.last_round_ = 0

    def record_rows(
        self,
        server_round: int,
        rows: Sequence[int],
        values: Callable[[IntArray, IntArray], Float64Array],
        *,
        salt: int = 0,
    ) -> None:
        """Take in the similarities of one round's clients at the distinct registration
        indices ``rows``: ``values(a, b)`` gives those of the pairs of positions
        ``(a[q], b[q])`` sampled among them (seeded by the round and ``salt``)."""
        index = np.asarray(rows, dtype=np.int64)
        a, b = sample_pairs(len(index), self.partners, [server_round, salt])
        if len(a):
            low, high = np.minimum(index[a], index[b]), np.maximum(index[a], index[b])
            self.pairs_.record(server_round, low, high, values(a, b))
        self._forget(server_round)

    def _forget(self, server_round: int) -> None:
        self.pairs_.forget(server_round, self.memory - 1)
        self.last_round_ = server_round

    def current(self) -> KnownPairs:
        """The similarities measured in the last ``memory`` rounds."""
        pairs = self.pairs_
        recent = self.last_round_ - pairs.measured < self.memory
        return KnownPairs.from_arrays(
            pairs.n_clients, pairs.first[recent], pairs.second[recent], pairs.value[recent]
        )

    def resize(self, client_ids: Sequence[str]) -> None:
        """Follow a change of the registered clients: kept clients keep their pairs."""
        new_ids = tuple(client_ids)
        new = {c: i for i, c in enumerate(new_ids)}
        position = np.array([new.get(c, -1) for c in self.client_ids_], dtype=np.int64)
        self.pairs_.renumber(position, len(new_ids))
        self.client_ids_ = new_ids

    def arrays(self, prefix: str) -> dict[str, np.ndarray[Any, Any]]:
        """The state to save, keyed ``<prefix>pairs_first``, ``…pairs_second``,
        ``…pairs_value``, ``…pairs_measured`` and ``…last_round``."""
        saved = {f"{prefix}pairs_{n}": getattr(self.pairs_, n).copy() for n in _PAIR_ARRAYS}
        saved[f"{prefix}last_round"] = np.array(self.last_round_, dtype=np.int64)
        return saved

    def load(self, client_ids: Sequence[str], arrays: Mapping[str, object], prefix: str) -> None:
        """Restore what :meth:`arrays` saved. A state saved as matrices (``<prefix>similarity``
        and ``…rounds``, m × m) is read into pairs; one without either starts empty.

        Raises
        ------
        ValueError
            Saved pairs of different lengths or naming clients beyond ``client_ids``.
        """
        self.client_ids_ = tuple(client_ids)
        m = len(self.client_ids_)
        last = arrays.get(f"{prefix}last_round")
        self.last_round_ = int(np.asarray(last)) if last is not None else 0
        self.pairs_ = PairMemory.empty(m)
        if f"{prefix}pairs_first" in arrays:
            first, second, value, measured = (
                np.asarray(arrays[f"{prefix}pairs_{n}"]) for n in _PAIR_ARRAYS
            )
            if not len(first) == len(second) == len(value) == len(measured):
                raise ValueError(f"saved {prefix}pairs_* arrays differ in length")
            if len(first) and (int(np.max(second)) >= m or int(np.min(first)) < 0):
                raise ValueError(f"saved {prefix}pairs_* name clients beyond the {m} registered")
        elif f"{prefix}similarity" in arrays:  # saved as m × m matrices
            matrix = load_matrix(arrays, f"{prefix}similarity", m)
            saved_rounds = arrays.get(f"{prefix}rounds")
            rounds = np.zeros((m, m)) if saved_rounds is None else np.asarray(saved_rounds)
            first, second = np.triu_indices(m, k=1)
            known = ~np.isnan(matrix[first, second])
            first, second = first[known], second[known]
            value, measured = matrix[first, second], rounds[first, second]
        else:
            return
        self.pairs_ = PairMemory(
            m,
            first.astype(np.int32),
            second.astype(np.int32),
            value.astype(np.float32),
            measured.astype(np.int32),
        )


class SameModelSimilarity(RecentPairs):
    """Cosine similarity of two clients' updates of the same model in the same round.

    :class:`RecentPairs` of the pairs of each model's updates: a matrix of the cosines and
    one of their rounds took 1.6 GB at 10,000 clients, in memory and in every saved state.

    Parameters
    ----------
    client_ids : sequence of str
        Registered clients, in registration order.
    comparer : UpdateComparer, optional
        Takes the cosines (exact or of sketches, :mod:`.pairwise`); exact when None.
    partners : int
        :data:`SAME_MODEL_PARTNERS`.

    Attributes
    ----------
    pairs_ : PairMemory
        The latest cosine of each pair measured in the last :data:`SAME_MODEL_MEMORY`
        rounds, with its round.
    last_round_ : int
        The latest round recorded.
    """

    def __init__(
        self,
        client_ids: Sequence[str],
        comparer: UpdateComparer | None = None,
        *,
        partners: int = SAME_MODEL_PARTNERS,
    ) -> None:
        super().__init__(client_ids, partners=partners)
        self.comparer = comparer

    def record(self, server_round: int, results: Sequence[FitResult]) -> None:
        """Take in a round's updates: pairs of clients that trained the same model (every
        pair of a model's updates, or each with ``partners`` others chosen at random, seeded
        by the round and the model's place among the round's models)."""
        comparer = self.comparer

        def cosines(members: Sequence[FitResult], a: IntArray, b: IntArray) -> Float64Array:
            updates = [r.delta for r in members]
            if comparer is None:
                return cosine_similarity_matrix(updates)[a, b]
            return comparer.pair_cosines(updates, a, b)

        self._record(server_round, results, cosines)

    def record_sketches(self, server_round: int, updates: Sequence[StreamedUpdate]) -> None:
        """:meth:`record` for a streamed round: the updates' unit sketches (the same pairs,
        and the cosines :meth:`record` takes under sketches)."""

        def cosines(members: Sequence[StreamedUpdate], a: IntArray, b: IntArray) -> Float64Array:
            return sketch_pair_cosines(unit_sketches(members), a, b)

        self._record(server_round, updates, cosines)

    def _record(
        self,
        server_round: int,
        answers: Sequence[_U],
        cosines: Callable[[Sequence[_U], IntArray, IntArray], Float64Array],
    ) -> None:
        """:meth:`record` for any kind of answer with a client id and a model key."""
        index = {c: i for i, c in enumerate(self.client_ids_)}
        by_model: dict[str, list[_U]] = {}
        for r in answers:
            by_model.setdefault(r.model_key, []).append(r)
        for place, members in enumerate(by_model.values()):
            if len(members) < 2:
                continue
            rows = np.array([index[r.client_id] for r in members], dtype=np.int64)
            a, b = sample_pairs(len(members), self.partners, [server_round, place])
            low, high = np.minimum(rows[a], rows[b]), np.maximum(rows[a], rows[b])
            # a client twice among one model's updates: no pair with itself, and each of its
            # pairs once (the later update's)
            keys = (low * len(self.client_ids_) + high)[::-1]
            _, last = np.unique(keys, return_index=True)
            once = np.sort(len(keys) - 1 - last)
            once = once[low[once] != high[once]]
            taken = cosines(members, a[once], b[once])
            self.pairs_.record(server_round, low[once], high[once], taken)
        self._forget(server_round)

    def comparer_state(self) -> dict[str, int | str] | None:
        """The comparer's :meth:`~.pairwise.UpdateComparer.state`, to save (None: exact)."""
        return None if self.comparer is None else self.comparer.state()

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
