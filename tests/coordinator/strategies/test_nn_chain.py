"""Linkage in place: scipy's linkage matrix for every chain method, ties included; complete
linkage in float32; no copy of the distances."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.cluster import hierarchy
from scipy.spatial.distance import pdist

from coordinator.strategies.bipartition import sketch_bipartition
from coordinator.strategies.nn_chain import (
    CACHED_ROWS,
    CHAIN_METHODS,
    IN_PLACE_FROM,
    chain_linkage,
    linkage,
)


def _scipy(condensed: np.ndarray, method: str = "complete") -> np.ndarray:
    return np.asarray(hierarchy.linkage(condensed.astype(np.float64), method=method))


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(2, 30),
    levels=st.integers(1, 6),
    method=st.sampled_from(CHAIN_METHODS),
    cached_rows=st.sampled_from([1, 2, 3, CACHED_ROWS]),
    seed=st.integers(0, 2**32 - 1),
)
def test_equals_scipys_linkage_matrix_with_many_ties(
    n: int, levels: int, method: str, cached_rows: int, seed: int
) -> None:
    # Prepare: distances drawn from a handful of values, so that most comparisons tie
    condensed = np.random.default_rng(seed).integers(1, levels + 1, n * (n - 1) // 2) / levels
    expected = _scipy(condensed, method)

    # Execute
    tree = chain_linkage(condensed.copy(), n, method, cached_rows=cached_rows)  # type: ignore[arg-type]

    # Assert: every merge, name, height and size as scipy's
    np.testing.assert_array_equal(tree, expected)


def test_equals_scipy_on_euclidean_distances_for_every_method() -> None:
    rng = np.random.default_rng(3)
    for method in CHAIN_METHODS:
        # Prepare: points around four centres (Ward's heights are Euclidean)
        points = rng.normal(size=(4, 6))[rng.integers(0, 4, 120)] + rng.normal(size=(120, 6))
        condensed = pdist(points)
        expected = _scipy(condensed, method)

        # Execute
        tree = chain_linkage(condensed, 120, method)

        # Assert
        np.testing.assert_array_equal(tree, expected)


def test_equals_scipy_on_float32_distances_in_their_own_precision() -> None:
    rng = np.random.default_rng(1)
    for n in (2, 3, 17, 200):
        # Prepare: float32 values, and a run of exact ties among them
        condensed = rng.normal(size=n * (n - 1) // 2).astype(np.float32)
        condensed[::7] = condensed[0]
        expected = _scipy(condensed)

        # Execute
        tree = chain_linkage(condensed, n, "complete")

        # Assert
        assert tree.dtype == np.float64
        np.testing.assert_array_equal(tree, expected)


def test_works_in_place_from_its_threshold_and_calls_scipy_below() -> None:
    rng = np.random.default_rng(4)
    for n in (IN_PLACE_FROM - 1, IN_PLACE_FROM):
        condensed = rng.normal(size=n * (n - 1) // 2)
        kept = condensed.copy()
        expected = _scipy(condensed, "average")

        tree = linkage(condensed, n, "average")

        np.testing.assert_array_equal(tree, expected)
        # below the threshold the vector is left alone; from it, it is the working memory
        assert np.array_equal(condensed, kept) == (n < IN_PLACE_FROM)


def test_rejects_a_vector_of_the_wrong_length_too_few_points_or_an_unknown_method() -> None:
    with pytest.raises(ValueError, match=r"n\(n - 1\)/2 = 6 condensed distances"):
        linkage(np.zeros(5), 4, "complete")
    with pytest.raises(ValueError, match="n >= 2"):
        chain_linkage(np.zeros(0), 1, "complete")
    with pytest.raises(ValueError, match="shape"):
        chain_linkage(np.zeros((3, 2)), 4, "ward")
    with pytest.raises(ValueError, match="must be finite"):
        chain_linkage(np.array([1.0, np.nan, 2.0]), 3, "complete")
    with pytest.raises(ValueError, match="must be finite"):
        linkage(np.array([1.0, 2.0, np.inf], dtype=np.float32), 3, "ward")
    with pytest.raises(ValueError, match="cached_rows must be >= 1, got 0"):
        chain_linkage(np.zeros(6), 4, "complete", cached_rows=0)
    with pytest.raises(ValueError, match="unknown linkage method 'single'"):
        linkage(np.zeros(6), 4, "single")  # type: ignore[arg-type]


def test_sketch_bipartition_holds_one_float32_condensed_vector() -> None:
    # Prepare: 3,000 unit float32 sketches around two directions
    rng = np.random.default_rng(2)
    m = 3000
    rows = rng.normal(size=(2, 64))[rng.integers(0, 2, m)] + rng.normal(size=(m, 64))
    sketches = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    one_vector = m * (m - 1) // 2 * 4

    # Execute
    tracemalloc.start()
    try:
        sketch_bipartition(sketches)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    # Assert: one float32 vector and blocks of products 512 rows high (0.6 of the vector
    # at this size, less at larger ones); float64 distances and scipy's copy of them for
    # its linkage would be four vectors
    assert one_vector < peak < 2 * one_vector
