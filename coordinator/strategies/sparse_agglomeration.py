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
in place (the smaller adjacency is walked, Lance–Williams for min, max, sums and counts); a
row whose α_min^cross fell keeps its heap entry, which now comes too early and is put back
in its place when it reaches the top, so a round of merging costs O(q log q) for q rows.

Pairs that a test refused are kept aside, where Algorithm 1 would try them again in every
iteration with the same outcome, until a change may let them pass: a merge into an entity
without a within mean (a single client) reopens its refused pairs; a merge into one with a
within mean can only lower its α_min^within and move its cohesion, so only its pairs whose
cross mean reaches ``share`` × its new mean or whose α_max^cross exceeds its new
α_min^within are reopened (every other test of the pair is unchanged, and the cohesion
reference is the smaller of the two means, so a pair below the bar of the changed entity
stays below the bar it failed); pairs compared with the fleet's pooled cohesion, which
moves with every merge, wait until it falls to where they would pass.

Exact ties of α_min^cross between two pairs are broken by the entities' positions as the
dense implementation does, except after a merge has moved one of the pairs' entities to an
earlier position, when the pair may come after an equal one it would precede there.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import replace

from coordinator.strategies.agglomeration import (
    Agglomeration,
    Entity,
    MergeDecision,
    entity_labels,
)
from coordinator.strategies.cohesion import CohesionCheck
from coordinator.strategies.pair_memory import PairMemory, entity_table
from faultfleet.gc_pause import collector_paused

_OPEN, _REFUSED, _GONE = 0, 1, 2


class _Graph:
    """Entities (by physical id) and the rows of known pairs between them."""

    def __init__(self, memory: PairMemory, entities: Sequence[Entity], share: float | None) -> None:
        self.share = share
        n = len(entities)
        labels = entity_labels(memory.n_clients, entities)
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
        self.stamp = [0] * len(self.a)
        """How many times each row was refused: tells current entries of the heaps below."""
        self.adjacency: list[dict[int, int]] = [{} for _ in range(n)]
        for row, (a, b) in enumerate(zip(self.a, self.b, strict=True)):
            self.adjacency[a][b] = row
            self.adjacency[b][a] = row
        # Every row's _key: a < b, and every entity is at its own position (rank).
        self.open = list(
            zip((-table.lowest).tolist(), self.a, self.b, range(len(self.a)), strict=True)
        )
        heapq.heapify(self.open)
        self.refused: list[tuple[float, int, int, int]] = []
        self.refused_of: list[set[int]] = [set() for _ in range(n)]
        self.waiting_pooled: list[tuple[float, int, int]] = []
        """Refused against the pooled cohesion: (−cross/share, row, stamp)."""
        self.by_cross: dict[int, list[tuple[float, int, int]]] = {}
        self.by_max_cross: dict[int, list[tuple[float, int, int]]] = {}
        """Per entity with a within mean, its refused rows by −cross mean and −α_max^cross:
        after the entity changes, those its new cohesion or α_min^within may let pass."""

    def _key(self, row: int) -> tuple[float, int, int, int]:
        ra, rb = self.rank[self.a[row]], self.rank[self.b[row]]
        return (-self.lowest[row], ra, rb, row) if ra < rb else (-self.lowest[row], rb, ra, row)

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

    def refuse(self, row: int, decision: MergeDecision) -> None:
        """Aside until a change of an entity of ``row`` may let it pass (:meth:`merge`), or
        the pooled cohesion falls to where it would."""
        self.state[row] = _REFUSED
        self.stamp[row] += 1
        stamp = self.stamp[row]
        a, b = self.a[row], self.b[row]
        self.refused_of[a].add(row)
        self.refused_of[b].add(row)
        heapq.heappush(self.refused, self._key(row))
        cross = self.total[row] / self.count[row]
        own = False
        for e in (a, b):
            if self.within_mean(e) is not None:
                own = True
                heapq.heappush(self.by_cross.setdefault(e, []), (-cross, row, stamp))
                heapq.heappush(
                    self.by_max_cross.setdefault(e, []), (-self.highest[row], row, stamp)
                )
        if decision.cohesion is not None and self.share and not own:
            heapq.heappush(self.waiting_pooled, (-cross / self.share, row, stamp))

    def _current(self, row: int, stamp: int) -> bool:
        return self.state[row] == _REFUSED and self.stamp[row] == stamp

    def _release(self, e: int) -> None:
        """Reopen the refused rows of ``e``, which has a within mean and just grew, that its
        new cohesion (cross ≥ share · mean) or α_min^within (α_max^cross above it) may let
        pass; the others fail as before (see the module docstring)."""
        mean, lowest = self.within_mean(e), self.within_lowest[e]
        bar = -math.inf if mean is None or mean <= 0 or not self.share else self.share * mean
        for heap, limit in ((self.by_cross.get(e), bar), (self.by_max_cross.get(e), lowest)):
            while heap and -heap[0][0] >= limit:
                _, row, stamp = heapq.heappop(heap)
                if self._current(row, stamp):
                    self.reopen(row)

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
        had_mean = self.within_mean(keep) is not None
        self.within_lowest[keep] = min(
            self.within_lowest[keep], self.within_lowest[gone], self.lowest[row]
        )
        self.within_total[keep] += self.within_total[gone] + self.total[row]
        self.within_count[keep] += self.within_count[gone] + self.count[row]
        self.pooled_total += self.total[row]
        self.pooled_count += self.count[row]
        if len(self.members[keep]) < len(self.members[gone]):  # extend the longer list
            self.members[keep], self.members[gone] = self.members[gone], self.members[keep]
        self.members[keep].extend(self.members[gone])
        self.members[gone] = []
        self.rank[keep] = min(self.rank[keep], self.rank[gone])
        for stale in list(self.refused_of[gone]):
            self.reopen(stale)
        if had_mean:
            self._release(keep)
        else:  # it gains a within mean or becomes a sub-server: every test may change
            for stale in list(self.refused_of[keep]):
                self.reopen(stale)
        adjacency, state = self.adjacency, self.state
        kept = adjacency[keep]
        del kept[gone]
        del adjacency[gone][keep]
        # The loop below runs once per neighbour of the smaller entity (tens of thousands of
        # times per round at 10,000 agents): names are bound locally, and min and max are
        # spelled out with their semantics (min(x, y) is y if y < x else x).
        a, b = self.a, self.b
        lowest, highest, total, count = self.lowest, self.highest, self.total, self.count
        for other, moved in adjacency[gone].items():
            theirs = adjacency[other]
            del theirs[gone]
            joined = kept.get(other)
            if joined is None:  # the row is now keep's; its heap entry is refreshed lazily
                if a[moved] == gone:
                    a[moved] = keep
                else:
                    b[moved] = keep
                kept[other] = theirs[keep] = moved
                continue
            # Lance–Williams in place: the pair (keep, other) takes in (gone, other). Its
            # α_min^cross can only fall, so its heap entry, now early, is refreshed lazily.
            state[moved] = _GONE
            low, high = lowest[joined], highest[joined]
            lowest[joined] = low if low < lowest[moved] else lowest[moved]
            highest[joined] = high if high > highest[moved] else highest[moved]
            total[joined] += total[moved]
            count[joined] += count[moved]
            if state[joined] == _REFUSED:
                self.reopen(joined)
        self.adjacency[gone] = {}
        self._release_pooled()

    def _release_pooled(self) -> None:
        """Reopen refused pairs that the fleet's pooled cohesion now lets pass."""
        pooled = self.pooled()
        while self.waiting_pooled and (
            pooled is None or pooled <= 0 or -self.waiting_pooled[0][0] >= pooled
        ):
            _, row, stamp = heapq.heappop(self.waiting_pooled)
            if self._current(row, stamp):
                self.reopen(row)

    def entities(self) -> list[Entity]:
        found = [tuple(sorted(m)) for m in self.members if m]
        return sorted(found, key=lambda e: e[0])


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
    with the known pairs of ``memory`` in place of α. The cyclic garbage collector is off
    meanwhile (:func:`~faultfleet.gc_pause.collector_paused`): the graph's heap entries,
    rows and decisions are hundreds of thousands of short-lived containers at 10,000
    agents, which set off full collections of the coordinator's heap, and hold no cycles.
    """
    with collector_paused():
        return _agglomerate(memory, entities, alpha0, n_merge, next_pair, cohesion_share)


def _agglomerate(
    memory: PairMemory,
    entities: Sequence[Entity],
    alpha0: float,
    n_merge: int,
    next_pair: bool,
    cohesion_share: float | None,
) -> Agglomeration:
    graph = _Graph(memory, entities, cohesion_share)
    decisions: list[MergeDecision] = []
    passed_over = merges = 0
    searching = next_pair or cohesion_share is not None
    while merges < n_merge:
        top_open = graph.peek(graph.open, _OPEN)
        top_refused = graph.peek(graph.refused, _REFUSED)
        if top_open is None and top_refused is None:
            break  # no known cross pair
        first = _first(graph, top_open, top_refused)
        decision = _decision(graph, first, alpha0, cohesion_share, named=True)
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
            graph.refuse(first, decision)
        found = _search(graph, alpha0, cohesion_share)
        decisions.append(decision)
        if found is None:
            break
        decisions.append(_named(graph, *found))
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
        graph.refuse(row, decision)
    return None


def _ordered(graph: _Graph, row: int) -> tuple[int, int]:
    """The two entities of ``row``, the earlier in the entity list first."""
    a, b = graph.a[row], graph.b[row]
    return (b, a) if graph.rank[a] > graph.rank[b] else (a, b)


def _members(graph: _Graph, a: int, b: int) -> tuple[Entity, Entity]:
    """The members of entities ``a`` and ``b`` as they are now (before a merge)."""
    return tuple(sorted(graph.members[a])), tuple(sorted(graph.members[b]))


def _named(graph: _Graph, row: int, decision: MergeDecision) -> MergeDecision:
    """``decision`` with its two entities' members."""
    first, second = _members(graph, *_ordered(graph, row))
    return replace(decision, first=first, second=second)


def _decision(
    graph: _Graph, row: int, alpha0: float, share: float | None, *, named: bool = False
) -> MergeDecision:
    """Eqs. 11–16 and the cohesion test for the entity pair of ``row``; its entities are
    named (which costs their sizes) only ``named``, for a decision that is kept, or later
    by :func:`_named`."""
    a, b = _ordered(graph, row)
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
    first, second = _members(graph, a, b) if named else ((), ())
    return MergeDecision(
        first,
        second,
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
