"""Tests for coordinator.strategies.fedac_clustering: FedAC's clustering maths by hand."""

from __future__ import annotations

import numpy as np
import pytest

from coordinator.strategies.fedac_clustering import (
    TuningStep,
    assign_most_similar,
    bisect,
    cluster_means,
    cosine_matrix,
    farthest_first,
    granularity,
    leave_one_out_similarity,
    low_rank_scores,
    plan_tuning,
    principal_directions,
    squared_distances,
)

E = np.eye(3)


def test_principal_directions_order_by_variance_and_stop_at_the_rank() -> None:
    # Spread 3 along e2, 1 along e0, nothing along e1: two directions, e2 first.
    rows = np.array([[1, 5, 3], [-1, 5, 3], [0, 5, 6], [0, 5, 0]], dtype=np.float32)

    directions = principal_directions(rows, n_components=3)

    assert directions.shape == (2, 3)
    np.testing.assert_allclose(np.abs(directions), E[[2, 0]], atol=1e-12)


def test_principal_directions_keep_at_most_n_components_and_n_minus_1() -> None:
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(5, 20))

    assert principal_directions(rows, 3).shape == (3, 20)
    assert principal_directions(rows, 10).shape == (4, 20)  # 5 centred rows span 4 directions
    assert principal_directions(rows[:1], 10).shape == (0, 20)
    assert principal_directions(np.ones((4, 20)), 10).shape == (0, 20)


def test_low_rank_cosine_by_hand() -> None:
    directions = E[:2]  # M keeps coordinates 0 and 1
    centre = np.array([1.0, 1.0, 1.0])
    client = np.array([[2.0, 3.0, 5.0]])  # M(ω − c) = (1, 2)
    centres = np.array([[0.0, 3.0, 9.0], [3.0, 5.0, -4.0]])  # (−1, 2) and (2, 4)

    scores = low_rank_scores(client, directions, centre)
    similarity = cosine_matrix(scores, low_rank_scores(centres, directions, centre))

    np.testing.assert_allclose(scores, [[1.0, 2.0]])
    np.testing.assert_allclose(similarity, [[3 / 5, 1.0]])


def test_cosine_of_a_zero_vector_is_zero() -> None:
    similarity = cosine_matrix(np.zeros((1, 2)), np.array([[1.0, 0.0], [0.0, 0.0]]))

    np.testing.assert_array_equal(similarity, [[0.0, 0.0]])


def test_e_step_takes_the_most_similar_centre_not_the_least() -> None:
    similarity = np.array([[0.9, -0.5, 0.1], [-0.2, 0.3, 0.8]])

    np.testing.assert_array_equal(assign_most_similar(similarity), [0, 2])


def test_e_step_keeps_the_current_centre_on_a_tie() -> None:
    similarity = np.array([[0.5, 0.5], [0.5, 0.5], [0.2, 0.7]])

    labels = assign_most_similar(similarity, current=np.array([1, -1, 0]))

    np.testing.assert_array_equal(labels, [1, 0, 1])


def test_a_member_is_compared_with_its_own_centre_without_itself() -> None:
    # Cluster 0 = rows 0 and 1, cluster 1 = row 2 alone; row 3 is in no mean.
    scores = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [1.0, 1.0]])
    centres = np.array([[0.5, 0.5], [-1.0, 0.0]])

    similarity = leave_one_out_similarity(
        scores, centres, labels=np.array([0, 0, 1, -1]), sizes=np.array([2, 1])
    )

    # Row 0 against cluster 0 without itself, i.e. against row 1: orthogonal.
    expected = [[0.0, -1.0], [0.0, 0.0], [-1 / np.sqrt(2), 1.0], [1.0, -1 / np.sqrt(2)]]
    np.testing.assert_allclose(similarity, expected, atol=1e-12)


def test_bisect_splits_along_the_first_principal_direction() -> None:
    points = np.array([[0.0, 0.0], [5.1, 0.3], [0.1, -0.2], [5.0, 0.0]])

    np.testing.assert_array_equal(bisect(points), [True, False, True, False])
    np.testing.assert_array_equal(bisect(np.ones((3, 2))), [True, True, True])


def test_m_step_is_the_plain_mean_of_each_cluster() -> None:
    models = np.array([[0.0, 2.0], [2.0, 4.0], [9.0, 9.0]])

    means = cluster_means(models, np.array([0, 0, 1]), 2)

    np.testing.assert_allclose(means, [[1.0, 3.0], [9.0, 9.0]])
    with pytest.raises(ValueError, match="needs a member"):
        cluster_means(models, np.array([0, 0, 0]), 2)


def test_granularity_by_hand() -> None:
    # Cluster 0: members ±1 around (0, 0) → intra 1. Cluster 1: one member on its centre.
    points = np.array([[-1.0, 0.0], [1.0, 0.0], [4.0, 0.0]])
    centres = np.array([[0.0, 0.0], [4.0, 0.0]])

    g = granularity(points, np.array([0, 0, 1]), centres)

    np.testing.assert_allclose(g.intra, [1.0, 0.0])
    np.testing.assert_allclose(g.inter, [16.0, 16.0])
    np.testing.assert_allclose(g.ratio, [1 / 16, 0.0])


def test_granularity_averages_the_inter_distance_over_the_other_centres() -> None:
    points = np.array([[0.0, 1.0], [0.0, -1.0], [3.0, 0.0], [0.0, 4.0]])
    centres = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 4.0]])

    g = granularity(points, np.array([0, 0, 1, 2]), centres)

    np.testing.assert_allclose(g.inter, [(9 + 16) / 2, (9 + 25) / 2, (16 + 25) / 2])
    assert g.ratio[0] == pytest.approx(1 / 12.5)


def test_a_lone_cluster_has_infinite_granularity_unless_its_members_coincide() -> None:
    spread = granularity(np.array([[0.0], [2.0]]), np.array([0, 0]), np.array([[1.0]]))
    same = granularity(np.array([[1.0], [1.0]]), np.array([0, 0]), np.array([[1.0]]))

    assert spread.ratio[0] == np.inf
    assert same.ratio[0] == 0.0


def test_squared_distances() -> None:
    distances = squared_distances(np.array([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0]]))

    np.testing.assert_allclose(distances, [[0, 25, 1], [25, 0, 18], [1, 18, 0]], atol=1e-12)


DISTANCES = np.array([[0.0, 4.0, 1.0], [4.0, 0.0, 9.0], [1.0, 9.0, 0.0]])


@pytest.mark.parametrize(
    ("gc", "splittable", "expected"),
    [
        pytest.param([0.5, 0.5, 0.5], [True] * 3, None, id="all-in-range"),
        pytest.param([0.5, 0.1, 0.05], [True] * 3, TuningStep("merge", 2, 0), id="merge-lowest"),
        pytest.param([0.9, 1.5, 0.5], [True] * 3, TuningStep("split", 1), id="split-highest"),
        pytest.param([0.1, 1.5, 0.5], [True] * 3, TuningStep("merge", 0, 2), id="merge-first"),
        pytest.param([0.9, 1.5, 0.5], [True, False, True], TuningStep("split", 0), id="skip"),
        pytest.param([0.5, 1.5, 0.5], [True, False, True], None, id="unsplittable"),
    ],
)
def test_plan_tuning(gc: list[float], splittable: list[bool], expected: TuningStep | None) -> None:
    assert plan_tuning(gc, DISTANCES, splittable, 0.2, 0.8) == expected


def test_plan_tuning_never_merges_a_lone_cluster() -> None:
    assert plan_tuning([0.0], np.zeros((1, 1)), [False], 0.2, 0.8) is None
    assert plan_tuning([np.inf], np.zeros((1, 1)), [True], 0.2, 0.8) == TuningStep("split", 0)


def test_farthest_first_picks_mutually_dissimilar_rows() -> None:
    # Rows 0 and 1 alike, 2 and 3 alike; 3 is the odd one out on average.
    similarity = np.array(
        [
            [1.0, 0.9, -0.5, -0.6],
            [0.9, 1.0, -0.4, -0.5],
            [-0.5, -0.4, 1.0, 0.8],
            [-0.6, -0.5, 0.8, 1.0],
        ]
    )

    assert farthest_first(similarity, 2) == [3, 0]
    assert farthest_first(similarity, 3) == [3, 0, 2]
    assert farthest_first(similarity, 9) == [3, 0, 2, 1]
    assert farthest_first(np.zeros((0, 0)), 2) == []
