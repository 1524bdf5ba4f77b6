"""FLACC's memory of pair similarities as a bounded list of pairs, for large fleets.

FLACC (Mehta & Shao 2023, Algorithm 1) keeps α, the cosine of every pair of clients last
seen together (eq. 19), in an m × m matrix with the round τ of each (eq. 18 forgets pairs
older than T rounds). At 10,000 clients that is 10⁸ entries per matrix, and every pair of
the k clients of a round — k²/2 new cosines, 3·10⁶ at k = 2,500 — is measured.

:class:`PairMemory` keeps the same information as a list of remembered pairs: their two
clients, their cosine and the round they were measured in; eq. 18 drops pairs older than
T, and a pair measured again replaces its older value (the latest wins, as in α). Rounds of
at most ``partners + 1`` updates measure every pair, as the dense α does. Larger rounds
measure each client against ``partners`` others chosen at random (:func:`sample_pairs`), so
the memory holds at most (T + 1)·k·partners/2 pairs, linear in the fleet. Sampling pairs
keeps what FLACC's rules need: eq. 9 and eq. 16 work on the known cross pairs of two
entities (the dense α already knows only the pairs seen together in the last T rounds, a
random subset), and two entities of g members each still share about g²·partners/k known
pairs, so two groups are told apart by many negative cosines and one group's pieces joined
by many positive ones. The sparse merging of :mod:`.sparse_agglomeration` reads the list
through :func:`entity_table`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from faultfleet.types import Float64Array, IntArray

Int32Array = npt.NDArray[np.int32]
UNKNOWN = -1.0


def sample_pairs(k: int, partners: int, seed: int | list[int]) -> tuple[IntArray, IntArray]:
    """Positions (a, b), a ≠ b, of the pairs measured among k updates, each pair once.

    Every pair when ``k − 1 <= partners``. Otherwise a random ``partners``-regular circulant
    graph: the positions are shuffled, and position p of the shuffled order is paired with
    p ± o (mod k) for ``partners // 2`` distinct random offsets o in 1 … ⌊(k − 1)/2⌋; each
    update then has ``2 · (partners // 2)`` partners.

    Returns
    -------
    (array of shape (q,), array of shape (q,)), int64
        With ``a < b`` for every pair, sorted by (a, b).
    """
    if k < 2:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy()
    if k - 1 <= partners:
        first, second = np.triu_indices(k, k=1)
        return first.astype(np.int64), second.astype(np.int64)
    rng = np.random.default_rng(seed)
    order = rng.permutation(k)
    half = max(partners // 2, 1)
    offsets = rng.choice(
        np.arange(1, (k - 1) // 2 + 1), size=min(half, (k - 1) // 2), replace=False
    )
    positions = np.arange(k)
    a = np.repeat(order, len(offsets))
    b = order[(np.repeat(positions, len(offsets)) + np.tile(offsets, k)) % k]
    first, second = np.minimum(a, b), np.maximum(a, b)
    keys = np.unique(first * k + second)
    return keys // k, keys % k


@dataclass
class PairMemory:
    """Remembered pairs of clients: registration indices ``first < second``, the cosine and
    the round it was measured in, one entry per pair.

    Attributes
    ----------
    n_clients : int
    first, second : array of shape (q,), int32
    value : array of shape (q,), float32
    measured : array of shape (q,), int32
        The round of each pair's latest cosine.

    Sixteen bytes per pair.
    """

    n_clients: int
    first: Int32Array
    second: Int32Array
    value: npt.NDArray[np.float32]
    measured: Int32Array

    @classmethod
    def empty(cls, n_clients: int) -> PairMemory:
        """A memory of ``n_clients`` clients that knows no pair."""
        none = np.zeros(0, dtype=np.int32)
        return cls(n_clients, none, none.copy(), np.zeros(0, np.float32), none.copy())

    def __len__(self) -> int:
        return int(self.first.shape[0])

    def record(
        self, server_round: int, first: IntArray, second: IntArray, value: Float64Array
    ) -> None:
        """Add the cosines measured in ``server_round``; a pair known already takes the new
        value (the latest wins). Pairs must be distinct, with ``first < second``."""
        first = np.asarray(first, dtype=np.int32)
        second = np.asarray(second, dtype=np.int32)
        if np.any(first >= second):
            raise ValueError("every pair must have first < second")
        new_keys = first.astype(np.int64) * self.n_clients + second
        old_keys = self.first.astype(np.int64) * self.n_clients + self.second
        kept = ~np.isin(old_keys, new_keys)
        self.first = np.concatenate([self.first[kept], first])
        self.second = np.concatenate([self.second[kept], second])
        self.value = np.concatenate([self.value[kept], np.asarray(value, dtype=np.float32)])
        rounds = np.full(len(first), server_round, dtype=np.int32)
        self.measured = np.concatenate([self.measured[kept], rounds])

    def grow(self, n_clients: int) -> None:
        """Clients joined: registration indices up to ``n_clients`` − 1, their pairs unknown."""
        if n_clients < self.n_clients:
            raise ValueError(f"cannot grow from {self.n_clients} to {n_clients} clients")
        self.n_clients = n_clients

    def keep(self, kept: Sequence[int]) -> None:
        """Clients left: only the pairs of the clients ``kept`` (old registration indices, in
        their new order) remain, renumbered to their positions in ``kept``."""
        position = np.full(self.n_clients, -1, dtype=np.int64)
        position[np.asarray(kept, dtype=np.int64)] = np.arange(len(kept))
        self.renumber(position, len(kept))

    def renumber(self, position: IntArray, n_clients: int) -> None:
        """Registration changed: client i is now ``position[i]`` of ``n_clients``, or gone
        where it is −1 (its pairs are dropped)."""
        first, second = position[self.first], position[self.second]
        both = (first >= 0) & (second >= 0)
        low, high = np.minimum(first, second)[both], np.maximum(first, second)[both]
        self.first, self.second = low.astype(np.int32), high.astype(np.int32)
        self.value, self.measured = self.value[both], self.measured[both]
        self.n_clients = n_clients

    def forget(self, server_round: int, memory: int | None) -> None:
        """Eq. 18: drop pairs with ``server_round − τ > memory`` (None: keep every pair)."""
        if memory is None:
            return
        kept = server_round - self.measured <= memory
        if not kept.all():
            self.first, self.second = self.first[kept], self.second[kept]
            self.value, self.measured = self.value[kept], self.measured[kept]

    def dense(self) -> Float64Array:
        """The memory as FLACC's m × m α: −1 (unknown) where no pair is remembered."""
        alpha = np.full((self.n_clients, self.n_clients), UNKNOWN)
        alpha[self.first, self.second] = self.value
        alpha[self.second, self.first] = self.value
        return alpha


@dataclass(frozen=True)
class EntityTable:
    """Statistics of the known pairs of every entity pair and within every entity.

    Cross rows (``a < b``, entity positions) hold the lowest, highest, sum and count of the
    known cosines between the two entities; ``within_*`` hold the same within each entity
    (count 0 and lowest +inf where none is known).
    """

    a: IntArray
    b: IntArray
    lowest: Float64Array
    highest: Float64Array
    total: Float64Array
    count: IntArray
    within_lowest: Float64Array
    within_total: Float64Array
    within_count: IntArray


def entity_table(memory: PairMemory, labels: IntArray, n_entities: int) -> EntityTable:
    """Group the known pairs of ``memory`` by the entities of their clients.

    Parameters
    ----------
    labels : array of shape (m,), int
        Entity position of every client.
    n_entities : int

    Cosines at or below −1 count as unknown, as in the dense α (FLACC's −1).
    """
    known = memory.value > UNKNOWN
    ea = labels[memory.first[known]]
    eb = labels[memory.second[known]]
    values = memory.value[known].astype(np.float64)
    low, high = np.minimum(ea, eb), np.maximum(ea, eb)
    inside = low == high
    within_lowest = np.full(n_entities, np.inf)
    np.minimum.at(within_lowest, low[inside], values[inside])
    within_total = np.bincount(low[inside], weights=values[inside], minlength=n_entities).astype(
        np.float64
    )
    within_count = np.bincount(low[inside], minlength=n_entities).astype(np.int64)
    keys = low[~inside] * n_entities + high[~inside]
    cross = values[~inside]
    order = np.argsort(keys, kind="stable")
    keys, cross = keys[order], cross[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.zeros(0, int)
    unique = keys[starts]
    return EntityTable(
        a=unique // n_entities,
        b=unique % n_entities,
        lowest=np.minimum.reduceat(cross, starts) if len(starts) else np.zeros(0),
        highest=np.maximum.reduceat(cross, starts) if len(starts) else np.zeros(0),
        total=np.add.reduceat(cross, starts) if len(starts) else np.zeros(0),
        count=np.diff(np.r_[starts, len(keys)]).astype(np.int64),
        within_lowest=within_lowest,
        within_total=within_total,
        within_count=within_count,
    )
