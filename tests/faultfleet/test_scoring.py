"""Tests for faultfleet.scoring, on clusterings small enough to score by hand."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from faultfleet.scoring import (
    ClusteringScores,
    adjusted_rand_index,
    clustering_scores,
    mean_client_accuracy,
    purity,
    trim_count,
    trimmed_client_accuracy,
)

Score = Callable[[Sequence[int], Sequence[int]], float]


@pytest.mark.parametrize(
    ("true", "found", "expected"),
    [
        pytest.param([0, 0, 1, 1], [5, 5, 7, 7], 1.0, id="same-partition-other-names"),
        pytest.param([0, 0, 0], [3, 3, 3], 1.0, id="both-one-cluster"),
        # contingency [[1,1],[1,1]]: index 0, row pairs 2, column pairs 2 of 6 pairs,
        # expected 2·2/6 = 2/3, max 2 → ARI = (0 − 2/3) / (2 − 2/3) = −1/2
        pytest.param([0, 0, 1, 1], [0, 1, 0, 1], -0.5, id="crossed"),
        # contingency [[2,0],[1,1]]: index 1, sums a = 1+1 = 2, b = 3+0 = 3,
        # expected 2·3/6 = 1, max 2.5 → ARI = 0 / 1.5 = 0
        pytest.param([0, 0, 1, 1], [0, 0, 0, 1], 0.0, id="one-misplaced"),
    ],
)
def test_adjusted_rand_index_by_hand(true: list[int], found: list[int], expected: float) -> None:
    # Execute / Assert
    assert adjusted_rand_index(true, found) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("true", "found", "expected"),
    [
        pytest.param([0, 0, 1, 1], [5, 5, 7, 7], 1.0, id="same-partition"),
        pytest.param([0, 0, 1, 1], [0, 0, 0, 0], 0.5, id="everything-merged"),
        pytest.param([0, 0, 1, 1], [0, 1, 2, 3], 1.0, id="singletons"),
        # cluster 0 = {0, 0, 1}: majority 2; cluster 1 = {1, 2}: majority 1 → 3/5
        pytest.param([0, 0, 1, 1, 2], [0, 0, 0, 1, 1], 0.6, id="mixed"),
    ],
)
def test_purity_by_hand(true: list[int], found: list[int], expected: float) -> None:
    # Execute / Assert
    assert purity(true, found) == pytest.approx(expected)


@pytest.mark.parametrize("score", [adjusted_rand_index, purity])
def test_labellings_of_different_length_raise(score: Score) -> None:
    # Execute / Assert
    with pytest.raises(ValueError, match="true has 2 labels but found has 3"):
        score([0, 1], [0, 1, 1])


@pytest.mark.parametrize("score", [adjusted_rand_index, purity])
def test_empty_labellings_raise(score: Score) -> None:
    # Execute / Assert
    with pytest.raises(ValueError, match="at least one client"):
        score([], [])


@given(
    data=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), min_size=1, max_size=30),
    relabel=st.permutations(list(range(5))),
)
def test_relabelling_found_clusters_changes_no_score(
    data: list[tuple[int, int]], relabel: list[int]
) -> None:
    # Prepare
    true = [t for t, _ in data]
    found = [f for _, f in data]
    renamed = [relabel[f] + 10 for f in found]

    # Execute / Assert
    assert adjusted_rand_index(true, renamed) == pytest.approx(adjusted_rand_index(true, found))
    assert purity(true, renamed) == pytest.approx(purity(true, found))
    assert adjusted_rand_index(true, true) == pytest.approx(1.0)
    assert 0.0 < purity(true, found) <= 1.0


def test_clustering_scores_align_clients_by_id() -> None:
    # Prepare: same clients, different insertion order
    true_groups = {"c1": 0, "c2": 1, "c3": 1, "c0": 0}
    found = {"c0": 4, "c3": 9, "c2": 9, "c1": 4}

    # Execute
    scores = clustering_scores(true_groups, found)

    # Assert
    assert scores == ClusteringScores(num_clusters=2, ari=1.0, purity=1.0)


def test_clustering_scores_of_a_merged_federation() -> None:
    # Execute
    scores = clustering_scores({"a": 0, "b": 0, "c": 1, "d": 1}, dict.fromkeys("abcd", 0))

    # Assert
    assert scores.num_clusters == 1
    assert scores.ari == pytest.approx(0.0)
    assert scores.purity == pytest.approx(0.5)


def test_clustering_scores_with_different_clients_raise() -> None:
    # Execute / Assert
    with pytest.raises(
        ValueError, match=r"missing from found: \['b'\], not in true_groups: \['c'\]"
    ):
        clustering_scores({"a": 0, "b": 1}, {"a": 0, "c": 1})


def test_mean_client_accuracy_is_unweighted() -> None:
    # Execute / Assert: (1.0 + 0.5 + 0.0 + 0.9) / 4
    assert mean_client_accuracy([1.0, 0.5, 0.0, 0.9]) == pytest.approx(0.6)


@pytest.mark.parametrize(
    ("accuracies", "message"),
    [
        pytest.param([], "at least one client accuracy", id="empty"),
        pytest.param([0.5, 1.5], "must lie in", id="above-one"),
        pytest.param([float("nan")], "must lie in", id="nan"),
    ],
)
def test_bad_accuracies_raise(accuracies: list[float], message: str) -> None:
    # Execute / Assert
    with pytest.raises(ValueError, match=message):
        mean_client_accuracy(accuracies)


@pytest.mark.parametrize(
    ("k", "fraction", "dropped"),
    [(1, 0.1, 0), (2, 0.4, 0), (3, 0.1, 1), (10, 0.1, 1), (11, 0.1, 2), (9, 0.25, 3), (5, 0.0, 0)],
)
def test_trim_count_drops_the_rounded_up_share_and_keeps_at_least_one(
    k: int, fraction: float, dropped: int
) -> None:
    assert trim_count(k, fraction) == dropped


def test_one_client_reporting_full_marks_cannot_carry_the_trimmed_accuracy() -> None:
    honest = [0.6, 0.62, 0.58, 0.61]

    boasting = trimmed_client_accuracy([*honest, 1.0])
    sulking = trimmed_client_accuracy([*honest, 0.0])

    assert boasting == pytest.approx((0.6 + 0.62 + 0.61) / 3)  # 0.58 and 1.0 dropped
    assert sulking == pytest.approx((0.6 + 0.58 + 0.61) / 3)  # 0.0 and 0.62 dropped
    assert trimmed_client_accuracy([0.2, 0.9]) == mean_client_accuracy([0.2, 0.9])


def test_the_trimmed_accuracy_checks_its_input_like_the_mean() -> None:
    with pytest.raises(ValueError, match="must lie in"):
        trimmed_client_accuracy([0.5, 0.5, 2.0])
