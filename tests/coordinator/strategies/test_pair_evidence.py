"""coordinator.strategies.pair_evidence: the latest similarity of pairs of clients as an
m × m matrix (exact comparisons) or as sampled pairs (sketches), recorded, resized when
clients join or leave, saved and restored."""

from __future__ import annotations

import numpy as np
import pytest

from coordinator.strategies.known_pairs import KnownPairs
from coordinator.strategies.pair_evidence import FOREVER, PairEvidence
from faultfleet.types import Float64Array, IntArray

CLIENTS = [f"c{i:02d}" for i in range(50)]
VALUES = np.random.default_rng(3).uniform(-1, 1, size=(50, 50))
VALUES = (VALUES + VALUES.T) / 2


def record(evidence: PairEvidence, server_round: int, rows: list[int]) -> list[str]:
    """Record VALUES at ``rows``; returns which of the two callables the evidence used."""
    used: list[str] = []
    block = VALUES[np.ix_(rows, rows)]

    def whole() -> Float64Array:
        used.append("block")
        return block.copy()

    def pairs(a: IntArray, b: IntArray) -> Float64Array:
        used.append("pairs")
        return np.asarray(block[a, b], dtype=np.float64)

    evidence.record(server_round, rows, block=whole, pairs=pairs)
    return used


def known(evidence: PairEvidence) -> Float64Array:
    similarity = evidence.similarity()
    return similarity.dense() if isinstance(similarity, KnownPairs) else similarity


def test_the_matrix_takes_every_pair_and_the_pairs_a_sample_of_the_same_values() -> None:
    # Prepare
    dense = PairEvidence(CLIENTS, sampled=False, memory=FOREVER)
    sampled = PairEvidence(CLIENTS, sampled=True, memory=FOREVER)
    rows = list(range(0, 50, 1))

    # Execute
    used_dense, used_sampled = record(dense, 1, rows), record(sampled, 1, rows)

    # Assert
    assert (used_dense, used_sampled) == (["block"], ["pairs"])
    full, few = known(dense), known(sampled)
    expected = VALUES.copy()
    np.fill_diagonal(expected, np.nan)
    np.testing.assert_array_equal(full, expected)
    assert np.count_nonzero(~np.isnan(few)) == 50 * 32  # 32 partners each, both triangles
    seen = ~np.isnan(few)
    np.testing.assert_allclose(few[seen], VALUES[seen], atol=1e-6)  # float32 pairs
    assert dense.describe() == "every pair"
    assert sampled.describe() == "each client with 32 sampled others"
    assert PairEvidence(CLIENTS, sampled=True, memory=10).describe().endswith("last 10 rounds")


@pytest.mark.parametrize("sampled", [False, True])
def test_clients_joining_and_leaving_keep_the_others_pairs(sampled: bool) -> None:
    # Prepare: ten clients, every pair known
    evidence = PairEvidence(CLIENTS[:10], sampled=sampled, memory=FOREVER)
    record(evidence, 1, list(range(10)))
    before = known(evidence)

    # Execute: two join, then c03 and c07 leave
    evidence.join(CLIENTS[:12], 2)
    grown = known(evidence)
    kept = [i for i in range(12) if i not in (3, 7)]
    evidence.leave([CLIENTS[i] for i in kept], kept)

    # Assert
    assert grown.shape == (12, 12)
    assert np.isnan(grown[10:, :]).all()
    np.testing.assert_allclose(grown[:10, :10], before, atol=1e-6)
    np.testing.assert_array_equal(known(evidence), grown[np.ix_(kept, kept)])


@pytest.mark.parametrize("sampled", [False, True])
def test_the_state_round_trips_and_a_saved_matrix_loads_as_pairs(sampled: bool) -> None:
    # Prepare
    evidence = PairEvidence(CLIENTS, sampled=sampled, memory=FOREVER)
    record(evidence, 4, list(range(0, 50, 2)))
    saved = evidence.arrays()
    assert ("similarity" in saved) is not sampled

    # Execute
    restored = PairEvidence(CLIENTS, sampled=sampled, memory=FOREVER)
    restored.load(CLIENTS, saved)
    from_matrix = PairEvidence(CLIENTS, sampled=True, memory=FOREVER)
    from_matrix.load(CLIENTS, {"similarity": known(evidence)})

    # Assert
    np.testing.assert_array_equal(known(restored), known(evidence))
    np.testing.assert_allclose(known(from_matrix), known(evidence), atol=1e-6)


def test_a_saved_matrix_of_another_size_is_refused() -> None:
    evidence = PairEvidence(CLIENTS, sampled=False, memory=FOREVER)
    with pytest.raises(ValueError, match=r"\(3, 3\) similarity matrix for 50 clients"):
        evidence.load(CLIENTS, {"similarity": np.zeros((3, 3))})
