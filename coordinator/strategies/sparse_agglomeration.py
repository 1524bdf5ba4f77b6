"""FLACC's entity merging on a list of known pairs instead of the m × m α.

The same decisions as :func:`~coordinator.strategies.agglomeration.agglomerate` — eq. 9's
order, eqs. 11–16, the cohesion test of :mod:`.cohesion`, ``next_pair``, ``n_merge`` —
computed from the known pairs of a :class:`~.pair_memory.PairMemory` grouped once by entity
(:func:`~.pair_memory.entity_table`), so the cost follows the number of known pairs, not m².
The tests check it against the dense implementation on random α.

The dense implementation updates m × m extremes after every merge (eq. 10, O(m²) each).
Here each entity pair with known pairs is a row (lowest, highest, sum and count of its
known cosines) in a heap ordered as eq. 9 orders pairs (α_min^cross descending, then the
entities' positions). A merge combines the rows of the two entities with each third entity
(the smaller adjacency is walked, Lance–Williams for min, max, sums and counts), so a round
of merging costs O(q log q) for q rows. Pairs that a test refused are kept aside until one
of their entities changes, or — when the cohesion test compared them with the fleet's
pooled cohesion, which moves with every merge — until the pooled cohesion falls to where
they would pass; Algorithm 1 would try them again in every iteration with the same outcome.

Exact ties of α_min^cross between two pairs are broken by the entities' positions as the
dense implementation does, except after a merge has moved one of the pairs' entities to an
earlier position, when the pair may come after an equal one it would precede there.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

import numpy as np

from coordinator.strategies.agglomeration import Agglomeration, Entity, MergeDecision
from coordinator.strategies.cohesion import CohesionCheck
from coordinator.strategies.pair_memory import PairMemory, entity_table
from faultfleet.types import IntArray

_OPEN, _REFUSED, _GONE = 0, 1, 2


class _Graph:
    """Entities (by physical id) and the rows of known pairs between them."""

    def __init__(self, memory: PairMemory, entities: Sequence[Entity]) -> None:
        n = len(entities)
        labels = _labels(memory.n_clients, entities)
        table = entity_table(memory, labels, n)
        self.members = [list(e) for e in entities]
        self.rank = list(range(n))
        self.within_lowest = table.within_lowest.tolist()
        self.within_total = table.within_total.tolist()
        self.within_count = table.within_count.tolist()
        self.pooled_total = float(table.within_total.sum())
        self.pooled_count = int(table.within_count.sum())
        self.a, self.b = table.a.tolist(), table.b.tolist()
        self.lowest, self.highest = table.lowest.tolist(), table.highest.tolist()
        self.total, self.count = table.total.tolist(), table.count.tolist()
        self.state = [_OPEN] * len(self.a)
        self.adjacency: list[dict[int, int]] = [{} for _ in range(n)]
        for row, (a, b) in enumerate(zip(self.a, self.b, strict=True)):
            self.adjacency[a][b] = row
            self.adjacency[b][a] = row
        self.open = [self._key(row) for row in range(len(self.a))]
        heapq.heapify(self.open)
        self.refused: list[tuple[float, int, int, int]] = []
        self.refused_of: list[set[int]] = [set() for _ in range(n)]
        self.waiting_pooled: list[tuple[float, int]] = []
        """Refused against the pooled cohesion: (−cross/share, row)."""

    def _key(self, row: int) -> tuple[float, int, int, int]:
        ra, rb = self.rank[self.a[row]], self.rank[self.b[row]]
        return (-self.lowest[row], min(ra, rb), max(ra, rb), row)

    def peek(self, heap: list[tuple[float, int, int, int]], state: int) -> int | None:
        """The first row of ``heap`` still in ``state``, its key refreshed; None if none."""
        while heap:
            key = heap[0]
            row = key[3]
            if self.state[row] != state:
                heapq.heappop(heap)
                continue
            fresh = self._key(row)
            if fresh != key:  # an entity moved to an earlier position
                heapq.heapreplace(heap, fresh)
                continue
            return row
        return None

    def reopen(self, row: int) -> None:
        """Back to the open heap (its decision must be taken again)."""
        if self.state[row] == _REFUSED:
            self.refused_of[self.a[row]].discard(row)
            self.refused_of[self.b[row]].discard(row)
        self.state[row] = _OPEN
        heapq.heappush(self.open, self._key(row))

    def refuse(self, row: int, decision: MergeDecision, share: float | None) -> None:
        """Aside until an entity of ``row`` changes, or the pooled cohesion falls."""
        self.state[row] = _REFUSED
        a, b = self.a[row], self.b[row]
        self.refused_of[a].add(row)
        self.refused_of[b].add(row)
        heapq.heappush(self.refused, self._key(row))
        check = decision.cohesion
        own = self.within_mean(a) is not None or self.within_mean(b) is not None
        if check is not None and share and not own and check.cross_mean is not None:
            heapq.heappush(self.waiting_pooled, (-check.cross_mean / share, row))

    def pooled(self) -> float | None:
        return self.pooled_total / self.pooled_count if self.pooled_count else None

    def within_mean(self, e: int) -> float | None:
        if len(self.members[e]) < 2 or self.within_count[e] == 0:
            return None
        return float(self.within_total[e] / self.within_count[e])

    def merge(self, row: int) -> None:
        """The two entities of ``row`` become one (eq. 10)."""
        x, y = self.a[row], self.b[row]
        keep, gone = (x, y) if len(self.adjacency[x]) >= len(self.adjacency[y]) else (y, x)
        self.refused_of[x].discard(row)
        self.refused_of[y].discard(row)
        self.state[row] = _GONE
        self.within_lowest[keep] = min(
            self.within_lowest[keep], self.within_lowest[gone], self.lowest[row]
        )
        self.within_total[keep] += self.within_total[gone] + self.total[row]
        self.within_count[keep] += self.within_count[gone] + self.count[row]
        self.pooled_total += self.total[row]
        self.pooled_count += self.count[row]
        self.members[keep].extend(self.members[gone])
        self.members[gone] = []
        self.rank[keep] = min(self.rank[keep], self.rank[gone])
        for stale in (*self.refused_of[keep], *self.refused_of[gone]):
            self.reopen(stale)
        del self.adjacency[keep][gone]
        del self.adjacency[gone][keep]
        for other, moved in self.adjacency[gone].items():
            del self.adjacency[other][gone]
            joined = self.adjacency[keep].get(other)
            if joined is None:
                if self.a[moved] == gone:
                    self.a[moved] = keep
                else:
                    self.b[moved] = keep
                self.adjacency[keep][other] = self.adjacency[other][keep] = moved
                heapq.heappush(self.open, self._key(moved))
                continue
            self.state[moved] = self.state[joined] = _GONE
            new = len(self.a)
            self.a.append(keep)
            self.b.append(other)
            self.lowest.append(min(self.lowest[moved], self.lowest[joined]))
            self.highest.append(max(self.highest[moved], self.highest[joined]))
            self.total.append(self.total[moved] + self.total[joined])
            self.count.append(self.count[moved] + self.count[joined])
            self.state.append(_OPEN)
            self.adjacency[keep][other] = self.adjacency[other][keep] = new
            heapq.heappush(self.open, self._key(new))
        self.adjacency[gone] = {}
        self._release_pooled()

    def _release_pooled(self) -> None:
        """Reopen refused pairs that the fleet's pooled cohesion now lets pass."""
        pooled = self.pooled()
        while self.waiting_pooled and (
            pooled is None or pooled <= 0 or -self.waiting_pooled[0][0] >= pooled
        ):
            _, row = heapq.heappop(self.waiting_pooled)
            if self.state[row] == _REFUSED:
                self.reopen(row)

    def entities(self) -> list[Entity]:
        found = [tuple(sorted(m)) for m in self.members if m]
        return sorted(found, key=lambda e: e[0])


def _labels(n_clients: int, entities: Sequence[Entity]) -> IntArray:
    labels = np.full(n_clients, -1, dtype=np.int64)
    for i, entity in enumerate(entities):
        labels[list(entity)] = i
    return labels


def agglomerate_pairs(
    memory: PairMemory,
    entities: Sequence[Entity],
    *,
    alpha0: float,
    n_merge: int,
    next_pair: bool = False,
    cohesion_share: float | None = None,
) -> Agglomeration:
    """Up to ``n_merge`` greedy merges (Algorithm 1, lines 13–18) on the pairs of ``memory``.

    Parameters and result as :func:`~coordinator.strategies.agglomeration.agglomerate`,
    with the known pairs of ``memory`` in place of α.
    """
    graph = _Graph(memory, entities)
    decisions: list[MergeDecision] = []
    passed_over = merges = 0
    searching = next_pair or cohesion_share is not None
    while merges < n_merge:
        top_open = graph.peek(graph.open, _OPEN)
        top_refused = graph.peek(graph.refused, _REFUSED)
        if top_open is None and top_refused is None:
            break  # no known cross pair
        first = _first(graph, top_open, top_refused)
        decision = _decision(graph, first, alpha0, cohesion_share)
        if decision.merge:
            decisions.append(decision)
            graph.merge(first)
            merges += 1
            continue
        if not searching or decision.alpha_min_cross <= alpha0:
            decisions.append(decision)
            break
        if first == top_open:
            heapq.heappop(graph.open)
            graph.refuse(first, decision, cohesion_share)
        found = _search(graph, alpha0, cohesion_share)
        decisions.append(decision)
        if found is None:
            break
        decisions.append(found[1])
        passed_over += 1
        graph.merge(found[0])
        merges += 1
    return Agglomeration(graph.entities(), tuple(decisions), passed_over)


def _first(graph: _Graph, top_open: int | None, top_refused: int | None) -> int:
    """Eq. 9's pair: the earlier in eq. 9's order of the two heaps' first rows."""
    if top_open is None:
        assert top_refused is not None
        return top_refused
    if top_refused is None:
        return top_open
    return top_open if graph._key(top_open) < graph._key(top_refused) else top_refused


def _search(graph: _Graph, alpha0: float, share: float | None) -> tuple[int, MergeDecision] | None:
    """The first open pair in eq. 9's order that merges, refusing those that do not; None
    once a pair fails eq. 16 (every later one fails it too) or none is left."""
    while (row := graph.peek(graph.open, _OPEN)) is not None:
        decision = _decision(graph, row, alpha0, share)
        if decision.alpha_min_cross <= alpha0:
            return None
        heapq.heappop(graph.open)
        if decision.merge:
            return row, decision
        graph.refuse(row, decision, share)
    return None


def _decision(graph: _Graph, row: int, alpha0: float, share: float | None) -> MergeDecision:
    """Eqs. 11–16 and the cohesion test for the entity pair of ``row``."""
    a, b = graph.a[row], graph.b[row]
    if graph.rank[a] > graph.rank[b]:
        a, b = b, a
    min_cross, max_cross = graph.lowest[row], graph.highest[row]
    within = min(graph.within_lowest[a], graph.within_lowest[b])
    min_within = within if math.isfinite(within) else None
    both_subservers = len(graph.members[a]) >= 2 and len(graph.members[b]) >= 2
    potential = max_cross - min_within if both_subservers and min_within is not None else None
    merge = min_cross > alpha0 and (  # eq. 16, and eq. 14 for two sub-servers
        not both_subservers or (potential is not None and potential > 0)
    )
    cohesion = None
    if share is not None and merge:
        cohesion = _cohesion(graph, row, a, b, share)
        merge = cohesion.passed
    return MergeDecision(
        tuple(sorted(graph.members[a])),
        tuple(sorted(graph.members[b])),
        min_cross,
        max_cross,
        min_within,
        potential,
        merge,
        cohesion,
    )


def _cohesion(graph: _Graph, row: int, a: int, b: int, share: float) -> CohesionCheck:
    """:func:`~coordinator.strategies.cohesion.cohesion_check` from the rows' statistics."""
    cross = graph.total[row] / graph.count[row]
    own = [w for w in (graph.within_mean(a), graph.within_mean(b)) if w is not None]
    reference = min(own) if own else graph.pooled()
    if reference is None or reference <= 0.0:
        return CohesionCheck(cross, reference, None, True)
    bar = share * reference
    return CohesionCheck(cross, reference, bar, cross >= bar)
