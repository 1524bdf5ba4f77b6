"""FLACC's cohesion test: a merge must keep the merged entity as alike as its parts.

Algorithm 1 merges eq. 9's entity pair whenever its least similar cross pair clears α0
(eq. 16; α0 = 0 in the paper). Update cosines between machines of *different* groups are
not spread around 0 alike for every two groups: two groups with related conditions give
cross cosines a little above 0 in every round (measured on mixed-fault, paper profile:
within-group cosines 0.4–0.6 in most rounds, cross-group −0.07 to +0.08 on average with
pairs up to 0.4). Once every true group is an entity, the next eq. 9 pair is two groups,
and whenever the few cross pairs remembered over the last T rounds happen to all be
positive, eq. 16 lets the two merge. Nothing later undoes it.

The cohesion test asks of that merge what a plant engineer would: are the two entities as
alike *to each other* as their members are *among themselves*? The mean of the known cross
similarities between E1 and E2 must reach ``share`` times the cohesion of the looser of the
two, the mean of its known within pairs:

    mean_{i ∈ E1, j ∈ E2} α_ij  ≥  share · min(w(E1), w(E2)),    w(E) = mean_{i<j ∈ E} α_ij.

Pieces of one group have cross similarities at the level of their within similarities and
pass with room to spare; two groups, whose cross mean sits near 0 whatever its sign, fail
it by the width of the gap between the two levels. The bar is anchored at 0, the cosine of
two unrelated updates of one shared model (eq. 17's geometry), so a fleet of one group
merges as freely as Algorithm 1 lets it: its cross and within levels are the same. Means
rather than the extremes of eqs. 11–15 make the test steadier the more pairs are known.

Why 0.7 (the default ``cohesion_share``), measured on tuning recordings only — FLACC's
clustering phase recorded with ``benchmarks/record_flacc_similarity.py`` for mixed-fault
(paper profile, seeds 5–7 and 15–17; quick profile, seeds 5–18) and the quick label-groups
fleets of ``benchmarks/robustness.py`` (three-groups, twelve-groups, unequal-sizes and
shared-label, seeds 5–9): 40 recordings, none of the seeds the acceptance runs report on.
Replaying Algorithm 1 on them and testing eq. 9's five best pairs of every round whose
entities are each one true group, the cross mean over the reference was 0.74–2.83 (5th
percentile 0.86) for two pieces of one group and 0.04–0.62 (95th percentile 0.57) for two
groups when both entities were sub-servers; a single client widens both (pieces of one group
from 0.40, two groups up to 0.72), which the rule absorbs by trying the next pair and by
the rounds that follow. Replayed with the rule, shares 0.65–0.8 all found every recording's
groups with ARI >= 0.9 (38 of 40 exactly; the other two leave one noisy machine alone),
where Algorithm 1 merged two groups in 3 of the 40 (two groups sharing a label twice; two
related groups of unequal-sizes once, which then kept merging). 0.7 is the middle of that
range. More merges per round (``n_merge`` 2 or 3) made 2–4 of the 40 wrong even with the
rule, so FLACC §VI's ``n_merge = 1`` stays.

When neither entity has a known within pair (two single clients, or a client and a
sub-server none of whose pairs is remembered), the cohesion of every sub-server of the fleet,
pooled, stands in; before the first sub-server exists there is nothing to compare with, and
eq. 16 decides alone. A reference that is not positive (no structure measured yet) does not
refuse a merge either.

Pure functions on a similarity matrix with NaN where a pair is unknown (FLACC's −1, eq. 18),
used by :func:`~coordinator.strategies.agglomeration.agglomerate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from faultfleet.types import Float64Array, IntArray


@dataclass(frozen=True)
class CohesionCheck:
    """The cohesion test of one entity pair.

    Attributes
    ----------
    cross_mean : float or None
        Mean known α between the two entities; None when no cross pair is known.
    reference : float or None
        The cohesion it is compared with (the looser entity's, else the fleet's pooled
        sub-server cohesion); None when nothing is known to compare with.
    bar : float or None
        ``share · reference``: what ``cross_mean`` must reach; None when the test does not
        apply (no reference, or a reference that is not positive).
    passed : bool
        Whether the test lets the pair merge.
    """

    cross_mean: float | None
    reference: float | None
    bar: float | None
    passed: bool


def cohesion_check(
    similarity: Float64Array,
    entities: Sequence[Sequence[int]],
    first: int,
    second: int,
    share: float,
) -> CohesionCheck:
    """The cohesion test (module docstring) of ``entities[first]`` and ``entities[second]``.

    Parameters
    ----------
    similarity : array of shape (m, m), float64
        FLACC's α with NaN for unknown pairs; the diagonal is ignored.
    entities : sequence of sequences of client indices
        The current entities (disjoint).
    first, second : int
        Positions of the pair in ``entities``.
    share : float
        Share of the reference cohesion the cross mean must reach, in [0, 1].
    """
    a = np.asarray(entities[first], dtype=np.int64)
    b = np.asarray(entities[second], dtype=np.int64)
    cross = _known_mean(similarity[np.ix_(a, b)])
    own = [w for w in (_within_mean(similarity, a), _within_mean(similarity, b)) if w is not None]
    reference = min(own) if own else pooled_cohesion(similarity, entities)
    if reference is None or reference <= 0.0:
        return CohesionCheck(cross, reference, None, True)
    bar = share * reference
    passed = cross is not None and cross >= bar
    return CohesionCheck(cross, reference, bar, passed)


def pooled_cohesion(similarity: Float64Array, entities: Sequence[Sequence[int]]) -> float | None:
    """Mean of the known within pairs of every sub-server, pooled; None when none is known."""
    total, count = 0.0, 0
    for entity in entities:
        if len(entity) < 2:
            continue
        rows = np.asarray(entity, dtype=np.int64)
        upper = similarity[np.ix_(rows, rows)][np.triu_indices(len(rows), k=1)]
        known = upper[~np.isnan(upper)]
        total += float(known.sum())
        count += known.size
    return total / count if count else None


def _within_mean(similarity: Float64Array, rows: IntArray) -> float | None:
    if len(rows) < 2:
        return None
    return _known_mean(similarity[np.ix_(rows, rows)][np.triu_indices(len(rows), k=1)])


def _known_mean(values: Float64Array) -> float | None:
    known = values[~np.isnan(values)]
    return float(known.mean()) if known.size else None
