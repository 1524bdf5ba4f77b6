"""CFL's split: the optimal bipartition and how far apart its halves are."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.cluster import AgglomerativeClustering

from coordinator.strategies.aggregate import unit_rows
from coordinator.strategies.bipartition import (
    bipartition_share,
    optimal_bipartition,
    sketch_bipartition,
    sketch_bipartition_share,
)
from coordinator.strategies.sketch import sketch_cosine_matrix
from faultfleet.types import Float64Array, IntArray


def test_optimal_bipartition_separates_two_blocks() -> None:
    # Prepare: clients 0, 2 alike; 1, 3 alike; the blocks are dissimilar
    similarity = np.array(
        [
            [1.0, -0.9, 0.8, -0.7],
            [-0.9, 1.0, -0.6, 0.9],
            [0.8, -0.6, 1.0, -0.8],
            [-0.7, 0.9, -0.8, 1.0],
        ]
    )

    # Execute
    halves = optimal_bipartition(similarity)

    # Assert
    assert halves.tolist() == [0, 1, 0, 1]


def test_optimal_bipartition_needs_two_clients() -> None:
    # Execute / Assert
    with pytest.raises(ValueError, match="at least 2 clients"):
        optimal_bipartition(np.ones((1, 1)))


def test_bipartition_share_by_hand() -> None:
    # Prepare: halves {0, 1} and {2, 3}; inside 0.8 and 0.6, across 0.1 and 0.3
    similarity = np.array(
        [[1.0, 0.8, 0.1, 0.3], [0.8, 1.0, 0.3, 0.1], [0.1, 0.3, 1.0, 0.6], [0.3, 0.1, 0.6, 1.0]]
    )
    halves = np.array([0, 0, 1, 1])

    # Execute / Assert: mean across 0.2, mean inside 0.7
    assert bipartition_share(similarity, halves) == pytest.approx(0.2 / 0.7)
    assert bipartition_share(-similarity, halves) == 1.0  # halves not alike at all: no split


def _reference_halves(similarity: Float64Array) -> IntArray:
    """scikit-learn's complete-linkage cut into two clusters on the same distances."""
    distance = 1.0 - similarity
    distance = np.maximum((distance + distance.T) / 2.0, 0.0)
    np.fill_diagonal(distance, 0.0)
    linkage = AgglomerativeClustering(n_clusters=2, metric="precomputed", linkage="complete")
    labels = np.asarray(linkage.fit_predict(distance), dtype=np.int64)
    halves: IntArray = labels if labels[0] == 0 else 1 - labels
    return halves


def test_bipartitions_of_the_matrix_and_of_the_sketches_equal_scikit_learns() -> None:
    rng = np.random.default_rng(0)
    for trial in range(40):
        # Prepare: unit rows around three directions, a zero row now and then
        m, d = int(rng.integers(2, 50)), int(rng.integers(2, 30))
        rows = rng.normal(size=(3, d))[rng.integers(0, 3, m)]
        rows += rng.normal(size=(m, d)) * rng.uniform(0.1, 2.0)
        if trial % 5 == 0:
            rows[-1] = 0.0
        sketches = unit_rows(list(rows)).astype(np.float32)
        similarity = sketch_cosine_matrix(sketches)
        expected = _reference_halves(similarity)

        # Execute
        from_matrix = optimal_bipartition(similarity.copy())
        from_sketches = sketch_bipartition(sketches)

        # Assert
        assert from_matrix.tolist() == expected.tolist(), trial
        assert from_sketches.tolist() == expected.tolist(), trial
        assert sketch_bipartition_share(sketches, expected) == pytest.approx(
            bipartition_share(similarity, expected), rel=1e-6, abs=1e-9
        )


def test_sketch_bipartition_share_by_hand() -> None:
    # Prepare: halves {0, 1} and {2}; cosines 0.6 inside, 0 and 0.8 across
    sketches = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]], dtype=np.float32)

    # Execute / Assert: mean across 0.4, mean inside 0.6 (the one pair)
    share = sketch_bipartition_share(sketches, np.array([0, 0, 1]))
    assert share == pytest.approx(0.4 / 0.6)
    # a half of one member and a half of two that are not alike: no split
    assert sketch_bipartition_share(sketches, np.array([0, 1, 0])) == 1.0


def test_sketch_bipartition_needs_two_clients() -> None:
    with pytest.raises(ValueError, match="at least 2 clients"):
        sketch_bipartition(np.ones((1, 4), dtype=np.float32))
    with pytest.raises(ValueError, match=r"\(m, d\) array"):
        sketch_bipartition(np.ones(4, dtype=np.float32))
