"""Condensed distance vectors made block by block, and the last merge of a linkage."""

from __future__ import annotations

import numpy as np
from scipy.cluster.hierarchy import linkage
from scipy.spatial.distance import pdist, squareform
from sklearn.cluster import AgglomerativeClustering

from coordinator.strategies.aggregate import cosine_similarity_matrix, unit_rows
from coordinator.strategies.condensed import (
    cosine_distances,
    gram_distances,
    negated_cosines,
    top_split,
)


def test_gram_distances_equal_pdist() -> None:
    rows = np.random.default_rng(0).normal(size=(7, 40))
    for block in (3, 512):  # several blocks, and one
        np.testing.assert_allclose(gram_distances(rows, block), pdist(rows), rtol=1e-9, atol=1e-9)


def test_gram_distances_in_float32_are_the_float64_ones_rounded_once() -> None:
    rows = np.random.default_rng(6).normal(size=(40, 30))
    for block in (7, 512):
        single = gram_distances(rows, block, dtype=np.float32)
        assert single.dtype == np.float32
        np.testing.assert_array_equal(single, gram_distances(rows, block).astype(np.float32))


def test_cosine_distances_equal_the_matrix_upper_triangle() -> None:
    # Prepare: a zero update among them (cosine 0 with every other, distance 1)
    rng = np.random.default_rng(1)
    updates = [rng.normal(size=30).astype(np.float32) for _ in range(9)]
    updates[4] = np.zeros(30, dtype=np.float32)
    distance = np.clip(1.0 - cosine_similarity_matrix(updates), 0.0, 2.0)
    expected = distance[np.triu_indices(9, k=1)]

    for block in (1, 4, 512):
        # Execute
        condensed = cosine_distances(unit_rows(updates), block)

        # Assert
        np.testing.assert_allclose(condensed, expected, rtol=0.0, atol=1e-12)
    assert condensed.dtype == np.float64
    np.testing.assert_allclose(np.delete(squareform(condensed)[4], 4), 1.0)  # the zero update


def test_cosine_distances_of_float32_rows_are_single_precision_products() -> None:
    # Prepare: the same unit rows in single and double precision, with a repeated row and
    # its opposite (products at ±1, where rounding could step outside [0, 2])
    rows = unit_rows(list(np.random.default_rng(2).normal(size=(50, 200))))
    rows[1], rows[2] = rows[0], -rows[0]

    # Execute
    single = cosine_distances(rows.astype(np.float32), block=16)

    # Assert: within single precision of the double ones, and clipped to [0, 2]
    np.testing.assert_allclose(single, cosine_distances(rows), atol=1e-6)
    assert single.min() >= 0.0
    assert single.max() <= 2.0


def test_negated_cosines_are_the_rows_products_in_their_dtype() -> None:
    # Prepare: float32 unit rows with a repeated row and its opposite (products at ±1)
    rows = unit_rows(list(np.random.default_rng(4).normal(size=(40, 100)))).astype(np.float32)
    rows[1], rows[2] = rows[0], -rows[0]
    products = (rows @ rows.T)[np.triu_indices(40, k=1)]

    # Execute
    condensed = negated_cosines(rows, block=7)

    # Assert: float32 products (up to the matrix product's blocking), negated and clipped;
    # ordered as the distances of the same blocks
    assert condensed.dtype == np.float32
    np.testing.assert_allclose(condensed, -np.clip(products, -1.0, 1.0), rtol=0.0, atol=1e-6)
    assert condensed.min() >= -1.0
    assert condensed.max() <= 1.0
    np.testing.assert_array_equal(
        np.argsort(condensed, kind="stable"),
        np.argsort(cosine_distances(rows, block=7), kind="stable"),
    )


def test_top_split_is_scikit_learns_cut_into_two_clusters() -> None:
    rng = np.random.default_rng(3)
    for trial in range(30):
        # Prepare: random points around three centres; complete and average linkage
        n = int(rng.integers(2, 40))
        points = rng.normal(size=(3, 5))[rng.integers(0, 3, n)] + rng.normal(size=(n, 5))
        method = ("complete", "average")[trial % 2]
        expected = AgglomerativeClustering(n_clusters=2, linkage=method).fit_predict(points)
        expected = expected if expected[0] == 0 else 1 - expected

        # Execute
        halves = top_split(linkage(pdist(points), method=method), n)

        # Assert
        assert halves.tolist() == expected.tolist(), (trial, n, method)
