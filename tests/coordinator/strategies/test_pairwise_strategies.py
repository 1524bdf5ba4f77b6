"""Strategies that compare updates, on sketches against exact (coordinator.strategies.pairwise).

A seeded federation of three well-separated groups, with models long enough (3,000
parameters) for the sketch to be shorter than the update (d = 491 for 18 clients at
ε = 0.25): the clusters found on sketches must be the exact path's (ARI 1) and the
cosines of the evidence within the JL bound's ε of the exact ones.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from coordinator.engine.rounds import RoundEngine
from coordinator.strategies.base import Strategy, StrategyState
from coordinator.strategies.evidence import SameModelSimilarity
from coordinator.strategies.pairwise import SKETCH_FLEET, UpdateComparer
from coordinator.strategies.registry import make_strategy
from faultfleet.errors import UsageError
from faultfleet.scoring import adjusted_rand_index
from faultfleet.tasks import TrainConfig
from tests.coordinator.fakes import SyntheticFleet, seeded_factory

GROUPS = [0] * 6 + [1] * 6 + [2] * 6
DIM = 3000
EPSILON = 0.25
ROUNDS = 5
COMPARING: dict[str, dict[str, object]] = {
    "flhc": {"n_warmup": 1},
    "cfl": {"min_rounds": 2, "criterion": "similarity"},
    "jgl": {"n_clusters": 3, "batch_size": 8},
    "faacl": {"epsilon": 1.0, "init_rounds": 1},
    "ifca": {"n_clusters": 3},
}


def build(name: str, pairwise: str) -> Strategy:
    options = {**COMPARING[name], "pairwise": pairwise, "sketch_epsilon": EPSILON}
    return make_strategy(name, fraction=0.5, options=options)


def run(strategy: Strategy, rounds: int = ROUNDS) -> Strategy:
    fleet = SyntheticFleet(GROUPS, dim=DIM, seed=3)
    engine = RoundEngine(
        strategy, fleet, model_factory=seeded_factory(DIM), train_config=TrainConfig(), seed=0
    )
    for _ in range(rounds):
        engine.run_round()
    return strategy


def comparer_of(strategy: Strategy) -> UpdateComparer:
    """The strategy's comparer (FAACL and IFCA hold it in their same-model evidence)."""
    same_model = getattr(strategy, "same_model_", None)
    if isinstance(same_model, SameModelSimilarity):
        assert same_model.comparer is not None
        return same_model.comparer
    comparer = strategy.comparer_  # type: ignore[attr-defined]
    assert isinstance(comparer, UpdateComparer)
    return comparer


@pytest.mark.parametrize("name", sorted(COMPARING))
def test_sketches_find_the_exact_clusters_and_cosines_within_epsilon(name: str) -> None:
    # Prepare / Execute: the same seeded run, comparing exactly and on sketches
    exact, sketched = run(build(name, "exact")), run(build(name, "sketch"))

    # Assert: the sketch was used, with a dimension below the model's
    comparer = comparer_of(sketched)
    assert comparer.sketcher is not None
    assert comparer.sketcher.dim < DIM
    # the same clusters, and they are the true groups where the strategy learns them here
    labels = [exact.cluster_labels()[c] for c in exact.client_ids_]
    found = [sketched.cluster_labels()[c] for c in exact.client_ids_]
    assert adjusted_rand_index(labels, found) == 1
    if name in ("flhc", "cfl"):
        assert adjusted_rand_index(GROUPS, labels) == 1
    # cosines measured on the same pairs, within ε, and not all equal (they are sketched)
    a = exact.cluster_evidence().similarity_matrix()
    b = sketched.cluster_evidence().similarity_matrix()
    assert a is not None
    assert b is not None
    known = ~np.isnan(a) & ~np.eye(len(a), dtype=bool)
    np.testing.assert_array_equal(known, ~np.isnan(b) & ~np.eye(len(b), dtype=bool))
    assert known.sum() >= 4
    errors = np.abs(a[known] - b[known])
    assert errors.max() <= EPSILON
    assert errors.max() > 0


@pytest.mark.parametrize("name", sorted(COMPARING))
def test_auto_compares_exactly_below_the_fleet_threshold(name: str) -> None:
    strategy = run(build(name, "auto"), rounds=1)
    comparer = comparer_of(strategy)
    assert len(GROUPS) < SKETCH_FLEET
    assert comparer.mode == "exact"
    assert comparer.sketcher is None


@pytest.mark.parametrize("name", sorted(COMPARING))
@pytest.mark.parametrize(
    ("option", "value"), [("pairwise", "fast"), ("sketch_epsilon", 1.5), ("sketch_seed", -1)]
)
def test_a_bad_pairwise_setting_is_refused_by_name(name: str, option: str, value: object) -> None:
    with pytest.raises(UsageError, match=f"{name}: {option} must be"):
        make_strategy(name, fraction=0.5, options={**COMPARING[name], option: value})


@pytest.mark.parametrize("name", sorted(COMPARING))
def test_a_resumed_run_sketches_with_the_dimension_it_started_with(name: str) -> None:
    # Prepare: a sketching strategy that gained clients after it started
    strategy = run(build(name, "sketch"), rounds=2)
    started = comparer_of(strategy).sketcher
    assert started is not None
    strategy.add_clients([f"n{i:03d}" for i in range(200)], seeded_factory(DIM))

    # Execute: save (metadata through JSON), and load into a fresh strategy
    saved = strategy.state_dict()
    resumed = build(name, "sketch")
    resumed.load_state_dict(StrategyState(saved.arrays, json.loads(json.dumps(saved.meta))))

    # Assert: the same sketch as before the clients joined
    sketcher = comparer_of(resumed).sketcher
    assert sketcher is not None
    assert (sketcher.dim, sketcher.seed) == (started.dim, started.seed)
