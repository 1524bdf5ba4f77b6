"""FLACC's entity merging on a list of known pairs instead of the m × m α.

The same decisions as :func:`~coordinator.strategies.agglomeration.agglomerate` — eq. 9's
order with its tie rule, eqs. 11–16, the cohesion test of :mod:`.cohesion`, ``next_pair``,
``n_merge`` — computed from the known pairs of a :class:`~.pair_memory.PairMemory` grouped
by entity (:func:`~.pair_memory.entity_table`), so the cost follows the number of known
pairs, not m². The tests check it against the dense implementation on random α.

How many merges per grouping: the dense implementation updates the m × m extremes after
every merge (eq. 10, O(m²) each). Here the entity table is grouped once, and merges are
made in eq. 9's order while their pairs do not involve an entity merged since the grouping:
a pair of two untouched entities has the same statistics it had, and every pair involving
a merged entity AB ranks no higher than the pairs of A and of B it replaces (its α_min^cross
is the smaller of theirs: complete linkage is *reducible*, Murtagh 1983), so as long as the
walk has not reached a pair of a merged entity, no pair of AB can rank above the pair it is
looking at. On reaching one, the table is grouped again. Each iteration walks from the top
again, as Algorithm 1 does: pairs refused by the cohesion test or eq. 14 are tried again
(the fleet's pooled cohesion, which stands in for entities without within pairs, changes
with every merge).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from coordinator.strategies.agglomeration import Agglomeration, Entity, MergeDecision
from coordinator.strategies.cohesion import CohesionCheck
from coordinator.strategies.pair_memory import EntityTable, PairMemory, entity_table
from faultfleet.types import IntArray


class _Entities:
    """The entities during one call: members, sizes and within statistics by entity id (its
    position in the list given; a merged entity keeps the smaller id), and the fleet's
    pooled within sum and count."""

    def __init__(self, entities: Sequence[Entity], n_clients: int) -> None:
        self.members: dict[int, Entity] = {i: tuple(e) for i, e in enumerate(entities)}
        self.labels = np.full(n_clients, -1, dtype=np.int64)
        for i, entity in enumerate(entities):
            self.labels[list(entity)] = i
        self.count = len(entities)
        self.within_lowest = np.zeros(0)
        self.within_total = np.zeros(0)
        self.within_count = np.zeros(0, dtype=np.int64)
        self.pooled_total = 0.0
        self.pooled_count = 0

    def take(self, table: EntityTable) -> None:
        """Within statistics from a fresh grouping."""
        self.within_lowest = table.within_lowest.copy()
        self.within_total = table.within_total.copy()
        self.within_count = table.within_count.copy()
        self.pooled_total = float(self.within_total.sum())
        self.pooled_count = int(self.within_count.sum())

    def within_mean(self, e: int) -> float | None:
        if len(self.members[e]) < 2 or self.within_count[e] == 0:
            return None
        return float(self.within_total[e] / self.within_count[e])

    def merge(self, a: int, b: int, table: EntityTable, row: int) -> None:
        """Entity ``b`` joins ``a`` (eq. 10); their cross pairs become within pairs."""
        self.members[a] = tuple(sorted(self.members[a] + self.members.pop(b)))
        self.labels[list(self.members[a])] = a
        self.within_lowest[a] = min(self.within_lowest[a], self.within_lowest[b], table.lowest[row])
        self.within_total[a] += self.within_total[b] + table.total[row]
        self.within_count[a] += self.within_count[b] + table.count[row]
        self.pooled_total += float(table.total[row])
        self.pooled_count += int(table.count[row])


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
    state = _Entities(entities, memory.n_clients)
    decisions: list[MergeDecision] = []
    passed_over = merges = 0
    searching = next_pair or cohesion_share is not None
    while merges < n_merge:
        table = entity_table(memory, state.labels, state.count)
        state.take(table)
        order = np.lexsort((table.b, table.a, -table.lowest))
        touched: set[int] = set()
        regroup = False
        while merges < n_merge and not regroup:
            outcome = _iteration(state, table, order, touched, alpha0, searching, cohesion_share)
            if outcome is None:  # reached a pair of a merged entity: group again
                regroup = True
                continue
            tried, stop = outcome
            if len(tried) > 1:
                decisions.append(tried[0][1])
                passed_over += 1
            if tried:
                decisions.append(tried[-1][1])
            if stop:
                return _result(state, decisions, passed_over)
            row = tried[-1][0]
            a, b = int(table.a[row]), int(table.b[row])
            state.merge(a, b, table, row)
            touched.update((a, b))
            merges += 1
    return _result(state, decisions, passed_over)


def _iteration(
    state: _Entities,
    table: EntityTable,
    order: IntArray,
    touched: set[int],
    alpha0: float,
    searching: bool,
    share: float | None,
) -> tuple[list[tuple[int, MergeDecision]], bool] | None:
    """One iteration of Algorithm 1's loop: the decisions tried and whether merging stops;
    None when the walk reaches a pair of an entity merged since the grouping."""
    first: tuple[int, MergeDecision] | None = None
    for row in order:
        a, b = int(table.a[row]), int(table.b[row])
        if a in touched or b in touched:
            return None
        decision = _decision(state, table, int(row), alpha0, share)
        if first is None:
            first = (int(row), decision)
            if decision.merge:
                return [first], False
            if not searching or decision.alpha_min_cross <= alpha0:
                return [first], True
            continue
        if decision.alpha_min_cross <= alpha0:  # eq. 16 fails from here on
            return [first], True
        if decision.merge:
            return [first, (int(row), decision)], False
    return ([first] if first is not None else []), True


def _decision(
    state: _Entities, table: EntityTable, row: int, alpha0: float, share: float | None
) -> MergeDecision:
    """Eqs. 11–16 and the cohesion test for the entity pair of ``row``."""
    a, b = int(table.a[row]), int(table.b[row])
    min_cross, max_cross = float(table.lowest[row]), float(table.highest[row])
    within = float(min(state.within_lowest[a], state.within_lowest[b]))
    min_within = within if np.isfinite(within) else None
    both_subservers = len(state.members[a]) >= 2 and len(state.members[b]) >= 2
    potential = max_cross - min_within if both_subservers and min_within is not None else None
    merge = min_cross > alpha0 and (
        not both_subservers or (potential is not None and potential > 0)
    )
    cohesion = None
    if share is not None and merge:
        cohesion = _cohesion(state, table, row, a, b, share)
        merge = cohesion.passed
    return MergeDecision(
        state.members[a],
        state.members[b],
        min_cross,
        max_cross,
        min_within,
        potential,
        merge,
        cohesion,
    )


def _cohesion(
    state: _Entities, table: EntityTable, row: int, a: int, b: int, share: float
) -> CohesionCheck:
    """:func:`~coordinator.strategies.cohesion.cohesion_check` from grouped statistics."""
    cross = float(table.total[row] / table.count[row])
    own = [w for w in (state.within_mean(a), state.within_mean(b)) if w is not None]
    reference: float | None = min(own) if own else None
    if reference is None and state.pooled_count:
        reference = state.pooled_total / state.pooled_count
    if reference is None or reference <= 0.0:
        return CohesionCheck(cross, reference, None, True)
    bar = share * reference
    return CohesionCheck(cross, reference, bar, cross >= bar)


def _result(state: _Entities, decisions: list[MergeDecision], passed_over: int) -> Agglomeration:
    entities = [state.members[i] for i in sorted(state.members)]
    return Agglomeration(entities, tuple(decisions), passed_over)
