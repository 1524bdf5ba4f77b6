"""FL+HC's dendrogram cut from the data: the largest gap, its bounds, weakest heights."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import pdist

from coordinator.strategies.aggregate import unit_rows
from coordinator.strategies.condensed import cosine_distances, gram_distances
from coordinator.strategies.flhc_tree import (
    flat_labels,
    largest_gap_cut,
    linkage_tree,
    weakest_heights,
)
from coordinator.strategies.nn_chain import IN_PLACE_FROM

# 6 clients: three merges inside groups (0.1–0.2), then two between groups (1.0, 1.2)
HEIGHTS = np.array([0.1, 0.15, 0.2, 1.0, 1.2])


def test_the_cut_falls_in_the_largest_log_gap() -> None:
    # Execute
    cut = largest_gap_cut(HEIGHTS, min_clusters=1, max_clusters=None)

    # Assert: between 0.2 and 1.0 (ratio 5, against 1.5, 1.33, 1.2), at their geometric mean
    assert cut == pytest.approx(np.sqrt(0.2 * 1.0))


def test_the_cut_is_a_ratio_so_units_do_not_matter() -> None:
    cut = largest_gap_cut(HEIGHTS * 1000.0, min_clusters=1, max_clusters=None)

    assert cut == pytest.approx(1000.0 * np.sqrt(0.2))


@pytest.mark.parametrize(
    ("low", "high", "clusters"),
    [(1, None, 3), (4, None, 5), (1, 2, 2), (2, 2, 2), (6, None, 6), (1, 1, 1)],
)
def test_bounds_on_the_number_of_clusters(low: int, high: int | None, clusters: int) -> None:
    # Prepare: 6 clients; a cut after j merges leaves 6 − j clusters
    cut = largest_gap_cut(HEIGHTS, min_clusters=low, max_clusters=high)

    # Execute
    left = 6 - int(np.count_nonzero(HEIGHTS - cut <= 0))

    # Assert
    assert left == clusters


def test_a_cut_on_a_real_dendrogram_finds_the_groups() -> None:
    # Prepare: three tight groups of points, far apart
    rng = np.random.default_rng(0)
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    points = np.concatenate([c + 0.3 * rng.normal(size=(4, 2)) for c in centres])
    tree = linkage(points, method="ward")

    # Execute
    cut = largest_gap_cut(tree[:, 2], min_clusters=2, max_clusters=None)
    labels = fcluster(tree, t=cut, criterion="distance")

    # Assert
    assert len(set(labels)) == 3
    assert all(len(set(labels[i : i + 4])) == 1 for i in (0, 4, 8))


def test_weakest_heights_are_the_last_merge_inside_each_cluster() -> None:
    # Prepare: points 0,1 close (1.0 apart), 2,3 close (2.0 apart), the pairs far apart; 4 alone
    points = np.array([[0.0], [1.0], [10.0], [12.0], [40.0]])
    tree = linkage(points, method="single")
    labels = np.array([0, 0, 1, 1, 2])

    # Execute
    weakest = weakest_heights(tree, labels)

    # Assert
    assert weakest == pytest.approx({0: 1.0, 1: 2.0})


def _thousands_of_updates() -> np.ndarray:
    """More clients than nn_chain.IN_PLACE_FROM (the linkage runs in place), in 5 groups."""
    rng = np.random.default_rng(5)
    m = IN_PLACE_FROM + 52
    rows: np.ndarray = rng.normal(size=(5, 24))[rng.integers(0, 5, m)] * 3
    return rows + rng.normal(size=(m, 24))


@pytest.mark.parametrize(("linkage_name", "metric"), [("average", "cosine"), ("ward", "euclidean")])
def test_a_tree_of_thousands_of_updates_is_scipys(linkage_name: str, metric: str) -> None:
    # Prepare
    rows = _thousands_of_updates()
    condensed = cosine_distances(unit_rows(list(rows))) if metric == "cosine" else pdist(rows)
    expected = linkage(condensed, method=linkage_name)

    # Execute
    tree = linkage_tree(rows, linkage_name=linkage_name, metric=metric)

    # Assert: scipy's tree of the same distances, merge for merge
    np.testing.assert_array_equal(tree, expected)


@pytest.mark.parametrize("linkage_name", ["ward", "average", "complete"])
def test_a_tree_of_thousands_of_sketched_rows_is_scipys_up_to_float32(linkage_name: str) -> None:
    # Prepare: scipy's tree of the float64 Gram distances
    rows = _thousands_of_updates()
    m = len(rows)
    expected = linkage(gram_distances(rows), method=linkage_name)

    # Execute: the sketch path's tree, its distances and updates stored in float32
    tree = linkage_tree(rows, linkage_name=linkage_name, metric="euclidean", gram=True)

    # Assert: the same merges and clusters, the heights to float32's rounding
    np.testing.assert_array_equal(tree[:, [0, 1, 3]], expected[:, [0, 1, 3]])
    np.testing.assert_allclose(tree[:, 2], expected[:, 2], rtol=1e-6, atol=0.0)
    assert not np.array_equal(tree[:, 2], expected[:, 2])  # float32 heights indeed
    cuts = [largest_gap_cut(t[:, 2], min_clusters=2, max_clusters=None) for t in (tree, expected)]
    labels = flat_labels(tree, cuts[0], m)
    np.testing.assert_array_equal(labels, flat_labels(expected, cuts[1], m))
    assert labels.max() + 1 == 5
