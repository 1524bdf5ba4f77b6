"""Tests for coordinator.strategies.agglomeration on hand-made similarity matrices."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from coordinator.strategies.agglomeration import (
    UNKNOWN,
    Entity,
    EntitySimilarity,
    agglomerate,
    best_merge,
    entity_labels,
    entity_similarity,
    forget_stale,
)
from faultfleet.types import Float64Array


def similarity(m: int, pairs: Mapping[tuple[int, int], float]) -> Float64Array:
    """Symmetric m × m matrix, −1 (unknown) except for the given pairs."""
    alpha = np.full((m, m), UNKNOWN)
    for (i, j), value in pairs.items():
        alpha[i, j] = alpha[j, i] = value
    return alpha


def singletons(m: int) -> list[Entity]:
    return [(i,) for i in range(m)]


# FLACC Fig. 1 with clients 1…7 as indices 0…6: {1, 2}, {4, 5}, {6, 7} are three distributions
# and client 3 belongs with {1, 2}. Cross-distribution pairs are negative.
FIG1 = similarity(
    7,
    {
        **{(0, 1): 0.9, (5, 6): 0.85, (3, 4): 0.8},  # α_12, α_67, α_45
        **{(0, 2): 0.5, (1, 2): 0.7},  # α_13 = least similarity of 3 to {1, 2}
        **{(2, 5): 0.6, (2, 6): 0.3},  # α_73 = least similarity of 3 to {6, 7}
        **{(2, 3): 0.65, (2, 4): 0.2},  # α_53 = least similarity of 3 to {4, 5}
        **{(0, 3): -0.3, (0, 4): -0.2, (0, 5): -0.4, (0, 6): -0.25},
        **{(1, 3): -0.35, (1, 4): -0.3, (1, 5): -0.2, (1, 6): -0.3},
        **{(3, 5): -0.3, (3, 6): -0.2, (4, 5): -0.25, (4, 6): -0.35},
    },
)

FIG1_STEPS = [
    ((0,), (1,), 0.9, [(0, 1), (2,), (3,), (4,), (5,), (6,)]),
    ((5,), (6,), 0.85, [(0, 1), (2,), (3,), (4,), (5, 6)]),
    ((3,), (4,), 0.8, [(0, 1), (2,), (3, 4), (5, 6)]),
    ((0, 1), (2,), 0.5, [(0, 1, 2), (3, 4), (5, 6)]),
]


def test_fig1_example_merges_step_by_step() -> None:
    # Prepare
    entities = singletons(7)

    for first, second, alpha_min_cross, expected in FIG1_STEPS:
        # Execute: one merge per call, as with n_merge = 1
        outcome = agglomerate(FIG1, entities, alpha0=0.0, n_merge=1)

        # Assert
        (decision,) = outcome.decisions
        assert (decision.first, decision.second) == (first, second)
        assert decision.alpha_min_cross == pytest.approx(alpha_min_cross)
        assert decision.merge
        assert outcome.entities == expected
        entities = outcome.entities

    # Assert: the three sub-servers stop there (every cross similarity is negative)
    final = best_merge(FIG1, entities, 0.0)
    assert final is not None
    assert not final.merge
    assert final.alpha_min_cross < 0


def test_fig1_example_in_one_call_stops_at_the_first_failing_pair() -> None:
    # Execute
    outcome = agglomerate(FIG1, singletons(7), alpha0=0.0, n_merge=10)

    # Assert
    assert outcome.entities == [(0, 1, 2), (3, 4), (5, 6)]
    assert outcome.num_merges == 4
    assert [d.merge for d in outcome.decisions] == [True, True, True, True, False]


@pytest.mark.parametrize(
    ("alpha0", "expected"),
    [
        (0.1, [(0,), (1,), (2,)]),  # α_01 = 0.05 is not > 0.1
        (0.0, [(0, 1), (2,)]),  # client 2's least similarity −0.05 is not > 0
        (-0.1, [(0, 1, 2)]),
    ],
)
def test_alpha0_bounds_the_least_cross_similarity(alpha0: float, expected: list[Entity]) -> None:
    # Prepare
    alpha = similarity(3, {(0, 1): 0.05, (0, 2): -0.05, (1, 2): -0.02})

    # Execute
    outcome = agglomerate(alpha, singletons(3), alpha0=alpha0, n_merge=2)

    # Assert
    assert outcome.entities == expected


def test_alpha0_is_a_strict_bound() -> None:
    # Execute
    decision = best_merge(similarity(2, {(0, 1): 0.0}), singletons(2), 0.0)

    # Assert
    assert decision is not None
    assert not decision.merge


@pytest.mark.parametrize(
    ("high_cross", "potential", "merge"),
    [(0.5, -0.4, False), (0.9, 0.0, False), (0.95, 0.05, True)],
)
def test_potential_gates_two_subservers(high_cross: float, potential: float, merge: bool) -> None:
    # Prepare: sub-servers {0, 1} and {2, 3}, within 0.9, cross 0.5 but one pair
    alpha = similarity(
        4, {(0, 1): 0.9, (2, 3): 0.9, (0, 2): 0.5, (0, 3): 0.5, (1, 2): 0.5, (1, 3): high_cross}
    )

    # Execute
    decision = best_merge(alpha, [(0, 1), (2, 3)], 0.0)

    # Assert
    assert decision is not None
    assert decision.alpha_min_cross == pytest.approx(0.5)
    assert decision.alpha_max_cross == pytest.approx(high_cross)
    assert decision.alpha_min_within == pytest.approx(0.9)
    assert decision.potential == pytest.approx(potential)
    assert decision.merge is merge


def test_potential_does_not_apply_to_a_client_joining_a_subserver() -> None:
    # Prepare: Φ would be 0.5 − 0.9 < 0
    alpha = similarity(3, {(0, 1): 0.9, (0, 2): 0.5, (1, 2): 0.5})

    # Execute
    decision = best_merge(alpha, [(0, 1), (2,)], 0.0)

    # Assert
    assert decision is not None
    assert decision.potential is None
    assert decision.merge


def test_unknown_pairs_are_left_out_of_the_cross_minimum() -> None:
    # Prepare: α_12 unknown
    alpha = similarity(3, {(0, 1): 0.9, (0, 2): 0.6})

    # Execute
    decision = best_merge(alpha, [(0, 1), (2,)], 0.0)

    # Assert
    assert decision is not None
    assert decision.alpha_min_cross == pytest.approx(0.6)
    assert decision.merge


def test_unknown_pairs_are_left_out_of_the_within_minimum() -> None:
    # Prepare: {0, 1, 2} with α_02 unknown, {3, 4}; counting −1 would give Φ = 1.75 > 0
    cross = {(i, j): 0.7 for i in range(3) for j in (3, 4)}
    cross[(2, 4)] = 0.75
    alpha = similarity(5, {(0, 1): 0.9, (1, 2): 0.8, (3, 4): 0.85, **cross})

    # Execute
    decision = best_merge(alpha, [(0, 1, 2), (3, 4)], 0.0)

    # Assert
    assert decision is not None
    assert decision.alpha_min_within == pytest.approx(0.8)
    assert decision.potential == pytest.approx(-0.05)
    assert not decision.merge


def test_subserver_without_known_within_pair_uses_the_other_one() -> None:
    # Prepare: α_01 forgotten, α_23 = 0.9
    cross = {(0, 2): 0.5, (0, 3): 0.5, (1, 2): 0.5, (1, 3): 0.95}
    alpha = similarity(4, {(2, 3): 0.9, **cross})

    # Execute
    decision = best_merge(alpha, [(0, 1), (2, 3)], 0.0)

    # Assert
    assert decision is not None
    assert decision.alpha_min_within == pytest.approx(0.9)
    assert decision.merge


def test_subservers_without_any_known_within_pair_do_not_merge() -> None:
    # Prepare
    alpha = similarity(4, {(0, 2): 0.5, (0, 3): 0.5, (1, 2): 0.5, (1, 3): 0.95})

    # Execute
    decision = best_merge(alpha, [(0, 1), (2, 3)], 0.0)

    # Assert
    assert decision is not None
    assert decision.alpha_min_within is None
    assert decision.potential is None
    assert not decision.merge


def test_no_known_cross_pair_means_no_decision() -> None:
    # Prepare
    alpha = similarity(3, {(0, 1): 0.9})

    # Execute
    outcome = agglomerate(alpha, [(0, 1), (2,)], alpha0=0.0, n_merge=1)

    # Assert
    assert best_merge(alpha, [(0, 1), (2,)], 0.0) is None
    assert outcome.decisions == ()
    assert outcome.entities == [(0, 1), (2,)]


def test_entity_pairs_without_known_cross_pair_are_never_chosen() -> None:
    # Prepare: only α_01 = −0.5 is known; unknown pairs must not win eq. 9
    alpha = similarity(3, {(0, 1): -0.5})

    # Execute
    decision = best_merge(alpha, singletons(3), 0.0)

    # Assert
    assert decision is not None
    assert (decision.first, decision.second) == ((0,), (1,))
    assert not decision.merge


def test_only_the_argmax_pair_is_tested() -> None:
    # Prepare: {0,1}–{2,3} wins eq. 9 (0.6) but Φ < 0; {0,1}–4 (0.55) would pass if tried
    cross = {(i, j): 0.6 for i in (0, 1) for j in (2, 3)}
    alpha = similarity(5, {(0, 1): 0.9, (2, 3): 0.9, (0, 4): 0.55, (1, 4): 0.55, **cross})

    # Execute
    outcome = agglomerate(alpha, [(0, 1), (2, 3), (4,)], alpha0=0.0, n_merge=3)

    # Assert
    assert outcome.num_merges == 0
    (decision,) = outcome.decisions
    assert (decision.first, decision.second) == ((0, 1), (2, 3))
    assert outcome.entities == [(0, 1), (2, 3), (4,)]


def test_next_pair_merges_the_first_later_pair_that_passes() -> None:
    # Prepare: as above; with next_pair the failing {0,1}–{2,3} is passed over for {0,1}–4
    cross = {(i, j): 0.6 for i in (0, 1) for j in (2, 3)}
    alpha = similarity(5, {(0, 1): 0.9, (2, 3): 0.9, (0, 4): 0.55, (1, 4): 0.55, **cross})

    # Execute
    outcome = agglomerate(alpha, [(0, 1), (2, 3), (4,)], alpha0=0.0, n_merge=1, next_pair=True)

    # Assert: eq. 9's pair is recorded first (it is Fig. 8's quantity), then the merge
    passed, merged = outcome.decisions
    assert (passed.first, passed.second, passed.merge) == ((0, 1), (2, 3), False)
    assert passed.potential is not None
    assert passed.potential < 0
    assert (merged.first, merged.second, merged.merge) == ((0, 1), (4,), True)
    assert merged.alpha_min_cross == pytest.approx(0.55)
    assert outcome.num_merges == 1
    assert outcome.passed_over == 1
    assert outcome.entities == [(0, 1, 4), (2, 3)]


def test_next_pair_stops_at_the_first_pair_that_fails_eq16() -> None:
    # Prepare: the only later pair, {0,1}–4, is below α0
    cross = {(i, j): 0.6 for i in (0, 1) for j in (2, 3)}
    alpha = similarity(5, {(0, 1): 0.9, (2, 3): 0.9, (0, 4): -0.1, (1, 4): 0.3, **cross})

    # Execute
    outcome = agglomerate(alpha, [(0, 1), (2, 3), (4,)], alpha0=0.0, n_merge=1, next_pair=True)

    # Assert
    (decision,) = outcome.decisions
    assert (decision.first, decision.second, decision.merge) == ((0, 1), (2, 3), False)
    assert outcome.passed_over == 0
    assert outcome.entities == [(0, 1), (2, 3), (4,)]


def test_next_pair_leaves_an_argmax_pair_that_fails_eq16_alone() -> None:
    # Prepare: every cross pair is below α0 = 0.7, the argmax one included
    alpha = similarity(4, {(0, 1): 0.6, (2, 3): 0.5})

    # Execute
    outcome = agglomerate(alpha, singletons(4), alpha0=0.7, n_merge=2, next_pair=True)

    # Assert
    (decision,) = outcome.decisions
    assert (decision.first, decision.second, decision.merge) == ((0,), (1,), False)
    assert outcome.entities == singletons(4)


def test_ties_go_to_the_first_pair_in_list_order() -> None:
    # Execute
    decision = best_merge(similarity(4, {(2, 3): 0.7, (0, 1): 0.7}), singletons(4), 0.0)

    # Assert
    assert decision is not None
    assert (decision.first, decision.second) == ((0,), (1,))


def test_n_merge_recomputes_eq9_after_each_merge() -> None:
    # Prepare: after {0, 1} forms, its least similarity to 2 is 0.1, so 3–4 (0.8) beats α_12
    alpha = similarity(5, {(0, 1): 0.9, (1, 2): 0.85, (0, 2): 0.1, (3, 4): 0.8})

    # Execute
    outcome = agglomerate(alpha, singletons(5), alpha0=0.0, n_merge=2)

    # Assert
    assert [(d.first, d.second) for d in outcome.decisions] == [((0,), (1,)), ((3,), (4,))]
    assert outcome.entities == [(0, 1), (2,), (3, 4)]


@pytest.mark.parametrize("seed", range(5))
def test_incremental_merge_matches_recomputation(seed: int) -> None:
    # Prepare: random similarities, 30 % unknown, random partition of 12 clients
    rng = np.random.default_rng(seed)
    upper = np.triu(rng.uniform(-1.0, 1.0, (12, 12)), k=1)
    alpha = upper + upper.T
    alpha[rng.random((12, 12)) < 0.3] = UNKNOWN
    alpha = np.minimum(alpha, alpha.T)
    labels = rng.integers(0, 5, 12)
    entities = [tuple(int(i) for i in np.flatnonzero(labels == k)) for k in np.unique(labels)]
    first, second = sorted(rng.choice(len(entities), 2, replace=False).tolist())

    # Execute
    incremental = entity_similarity(alpha, entities).merged(first, second)
    joined = list(entities)
    joined[first] = tuple(sorted(entities[first] + entities[second]))
    del joined[second]
    reference = entity_similarity(alpha, joined)

    # Assert
    np.testing.assert_array_equal(incremental.lowest, reference.lowest)
    np.testing.assert_array_equal(incremental.highest, reference.highest)


def test_entity_similarity_of_nothing_is_empty() -> None:
    # Execute
    result = entity_similarity(np.full((2, 2), UNKNOWN), [])

    # Assert
    assert result == EntitySimilarity(result.lowest, result.highest)
    assert result.lowest.shape == (0, 0)
    assert best_merge(np.full((2, 2), UNKNOWN), [], 0.0) is None


def test_a_thousand_singletons_merge_their_most_similar_pair() -> None:
    # Prepare
    rng = np.random.default_rng(0)
    upper = np.triu(rng.uniform(-0.9, 0.9, (1000, 1000)), k=1)
    upper[17, 512] = 0.99
    alpha = upper + upper.T

    # Execute
    outcome = agglomerate(alpha, singletons(1000), alpha0=0.0, n_merge=1)

    # Assert
    assert len(outcome.entities) == 999
    assert (17, 512) in outcome.entities


@pytest.mark.parametrize(
    ("memory", "server_round", "known"),
    [(2, 3, True), (2, 5, True), (2, 6, False), (0, 3, True), (0, 4, False), (None, 1000, True)],
)
def test_forget_stale_keeps_a_pair_for_memory_rounds(
    memory: int | None, server_round: int, known: bool
) -> None:
    # Prepare: pair (0, 1) last seen at round 3
    alpha = similarity(2, {(0, 1): 0.4})
    tau = np.full((2, 2), 3, dtype=np.int64)

    # Execute
    forgotten = forget_stale(alpha, tau, server_round, memory)

    # Assert
    assert forgotten[0, 1] == (0.4 if known else UNKNOWN)
    assert alpha[0, 1] == 0.4


@pytest.mark.parametrize(
    ("alpha", "entities", "match"),
    [
        (np.zeros((2, 3)), [(0,), (1,)], "square"),
        (np.zeros((3, 3)), [(0, 1), (1, 2)], "disjoint"),
        (np.zeros((3, 3)), [(0,), ()], "empty"),
        (np.zeros((3, 3)), [(0,), (3,)], "outside"),
    ],
)
def test_invalid_inputs_raise(alpha: Float64Array, entities: list[Entity], match: str) -> None:
    # Execute / Assert
    with pytest.raises(ValueError, match=match):
        entity_similarity(alpha, entities)


def test_entity_labels_give_each_client_its_entitys_position_and_minus_one_to_the_rest() -> None:
    labels = entity_labels(7, [(4, 1), (0,), (), (2, 5, 6)])
    assert labels.dtype == np.int64
    assert labels.tolist() == [1, 0, 3, -1, 0, 3, 3]
    assert entity_labels(3, []).tolist() == [-1, -1, -1]
