"""FLACC comparing sketches and streaming its averages, against FLACC as Algorithm 1."""

from __future__ import annotations

import numpy as np
import pytest

from coordinator.engine.rounds import RoundEngine
from coordinator.strategies.flacc import FLACC
from coordinator.strategies.pairwise import SKETCH_FLEET
from faultfleet.scoring import adjusted_rand_index
from faultfleet.tasks import TrainConfig
from tests.coordinator.fakes import SyntheticFleet, seeded_factory

GROUPS = [i % 4 for i in range(60)]


def clustered(strategy: FLACC, rounds: int = 12) -> list[int]:
    fleet = SyntheticFleet(GROUPS, dim=3000, noise=0.3)
    engine = RoundEngine(
        strategy, fleet, model_factory=seeded_factory(3000), train_config=TrainConfig(), seed=0
    )
    for _ in range(rounds):
        engine.run_round()
    labels = strategy.cluster_labels()
    return [labels[c] for c in fleet.client_ids()]


def flacc(**options: object) -> FLACC:
    return FLACC(fraction=0.5, n_merge=60, n_sep=50, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("partners", [64, 8], ids=["every-pair", "sampled-pairs"])
def test_sketched_flacc_finds_the_clusters_exact_flacc_finds(partners: int) -> None:
    exact = clustered(flacc(pairwise="exact"))
    sketched = clustered(flacc(pairwise="sketch", partners=partners, sketch_seed=3))

    assert adjusted_rand_index(GROUPS, exact) == 1.0
    assert adjusted_rand_index(exact, sketched) >= 0.99


def test_sketch_mode_keeps_no_dense_matrix_and_a_bounded_pair_list() -> None:
    strategy = flacc(pairwise="sketch", partners=8, memory=3)

    clustered(strategy, rounds=6)

    assert not hasattr(strategy, "alpha_")
    assert strategy.sketched_ is not None
    assert len(strategy.sketched_.memory) <= (3 + 1) * 30 * 8 // 2
    assert strategy.sketched_.sketcher.dim < 3000


def test_auto_switches_to_sketches_at_the_fleet_threshold() -> None:
    small, large = FLACC(), FLACC()
    small.initialize([f"c{i}" for i in range(SKETCH_FLEET - 1)], seeded_factory())
    large.initialize([f"c{i}" for i in range(SKETCH_FLEET)], seeded_factory())

    assert (small.pairwise_, large.pairwise_) == ("exact", "sketch")
    assert small.open_stream(1) is None
    assert large.open_stream(1) is not None
    assert np.all(small.alpha_ == -1.0)
