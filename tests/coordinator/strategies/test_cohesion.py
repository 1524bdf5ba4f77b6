"""FLACC's cohesion test: pieces of one group pass, two groups fail, and with nothing to
compare with the test stays out of the way."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.strategies.agglomeration import UNKNOWN, agglomerate
from coordinator.strategies.cohesion import cohesion_check, pooled_cohesion
from faultfleet.types import Float64Array

NAN = np.nan


def similarity(m: int, pairs: dict[tuple[int, int], float]) -> Float64Array:
    """Symmetric m × m matrix, NaN where no pair is given."""
    matrix = np.full((m, m), NAN)
    for (i, j), value in pairs.items():
        matrix[i, j] = matrix[j, i] = value
    return matrix


def two_groups(cross: float) -> Float64Array:
    """Clients 0–2 and 3–5, within cosines 0.5, every cross pair ``cross``."""
    pairs = {(i, j): 0.5 for group in ((0, 1, 2), (3, 4, 5)) for i in group for j in group if i < j}
    pairs |= {(i, j): cross for i in (0, 1, 2) for j in (3, 4, 5)}
    return similarity(6, pairs)


def test_pieces_of_one_group_pass() -> None:
    check = cohesion_check(two_groups(0.48), [(0, 1, 2), (3, 4, 5)], 0, 1, share=0.7)

    assert check.cross_mean == pytest.approx(0.48)
    assert check.reference == pytest.approx(0.5)
    assert check.bar == pytest.approx(0.35)
    assert check.passed


def test_two_groups_with_positive_cross_cosines_fail() -> None:
    # Every cross pair is positive: eq. 16 with α0 = 0 would let them merge
    check = cohesion_check(two_groups(0.1), [(0, 1, 2), (3, 4, 5)], 0, 1, share=0.7)

    assert check.cross_mean == pytest.approx(0.1)
    assert not check.passed


def test_the_reference_is_the_looser_entitys_cohesion() -> None:
    pairs = {(0, 1): 0.9, (2, 3): 0.4, (0, 2): 0.3, (1, 3): 0.3}

    check = cohesion_check(similarity(4, pairs), [(0, 1), (2, 3)], 0, 1, share=0.7)

    assert check.reference == pytest.approx(0.4)
    assert check.bar == pytest.approx(0.28)
    assert check.passed


def test_two_single_clients_are_measured_against_the_fleets_sub_servers() -> None:
    # Prepare: one sub-server {0, 1} of cohesion 0.6; clients 2 and 3 alone
    pairs = {(0, 1): 0.6, (2, 3): 0.3, (2, 4): 0.5}
    matrix = similarity(5, pairs)
    entities = [(0, 1), (2,), (3,), (4,)]

    # Execute
    weak = cohesion_check(matrix, entities, 1, 2, share=0.7)
    strong = cohesion_check(matrix, entities, 1, 3, share=0.7)

    # Assert
    assert pooled_cohesion(matrix, entities) == pytest.approx(0.6)
    assert weak.reference == pytest.approx(0.6)
    assert not weak.passed
    assert strong.cross_mean == pytest.approx(0.5)
    assert strong.passed


@pytest.mark.parametrize("within", [None, 0.0, -0.2])
def test_with_nothing_positive_to_compare_with_eq16_decides_alone(within: float | None) -> None:
    pairs = {(0, 2): 0.05}
    if within is not None:
        pairs[(0, 1)] = within

    check = cohesion_check(similarity(3, pairs), [(0, 1), (2,)], 0, 1, share=0.7)

    assert check.bar is None
    assert check.passed


def test_no_known_cross_pair_fails_when_there_is_a_reference() -> None:
    check = cohesion_check(similarity(4, {(0, 1): 0.5}), [(0, 1), (2, 3)], 0, 1, share=0.7)

    assert check.cross_mean is None
    assert not check.passed


@given(
    cross=st.floats(-1.0, 1.0).filter(lambda x: abs(x - 0.35) > 1e-6),
    scale=st.floats(0.05, 1.0),
    order=st.permutations(range(6)),
)
def test_the_decision_ignores_client_order_and_a_positive_scale(
    cross: float, scale: float, order: list[int]
) -> None:
    # Prepare: the same fleet with clients renumbered and every cosine scaled
    matrix = two_groups(cross)
    moved = np.empty_like(matrix)
    position = {old: new for new, old in enumerate(order)}
    for i in range(6):
        for j in range(6):
            moved[position[i], position[j]] = matrix[i, j] * scale
    entities = [(0, 1, 2), (3, 4, 5)]
    renamed = [tuple(sorted(position[i] for i in e)) for e in entities]

    # Execute
    original = cohesion_check(matrix, entities, 0, 1, share=0.7)
    changed = cohesion_check(moved, renamed, 0, 1, share=0.7)

    # Assert
    assert changed.passed == original.passed == (cross >= 0.35)


def alpha_of(matrix: Float64Array) -> Float64Array:
    """FLACC's α: −1 (unknown) where ``matrix`` is NaN."""
    return np.where(np.isnan(matrix), UNKNOWN, matrix)


def test_agglomerate_refuses_two_groups_and_merges_a_later_pair_of_one_group() -> None:
    # Prepare: groups A = {0,1,2} and B = {3,4} are entities, their remembered cross pairs
    # all positive, and Φ > 0 (0.12 > A's weakest pair 0.1); 5 belongs to B, but one of its
    # pairs is so noisy that its least cross similarity (0.08) ranks below A–B's in eq. 9
    pairs = {(0, 1): 0.5, (0, 2): 0.5, (1, 2): 0.1, (3, 4): 0.5}
    pairs |= {(0, 3): 0.12, (1, 4): 0.1}
    pairs |= {(3, 5): 0.7, (4, 5): 0.08}
    alpha = alpha_of(similarity(6, pairs))
    entities = [(0, 1, 2), (3, 4), (5,)]

    # Execute
    paper = agglomerate(alpha, entities, alpha0=0.0, n_merge=1)
    cohesion = agglomerate(alpha, entities, alpha0=0.0, n_merge=1, cohesion_share=0.7)

    # Assert: Algorithm 1 joins the two groups (α_min^cross 0.1 > 0, Φ > 0); the cohesion
    # rule refuses them (mean 0.11, bar 0.7 · 0.367) and merges the later pair B–5 instead
    # (mean 0.39, bar 0.7 · 0.5)
    assert paper.entities == [(0, 1, 2, 3, 4), (5,)]
    refused = cohesion.decisions[0]
    assert refused.cohesion is not None
    assert not refused.merge
    assert refused.cohesion.cross_mean == pytest.approx(0.11)
    assert cohesion.num_merges == 1
    assert cohesion.entities == [(0, 1, 2), (3, 4, 5)]
    assert cohesion.passed_over == 1
