"""Sketched cosines against exact ones: the JL bound, determinism, clusters."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coordinator.strategies.aggregate import cosine_similarity_matrix
from coordinator.strategies.pairwise import SKETCH_FLEET, comparer_for, resolve
from coordinator.strategies.sketch import (
    UpdateSketcher,
    jl_dimension,
    pair_chunk,
    pair_dots,
    sketch_cosine_matrix,
)
from faultfleet.scoring import adjusted_rand_index


def grouped_updates(seed: int, k: int, n: int, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """k updates of n parameters around ``groups`` directions (within cosine ~0.5)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((groups, n)).astype(np.float32)
    labels = np.arange(k) % groups
    noise = rng.standard_normal((k, n)).astype(np.float32)
    return centres[labels] + noise, labels


def test_the_dimension_follows_dasgupta_and_gupta() -> None:
    d = jl_dimension(2500, 0.25)

    assert d == math.ceil(4 * math.log(2500) / (0.25**2 / 2 - 0.25**3 / 3))
    assert jl_dimension(10_000, 0.25) > d > jl_dimension(2500, 0.5)
    with pytest.raises(ValueError, match=r"epsilon must be in \(0, 1\)"):
        jl_dimension(10, 1.0)


def test_every_sketched_cosine_is_within_epsilon_of_the_exact_one() -> None:
    # Prepare: 200 updates of 20,000 parameters in 4 groups; d for n = 200, ε = 0.25
    updates, _ = grouped_updates(0, 200, 20_000, 4)
    sketcher = UpdateSketcher(20_000, jl_dimension(200, 0.25), seed=1)

    # Execute
    sketched = sketch_cosine_matrix([sketcher.unit_sketch(u) for u in updates])
    exact = cosine_similarity_matrix(list(updates))

    # Assert: the bound for every pair, and a typical error far below it
    error = np.abs(sketched - exact)
    assert sketcher.dim < 20_000
    assert error.max() <= 0.25
    assert np.median(error) < 0.05


def test_the_same_seed_gives_the_same_sketch_and_another_seed_another() -> None:
    vector = np.random.default_rng(3).standard_normal(5000).astype(np.float32)

    first = UpdateSketcher(5000, 300, seed=7).sketch(vector)
    again = UpdateSketcher(5000, 300, seed=7).sketch(vector)
    other = UpdateSketcher(5000, 300, seed=8).sketch(vector)

    assert first.tobytes() == again.tobytes()
    assert not np.array_equal(first, other)


def test_a_sketch_adds_every_dth_parameter_with_its_sign() -> None:
    # Prepare: 1,000 parameters in d = 97 buckets (a prime): the last of 11 rows is padded
    n, sketcher = 1000, UpdateSketcher(1000, 97, seed=2)
    assert sketcher.dim == 97

    # Execute: the sketches of the unit vectors are the columns of S (many calls, so that
    # reused buffers hold earlier values)
    columns = np.stack([sketcher.sketch(np.eye(1, n, i, dtype=np.float32)[0]) for i in range(n)])
    vector = np.random.default_rng(4).standard_normal(n).astype(np.float32)

    # Assert: parameter i goes to bucket i mod d with a sign, nothing else; S is linear
    buckets = np.arange(n) % 97
    np.testing.assert_array_equal(np.abs(columns[np.arange(n), buckets]), np.ones(n))
    assert np.count_nonzero(columns) == n
    np.testing.assert_allclose(sketcher.sketch(vector), vector @ columns, rtol=1e-5, atol=1e-5)


def test_a_sketch_sums_the_signed_rows_in_order_to_the_bit() -> None:
    # Prepare: parameters in rows of d = 97 (the last row partial), the signs read from the
    # sketches of the unit vectors, and a vector with exact zeros among its values
    n = 1000
    sketcher = UpdateSketcher(n, 97, seed=2)
    signs = np.array(
        [sketcher.sketch(np.eye(1, n, i, dtype=np.float32)[0])[i % 97] for i in range(n)]
    )
    vector = np.random.default_rng(6).standard_normal(n).astype(np.float32)
    vector[::7] = 0.0

    # Execute
    sketched = sketcher.sketch(vector)

    # Assert: float32 sums over the rows, first row first, as the definition adds them
    signed = np.zeros(11 * 97, dtype=np.float32)
    signed[:n] = signs * vector
    expected = signed[:97].copy()
    for row in range(1, 11):
        expected += signed[row * 97 : (row + 1) * 97]
    assert sketched.dtype == np.float32
    assert sketched.tobytes() == expected.tobytes()


def test_pair_dots_are_the_dot_products_of_every_pair_across_chunks() -> None:
    rows = np.random.default_rng(5).standard_normal((300, 64))
    first, second = np.arange(300).repeat(5), np.arange(1500) % 299
    assert pair_chunk(64, rows.itemsize) < len(first)  # several chunks

    dots = pair_dots(rows, first, second)

    np.testing.assert_allclose(dots, (rows[first] * rows[second]).sum(axis=1), rtol=1e-12)
    assert pair_dots(rows, first[:0], second[:0]).shape == (0,)


def test_a_dimension_above_the_length_keeps_the_vector() -> None:
    vector = np.arange(10, dtype=np.float32)

    sketcher = UpdateSketcher(10, 500, seed=0)

    assert sketcher.identity
    np.testing.assert_array_equal(sketcher.sketch(vector), vector)


def test_clusters_on_sketches_equal_clusters_on_exact_cosines() -> None:
    # Prepare: a comparer of each kind over 300 grouped updates of 30,000 parameters
    updates, labels = grouped_updates(4, 300, 30_000, 6)
    sketched = comparer_for("sketch", 30_000, 300, seed=2).matrix(list(updates))
    exact = comparer_for("exact", 30_000, 300).matrix(list(updates))

    # Execute: assign each update to the group its most similar other update belongs to
    def nearest_group(similarity: np.ndarray) -> np.ndarray:
        np.fill_diagonal(similarity, -np.inf)
        found: np.ndarray = labels[np.argmax(similarity, axis=1)]
        return found

    # Assert
    by_exact = nearest_group(exact).tolist()
    assert adjusted_rand_index(labels.tolist(), by_exact) == 1.0
    assert adjusted_rand_index(by_exact, nearest_group(sketched).tolist()) >= 0.99


def test_auto_compares_exactly_below_the_fleet_threshold_and_sketches_from_it() -> None:
    assert resolve("auto", SKETCH_FLEET - 1) == "exact"
    assert resolve("auto", SKETCH_FLEET) == "sketch"
    assert resolve("exact", 10**6) == "exact"
    updates = [np.ones(4, np.float32), np.arange(4, dtype=np.float32)]
    exact = comparer_for("auto", 4, 10).matrix(updates)
    np.testing.assert_array_equal(exact, cosine_similarity_matrix(updates))
