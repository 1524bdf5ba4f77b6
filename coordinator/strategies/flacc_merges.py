"""FLACC's merges: the merge step of a clustering round, its record, and the evidence.

:func:`merge_step` is Algorithm 1's lines 13–19 on the similarities the strategy recorded:
forget the pairs older than the memory T (eq. 18), then merge entities greedily
(:func:`~.agglomeration.agglomerate`, or under sketches
:meth:`~.flacc_sketch.SketchedPairs.agglomerate`). Every merge is kept in the strategy's
:class:`~coordinator.strategies.merge_history.MergeHistory`: its round, the two entities,
the α_min^cross of eq. 15 that let them merge and the bar α0 of eq. 16 it cleared.
:func:`flacc_evidence` turns the strategy's similarity memory (α of eq. 19 for the pairs of
the last T rounds, or under sketches the pair list) and those merges into the
:class:`~coordinator.strategies.evidence.ClusterEvidence` that
:mod:`coordinator.strategies.quality` scores: per entity, the lowest α_min^cross at which a
merge built it, and the merges of the latest round that merged. The functions read and set
the attributes of a :class:`~coordinator.strategies.flacc.FLACC`, as :mod:`.flacc_state`
does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.strategies.agglomeration import UNKNOWN, agglomerate, forget_stale
from coordinator.strategies.evidence import ClusterEvidence, known_or_nan
from coordinator.strategies.known_pairs import KnownPairs
from faultfleet.types import Float64Array

if TYPE_CHECKING:
    from coordinator.strategies.flacc import FLACC


def merge_step(strategy: FLACC, server_round: int) -> None:
    """Lines 13–19 on the similarities ``strategy`` recorded: forget stale pairs (eq. 18),
    merge (eqs. 9–17), and record the merges and the round's figures on ``strategy``."""
    options = {
        "alpha0": strategy.alpha0,
        "n_merge": strategy.n_merge,
        "next_pair": strategy.next_pair,
        "cohesion_share": strategy.cohesion_share if strategy.rule == "cohesion" else None,
    }
    if strategy.sketched_ is not None:
        strategy.sketched_.forget(server_round, strategy.memory)
        outcome = strategy.sketched_.agglomerate(strategy.entities_, **options)
    else:
        strategy.alpha_ = forget_stale(
            strategy.alpha_, strategy.tau_, server_round, strategy.memory
        )
        alpha, entities = strategy.alpha_, strategy.entities_
        outcome = agglomerate(alpha, entities, **options)  # type: ignore[arg-type]
    strategy.merge_history_.record(server_round, outcome.decisions, strategy.alpha0)
    strategy._set_entities(outcome.entities)
    first = outcome.decisions[0] if outcome.decisions else None
    strategy.last_alpha_min_cross_ = None if first is None else first.alpha_min_cross
    strategy.last_passed_over_ = outcome.passed_over
    without = strategy.rounds_without_merge_
    strategy.rounds_without_merge_ = 0 if outcome.num_merges else without + 1


def flacc_evidence(strategy: FLACC) -> ClusterEvidence:
    """The cosines ``strategy`` merges on (eq. 19, pairs of the last T rounds; frozen at
    separation), per entity the lowest α_min^cross at which a merge built it, and the merges
    of the latest round that merged."""
    history = strategy.merge_history_
    last = history.last_round
    sketched = strategy.sketched_
    similarity: Float64Array | KnownPairs
    if sketched is None:
        similarity = known_or_nan(strategy.alpha_, UNKNOWN)  # a copy: α is the strategy's
    else:
        # the remembered pairs alone: an m × m matrix would take 800 MB at 10,000 clients
        memory = sketched.memory
        known = memory.value > UNKNOWN
        similarity = KnownPairs.from_arrays(
            memory.n_clients, memory.first[known], memory.second[known], memory.value[known]
        )
    return ClusterEvidence(
        client_ids=strategy.client_ids_,
        labels=tuple(int(k) for k in strategy._labels),
        similarity=similarity,
        measure="cosine similarity of weight updates (FLACC eq. 19), pairs seen in "
        "the last T rounds of the clustering phase",
        settled=strategy.separated_,
        weakest_merges=history.weakest(strategy._labels),
        merge_measure="alpha_min^cross of FLACC eq. 15 (cosine of the least similar "
        "pair across the two merged entities)",
        unrelated=0.0,
        merges=() if last is None else history.merges_of_round(last),
    )
