"""FLACC's entity merging on a given similarity matrix: pure functions, no models.

Mehta & Shao, "A greedy agglomerative framework for clustered federated learning", IEEE
Trans. Ind. Inform. 19(12), 2023, doi:10.1109/TII.2023.3252599: §IV-B (eqs. 9–17),
§IV-C (eq. 18) and Algorithm 1, lines 13–19. An *entity* is a sorted tuple of client indices:
a singleton client or a sub-server (two clients or more).

Decisions on points the paper leaves open (papers/README.md settles the first two):

- α_ij = −1 means "unknown" (never seen together, or forgotten under eq. 18) and such pairs
  are left out of every minimum and maximum of eqs. 9, 11, 12 and 15 ("subject to α > −1",
  §IV-C). A measured cosine of exactly −1 is therefore unknown too.
- Eq. 9 ranges only over entity pairs with at least one known cross pair: two entities with
  no known cross pair cannot merge. Ties go to the first pair in list order (row-major).
- Eq. 12 with unknown pairs left out: α_min^within is the minimum over the known within-pairs
  of E1 and of E2 together, so a sub-server whose own pairs are all unknown contributes
  nothing. If neither sub-server has a known within-pair, Φ (eq. 13) cannot be evaluated and
  the two sub-servers do not merge.
- Algorithm 1, lines 14–16 test only the argmax pair. If it fails eq. 16 or eq. 14 nothing
  merges in that iteration; the entities are then unchanged, so every later iteration of the
  round would test the same pair, and merging stops for the round. By default the next-best
  pair is never tried. With ``next_pair=True`` an argmax pair of two sub-servers that passes
  eq. 16 but fails eq. 14 is passed over, and the pairs are tried in eq. 9's order until one
  passes both or one fails eq. 16 (every later pair then fails it too). Without this a
  round's argmax pair can fail eq. 14 round after round while α keeps its value, and
  merging stalls until N_sep separates the entities as they are.
- With ``cohesion_share`` (FLACC's default rule, :mod:`.cohesion`) a pair must also pass the
  cohesion test, and the pairs are tried in eq. 9's order until one passes eqs. 14 and 16 and
  the test, or one fails eq. 16: a refused pair of two groups never blocks a later pair of
  pieces of one group.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from coordinator.strategies.cohesion import CohesionCheck, cohesion_check
from faultfleet.types import Float64Array, IntArray

Entity = tuple[int, ...]
"""Sorted client indices of a singleton client or a sub-server."""

UNKNOWN = -1.0
"""Similarity of a pair never seen together, or forgotten (Algorithm 1, line 2; eq. 18)."""


@dataclass(frozen=True)
class EntitySimilarity:
    """Extremes of the known similarities between and within entities.

    Attributes
    ----------
    lowest : array of shape (n_entities, n_entities), float64
        Off the diagonal, the minimum known cross similarity (eqs. 9, 15); on the diagonal,
        the minimum known similarity within the entity (eq. 12). ``+inf`` where no pair is
        known.
    highest : array of shape (n_entities, n_entities), float64
        The same with maxima (eq. 11); ``-inf`` where no pair is known.
    """

    lowest: Float64Array
    highest: Float64Array

    def merged(self, first: int, second: int) -> EntitySimilarity:
        """The extremes after entity ``second`` joins entity ``first`` (eq. 10), in O(n²).

        Row then column ``first`` take the element-wise extreme with ``second``, which also
        folds the cross pairs of the two into the new within-extreme; ``second`` is removed.
        """
        lowest = self.lowest.copy()
        highest = self.highest.copy()
        for extremes, combine in ((lowest, np.minimum), (highest, np.maximum)):
            extremes[first, :] = combine(extremes[first, :], extremes[second, :])
            extremes[:, first] = combine(extremes[:, first], extremes[:, second])
        keep = np.arange(lowest.shape[0]) != second
        return EntitySimilarity(lowest[np.ix_(keep, keep)], highest[np.ix_(keep, keep)])


@dataclass(frozen=True)
class MergeDecision:
    """The entity pair that solves eq. 9 and whether it passes eqs. 14 and 16.

    Attributes
    ----------
    first, second : Entity
        The pair, ``first`` earlier in the entity list.
    alpha_min_cross : float
        Eq. 15, the value that solves eq. 9 (the quantity of FLACC Fig. 8).
    alpha_max_cross : float
        Eq. 11.
    alpha_min_within : float or None
        Eq. 12 over the known within-pairs of both entities; None when none is known.
    potential : float or None
        Sub-server combination potential Φ (eq. 13); None unless both entities are
        sub-servers with a known α_min^within.
    merge : bool
        Whether the pair merges: α_min^cross > α0 (eq. 16), for two sub-servers Φ > 0
        (eq. 14), and, under the cohesion rule, the cohesion test.
    cohesion : CohesionCheck or None
        The cohesion test of the pair (:mod:`.cohesion`); None under Algorithm 1 as written.
    """

    first: Entity
    second: Entity
    alpha_min_cross: float
    alpha_max_cross: float
    alpha_min_within: float | None
    potential: float | None
    merge: bool
    cohesion: CohesionCheck | None = None


@dataclass(frozen=True)
class Agglomeration:
    """Outcome of one round of merging: the new entity list and each iteration's decision.

    With ``next_pair`` an iteration that passed over eq. 9's pair records that pair's
    failing decision before the decision of the pair that merged.
    """

    entities: list[Entity]
    decisions: tuple[MergeDecision, ...]
    passed_over: int = 0
    """Iterations whose eq. 9 pair was refused while a later pair merged (``next_pair`` or
    the cohesion rule)."""

    @property
    def num_merges(self) -> int:
        """How many entity pairs merged."""
        return sum(d.merge for d in self.decisions)


def entity_similarity(alpha: Float64Array, entities: Sequence[Entity]) -> EntitySimilarity:
    """Known-pair extremes for every entity pair, vectorised over clients (O(m²)).

    Parameters
    ----------
    alpha : array of shape (m, m), float64
        Client similarity matrix; values ≤ −1 are unknown, the diagonal is ignored.
    entities : sequence of Entity
        Disjoint, non-empty entities; clients in none of them are ignored.
    """
    members = [np.asarray(e, dtype=np.intp) for e in entities]
    _check(alpha, members)
    if len(members) == 0:
        return EntitySimilarity(np.zeros((0, 0)), np.zeros((0, 0)))
    order = np.concatenate(members)
    starts = np.cumsum([0] + [len(e) for e in members[:-1]])
    block = alpha[np.ix_(order, order)]
    known = block > UNKNOWN
    np.fill_diagonal(known, False)  # a client with itself carries no information
    lowest = np.minimum.reduceat(np.where(known, block, np.inf), starts, axis=0)
    highest = np.maximum.reduceat(np.where(known, block, -np.inf), starts, axis=0)
    return EntitySimilarity(
        np.minimum.reduceat(lowest, starts, axis=1),
        np.maximum.reduceat(highest, starts, axis=1),
    )


def best_merge(
    alpha: Float64Array, entities: Sequence[Entity], alpha0: float
) -> MergeDecision | None:
    """Eq. 9's entity pair and its merge conditions; None when no cross pair is known."""
    tried = _decide(entity_similarity(alpha, entities), entities, alpha0, next_pair=False)
    return tried[0][2] if tried else None


def agglomerate(
    alpha: Float64Array,
    entities: Sequence[Entity],
    *,
    alpha0: float,
    n_merge: int,
    next_pair: bool = False,
    cohesion_share: float | None = None,
) -> Agglomeration:
    """Up to ``n_merge`` greedy merges (Algorithm 1, lines 13–18), recomputing eq. 9 each time.

    The merged entity takes the place of the earlier of the two, so a list sorted by smallest
    client index stays sorted. Merging stops early when no pair is known or the argmax pair
    fails its conditions, unless ``next_pair`` lets a later pair merge instead of an argmax
    pair that fails only eq. 14, or ``cohesion_share`` (the cohesion rule, which implies the
    search) a later pair that passes the cohesion test (see the module docstring).
    """
    current = list(entities)
    similarity = entity_similarity(alpha, current)
    decisions: list[MergeDecision] = []
    passed_over = 0
    rule = None
    if cohesion_share is not None:
        rule = _CohesionRule(np.where(alpha > UNKNOWN, alpha, np.nan), cohesion_share)
    for _ in range(n_merge):
        tried = _decide(similarity, current, alpha0, next_pair=next_pair, rule=rule)
        if not tried:
            break
        if len(tried) > 1:  # eq. 9's pair failed eq. 14 and a later pair merges
            decisions.append(tried[0][2])
            passed_over += 1
        first, second, decision = tried[-1]
        decisions.append(decision)
        if not decision.merge:
            break
        current[first] = tuple(sorted(decision.first + decision.second))  # eq. 10
        del current[second]
        similarity = similarity.merged(first, second)
    return Agglomeration(current, tuple(decisions), passed_over)


def forget_stale(
    alpha: Float64Array, tau: IntArray, server_round: int, memory: int | None
) -> Float64Array:
    """Eq. 18: a copy of ``alpha`` with −1 wherever ``server_round − tau > memory``.

    A pair last seen at round τ is kept for rounds τ … τ + T; ``memory=None`` is T = ∞.
    """
    forgotten = alpha.copy()
    if memory is not None:
        forgotten[server_round - tau > memory] = UNKNOWN
    return forgotten


@dataclass(frozen=True)
class _CohesionRule:
    """The cohesion test's inputs for one round: α with NaN for unknown, and the share."""

    similarity: Float64Array
    share: float


def _decide(
    similarity: EntitySimilarity,
    entities: Sequence[Entity],
    alpha0: float,
    *,
    next_pair: bool,
    rule: _CohesionRule | None = None,
) -> list[tuple[int, int, MergeDecision]]:
    """Positions and decision of eq. 9's pair; empty when no cross pair is known.

    With ``next_pair``, when eq. 9's pair passes eq. 16 but fails eq. 14, the list goes on to
    the first later pair in eq. 9's order that merges, if one does before eq. 16 fails; under
    the cohesion rule the same holds for a pair that fails eq. 14 or the cohesion test.
    """
    n = similarity.lowest.shape[0]
    candidates = np.triu(np.isfinite(similarity.lowest), k=1)
    if not candidates.any():
        return []
    score = np.where(candidates, similarity.lowest, -np.inf).ravel()
    # eq. 9, first pair in row-major order on ties (a stable sort keeps that order)
    order = np.argsort(-score, kind="stable")[: int(candidates.sum())]
    first = _pair_decision(similarity, entities, alpha0, *divmod(int(order[0]), n), rule=rule)
    searching = next_pair or rule is not None
    if first[2].merge or not searching or first[2].alpha_min_cross <= alpha0:
        return [first]
    for flat in order[1:]:
        tried = _pair_decision(similarity, entities, alpha0, *divmod(int(flat), n), rule=rule)
        if tried[2].alpha_min_cross <= alpha0:  # eq. 16 fails from here on
            break
        if tried[2].merge:
            return [first, tried]
    return [first]


def _pair_decision(
    similarity: EntitySimilarity,
    entities: Sequence[Entity],
    alpha0: float,
    a: int,
    b: int,
    *,
    rule: _CohesionRule | None = None,
) -> tuple[int, int, MergeDecision]:
    """Eqs. 11–16 for the entity pair at positions ``a`` < ``b``, and the cohesion test."""
    min_cross = float(similarity.lowest[a, b])  # eq. 15
    max_cross = float(similarity.highest[a, b])  # eq. 11
    within = float(min(similarity.lowest[a, a], similarity.lowest[b, b]))  # eq. 12
    min_within = within if np.isfinite(within) else None
    both_subservers = len(entities[a]) >= 2 and len(entities[b]) >= 2
    potential = None
    if both_subservers and min_within is not None:
        potential = max_cross - min_within  # eq. 13
    merge = min_cross > alpha0 and (  # eq. 16
        not both_subservers or (potential is not None and potential > 0)  # eq. 14
    )
    cohesion = None
    if rule is not None and merge:
        cohesion = cohesion_check(rule.similarity, entities, a, b, rule.share)
        merge = cohesion.passed
    decision = MergeDecision(
        tuple(entities[a]),
        tuple(entities[b]),
        min_cross,
        max_cross,
        min_within,
        potential,
        merge,
        cohesion,
    )
    return a, b, decision


def _check(alpha: Float64Array, members: Sequence[IntArray]) -> None:
    if alpha.ndim != 2 or alpha.shape[0] != alpha.shape[1]:
        raise ValueError(f"alpha must be a square matrix, got shape {alpha.shape}")
    if any(len(e) == 0 for e in members):
        raise ValueError("entities must not be empty")
    flat = np.concatenate(members) if members else np.zeros(0, dtype=np.intp)
    if len(np.unique(flat)) != len(flat):
        raise ValueError("entities must be disjoint: a client appears in two of them")
    if len(flat) and (flat.min() < 0 or flat.max() >= alpha.shape[0]):
        raise ValueError(f"entities name clients outside 0 … {alpha.shape[0] - 1}")


def entity_labels(n_clients: int, entities: Sequence[Entity]) -> IntArray:
    """The position in ``entities`` of every client's entity; −1 for a client in none.

    One vectorised assignment, not one per entity: FLACC starts 10,000 agents as 10,000
    singletons.
    """
    labels = np.full(n_clients, -1, dtype=np.int64)
    sizes = [len(e) for e in entities]
    members = np.fromiter(itertools.chain.from_iterable(entities), np.int64, sum(sizes))
    labels[members] = np.repeat(np.arange(len(entities), dtype=np.int64), sizes)
    return labels


def entities_after_leaving(
    entities: Sequence[Entity], kept: Sequence[int], *, keep_empty: bool
) -> list[Entity]:
    """The entities once only the clients at old positions ``kept`` remain, renumbered.

    Parameters
    ----------
    entities : sequence of Entity
        Over the old positions.
    kept : sequence of int
        Old positions of the remaining clients, in order: the new position of ``kept[i]``
        is ``i``.
    keep_empty : bool
        Keep an entity every member of which left, as an empty tuple at its place (FLACC
        after separation, where an entity's place names its model); else drop it.
    """
    new_position = {old: new for new, old in enumerate(kept)}
    after = [tuple(new_position[i] for i in e if i in new_position) for e in entities]
    return [e for e in after if e or keep_empty]
