"""CFL's split: the optimal bipartition and how far apart its halves are."""

from __future__ import annotations

import numpy as np
import pytest

from coordinator.strategies.bipartition import bipartition_share, optimal_bipartition


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
