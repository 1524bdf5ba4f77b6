"""Tests for JGL's identity rule: the sign of S, eq. 4, ties and the empty-cluster fix.

The pure functions of :mod:`coordinator.strategies.jgl_identity`, and the choices and fixes
:class:`~coordinator.strategies.jgl.JointGradientLoss` makes with them.
"""

from __future__ import annotations

import numpy as np
import pytest

from coordinator.strategies.jgl_identity import (
    descent_similarity,
    fill_empty_clusters,
    identity_scores,
)
from tests.coordinator.strategies.jgl_helpers import (
    CLIENTS,
    KEYS,
    UPDATES,
    ZERO,
    answer,
    make_jgl,
    probe,
    with_updates,
)

# -- the similarity and the identity rule ---------------------------------------------------


def test_descent_direction_along_the_last_update_scores_plus_one() -> None:
    # Prepare: the gradient points against cluster 0's update, so descent follows it
    updates = np.array(UPDATES)
    gradients = -2.0 * updates

    # Execute
    similarity = descent_similarity(gradients, updates)

    # Assert
    np.testing.assert_allclose(similarity, [1.0, 1.0, 1.0])
    np.testing.assert_allclose(descent_similarity(-gradients, updates), [-1.0, -1.0, -1.0])


def test_device_prefers_the_cluster_whose_last_descent_it_continues() -> None:
    # Prepare: equal losses; a0's gradient is −Δw_1 at cluster 1 (keep descending that way)
    # and +Δw_k elsewhere (it would undo those clusters' last steps)
    strategy = make_jgl(lam=0.2)
    with_updates(strategy, UPDATES)
    gradients = [UPDATES[0], [-u for u in UPDATES[1]], UPDATES[2]]

    # Execute
    probe(strategy, 2, [answer("a0", [1.0, 1.0, 1.0], gradients)])

    # Assert
    assert strategy.choices_ == {"a0": 1}
    assert strategy.round_metrics()["mean_chosen_similarity"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("lam", "expected"),
    [
        (0.0, 2),  # loss alone: cluster 2 has the lowest loss
        (1.0, 0),  # similarity alone: the gradient continues cluster 0's descent
        (0.2, 2),  # the paper's λ: 0.2·(1 − (−1)) < 0.8·(3 − 0.5)
    ],
)
def test_identity_rule_weights_similarity_and_loss(lam: float, expected: int) -> None:
    # Prepare
    strategy = make_jgl(lam=lam)
    with_updates(strategy, UPDATES)
    gradients = [[-1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]

    # Execute
    probe(strategy, 2, [answer("a0", [3.0, 2.0, 0.5], gradients)])

    # Assert
    assert strategy.choices_ == {"a0": expected}


def test_identity_scores_are_eq_4() -> None:
    scores = identity_scores(np.array([1.0, 2.0]), np.array([0.5, -1.0]), 0.25)
    np.testing.assert_allclose(scores, [0.25 * 0.5 - 0.75 * 1.0, -0.25 - 0.75 * 2.0])


def test_euclidean_similarity_is_minus_the_distance_to_the_update() -> None:
    updates = np.array([[1.0, 0.0], [0.0, 2.0]])
    gradients = np.array([[-1.0, 0.0], [0.0, 2.0]])

    similarity = descent_similarity(gradients, updates, "euclidean")

    np.testing.assert_allclose(similarity, [0.0, -4.0])


def test_zero_vectors_have_zero_cosine() -> None:
    similarity = descent_similarity(np.zeros((2, 3)), np.array([[1.0, 0, 0], [0, 0, 0]]))
    np.testing.assert_array_equal(similarity, [0.0, 0.0])


def test_loss_alone_decides_until_every_cluster_has_an_update() -> None:
    # Prepare: only clusters 0 and 1 have an update; the gradient would favour cluster 0
    strategy = make_jgl(lam=0.9)
    strategy.last_update_ = np.asarray(UPDATES, dtype=np.float32)
    strategy.has_update_ = np.array([True, True, False])
    gradients = [[-1.0, 0.0, 0.0], ZERO, ZERO]

    # Execute
    probe(strategy, 2, [answer("a0", [2.0, 1.0, 3.0], gradients)])

    # Assert
    assert strategy.choices_ == {"a0": 1}
    assert strategy.round_metrics()["similarity_used"] == 0.0


def test_ties_go_to_the_lowest_cluster() -> None:
    strategy = make_jgl()
    probe(strategy, 1, [answer("a0", [1.0, 0.5, 0.5], [ZERO, ZERO, ZERO])])
    assert strategy.choices_ == {"a0": 1}


# -- empty clusters (§II-C) -----------------------------------------------------------------


def test_empty_clusters_get_one_device_from_a_crowded_cluster() -> None:
    # Prepare: four devices in cluster 0, one alone in cluster 1, cluster 2 and 3 empty
    assignment = np.array([0, 0, 1, 0, 0])

    # Execute
    fixed, moves = fill_empty_clusters(assignment, 4, np.random.default_rng(3))

    # Assert
    assert moves == 2
    assert sorted(set(fixed.tolist())) == [0, 1, 2, 3]
    assert fixed[2] == 1  # a device alone in its cluster is never moved
    assert np.sum(fixed == 0) == 2
    np.testing.assert_array_equal(assignment, [0, 0, 1, 0, 0])


def test_fewer_devices_than_clusters_fill_what_they_can() -> None:
    fixed, moves = fill_empty_clusters(np.array([2, 2]), 4, np.random.default_rng(0))
    assert moves == 1
    assert sorted(fixed.tolist()) == [0, 2]


def test_no_empty_cluster_draws_nothing() -> None:
    rng = np.random.default_rng(5)
    before = rng.bit_generator.state
    fixed, moves = fill_empty_clusters(np.array([1, 0, 2]), 3, rng)
    assert moves == 0
    np.testing.assert_array_equal(fixed, [1, 0, 2])
    assert rng.bit_generator.state == before


@pytest.mark.parametrize("seed", range(5))
def test_strategy_gives_every_cluster_a_device_each_round(seed: int) -> None:
    # Prepare: every device chooses cluster 0
    strategy = make_jgl()
    probe(strategy, 1, [answer(c, [0.0, 1.0, 1.0], [ZERO] * 3) for c in CLIENTS])

    # Execute
    instructions = strategy.configure_round(1, CLIENTS, np.random.default_rng(seed))

    # Assert
    trained = [i.model_keys[0] for i in instructions]
    assert len(instructions) == 4
    assert set(trained) == set(KEYS)
    assert strategy.round_metrics()["empty_cluster_fixes"] == 2.0
    assert strategy.choices_ == dict.fromkeys(CLIENTS, 0)
    moved = {i.client_id: int(i.model_keys[0][-1]) for i in instructions}
    assert strategy.cluster_labels() == moved
