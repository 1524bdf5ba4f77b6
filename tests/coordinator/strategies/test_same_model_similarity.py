"""``SameModelSimilarity`` (IFCA's and FAACL's evidence) as a list of pairs: every pair of a
small group, sampled partners in a large one, memory bounded by the rounds, clients coming
and going, and states saved as matrices by earlier versions still read."""

from __future__ import annotations

import numpy as np
import pytest

from coordinator.strategies import pairwise
from coordinator.strategies.aggregate import cosine_similarity_matrix
from coordinator.strategies.evidence import (
    SAME_MODEL_MEMORY,
    SAME_MODEL_PARTNERS,
    SameModelSimilarity,
)
from coordinator.strategies.pair_memory import sample_pairs
from coordinator.strategies.pairwise import UpdateComparer
from faultfleet.tasks import FitResult


def results(ids: list[str], key: str, seed: int, dim: int = 40) -> list[FitResult]:
    rng = np.random.default_rng(seed)
    deltas = rng.normal(size=(len(ids), dim)).astype(np.float32)
    return [FitResult(c, key, d, d, 10, 0.5) for c, d in zip(ids, deltas, strict=True)]


def by_ids(memory: SameModelSimilarity) -> dict[tuple[str, str], float]:
    """The current pairs as {(id, id): cosine}, each pair in sorted id order."""
    pairs = memory.current()
    ids = memory.client_ids_
    found: dict[tuple[str, str], float] = {}
    for a, b, v in zip(pairs.first, pairs.second, pairs.value, strict=True):
        x, y = ids[a], ids[b]
        found[(x, y) if x < y else (y, x)] = float(v)
    return found


def test_a_small_group_keeps_every_pair_with_its_cosine() -> None:
    # Prepare: 6 clients, two models of 3 and 2 updates, one alone
    ids = [f"c{i}" for i in range(6)]
    memory = SameModelSimilarity(ids)
    a, b = results(ids[:3], "m0", 1), results(ids[3:5], "m1", 2)

    # Execute
    memory.record(1, a + b + results(ids[5:], "m2", 3))

    # Assert: the 3 + 1 same-model pairs, nothing across models
    found = by_ids(memory)
    assert set(found) == {("c0", "c1"), ("c0", "c2"), ("c1", "c2"), ("c3", "c4")}
    exact = cosine_similarity_matrix([r.delta for r in a])
    assert found["c0", "c2"] == np.float32(exact[0, 2])
    assert memory.current().shape == (6, 6)


def test_a_large_group_keeps_sampled_partners_and_forgets_old_rounds() -> None:
    # Prepare: 120 clients training one model every round
    ids = [f"c{i:03d}" for i in range(120)]
    memory = SameModelSimilarity(ids)
    per_round = 120 * 2 * (SAME_MODEL_PARTNERS // 2) // 2

    # Execute
    sizes = []
    for server_round in range(1, 16):
        memory.record(server_round, results(ids, "m", server_round))
        sizes.append(len(memory.pairs_))

    # Assert: partners per update, not every pair (7,140); at most the last T rounds' pairs
    assert sizes[0] == per_round < 120 * 119 // 2
    assert max(sizes) <= SAME_MODEL_MEMORY * per_round
    assert int(memory.pairs_.measured.min()) > 15 - SAME_MODEL_MEMORY
    degree = np.bincount(np.concatenate([memory.pairs_.first, memory.pairs_.second]), minlength=120)
    assert degree.min() > 0  # every client still compared


def test_sampled_pairs_repeat_with_the_same_round() -> None:
    ids = [f"c{i:03d}" for i in range(80)]
    first, second = SameModelSimilarity(ids), SameModelSimilarity(ids)

    first.record(4, results(ids, "m", 9))
    second.record(4, results(ids, "m", 9))

    assert by_ids(first) == by_ids(second)


def test_clients_leaving_and_joining_keep_the_pairs_of_those_who_stay() -> None:
    # Prepare
    ids = [f"c{i}" for i in range(5)]
    memory = SameModelSimilarity(ids)
    memory.record(1, results(ids, "m", 5))
    before = by_ids(memory)

    # Execute: c1 leaves, c5 joins at the end
    memory.resize(["c0", "c2", "c3", "c4", "c5"])

    # Assert
    assert by_ids(memory) == {k: v for k, v in before.items() if "c1" not in k}
    assert memory.current().shape == (5, 5)


def test_a_saved_state_restores_the_same_evidence() -> None:
    ids = [f"c{i:02d}" for i in range(50)]
    memory = SameModelSimilarity(ids)
    for server_round in (1, 2, 3):
        memory.record(server_round, results(ids, "m", server_round))

    restored = SameModelSimilarity(ids)
    restored.load(ids, memory.arrays("same_model_"), "same_model_")

    assert by_ids(restored) == by_ids(memory)
    assert restored.last_round_ == 3


def test_a_state_saved_as_matrices_is_read_into_pairs() -> None:
    # Prepare: the m x m cosines and rounds an earlier version saved, round 12 the last
    ids = ["a", "b", "c", "d"]
    matrix = np.full((4, 4), np.nan)
    rounds = np.zeros((4, 4), dtype=np.int64)
    for (i, j), value, measured in (((0, 1), 0.5, 12), ((1, 3), -0.25, 9), ((0, 2), 0.75, 2)):
        matrix[i, j] = matrix[j, i] = value
        rounds[i, j] = rounds[j, i] = measured
    saved = {"x_similarity": matrix, "x_rounds": rounds, "x_last_round": np.array(12)}

    # Execute
    memory = SameModelSimilarity(ids)
    memory.load(ids, saved, "x_")

    # Assert: the pairs of the last 10 rounds, as the matrices' evidence was
    assert by_ids(memory) == {("a", "b"): 0.5, ("b", "d"): -0.25}


def test_a_client_twice_in_one_model_is_not_paired_with_itself() -> None:
    ids = ["a", "b"]
    memory = SameModelSimilarity(ids)
    twice = results(["a", "a", "b"], "m", 3)

    memory.record(1, twice)

    assert set(by_ids(memory)) == {("a", "b")}
    assert len(memory.pairs_) == 1
    exact = cosine_similarity_matrix([r.delta for r in twice])
    assert by_ids(memory)["a", "b"] == np.float32(exact[1, 2])  # the later update's


@pytest.mark.parametrize("matrix_up_to", [0, 2048])
def test_sketched_pairs_take_the_cosines_of_the_sketch_matrix(
    matrix_up_to: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: 90 updates of 3,000 parameters compared on sketches, 32 partners each; the
    # pairs computed one by one (0) or read from the matrix
    monkeypatch.setattr(pairwise, "PAIRS_MATRIX_UP_TO", matrix_up_to)
    ids = [f"c{i:02d}" for i in range(90)]
    comparer = UpdateComparer("sketch", 3000, 90, epsilon=0.25, seed=4)
    assert comparer.sketcher is not None
    assert comparer.sketcher.dim < 3000
    updates = results(ids, "m", 6, dim=3000)
    a, b = sample_pairs(90, SAME_MODEL_PARTNERS, [1, 0])

    # Execute
    cosines = comparer.pair_cosines([r.delta for r in updates], a, b)
    memory = SameModelSimilarity(ids, comparer)
    memory.record(1, updates)

    # Assert: the pairs alone, as the full sketch matrix gives them
    full = comparer.matrix([r.delta for r in updates])
    np.testing.assert_allclose(cosines, full[a, b], atol=1e-12)
    found = by_ids(memory)
    assert len(found) == len(a) < 90 * 89 // 2
    for i, j, cosine in zip(a[:50], b[:50], full[a, b][:50], strict=True):
        assert found[ids[i], ids[j]] == np.float32(cosine)
