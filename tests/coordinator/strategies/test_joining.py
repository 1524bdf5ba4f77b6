"""Clients joining and leaving every strategy: the contract, and the shared pieces.

A client held out of the first rounds (c11, of group 2) joins after the clustering, placed
as the coordinator places one (:func:`coordinator.engine.placement.place`: the candidate of
lowest validation loss). Whatever the strategy it must be served the model it was placed
on, train from it, survive a state round trip, and a run resumed after the join must equal
the uninterrupted one.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from coordinator.engine.placement import place
from coordinator.engine.rounds import RoundEngine
from coordinator.engine.state import load_state, save_state
from coordinator.strategies.joining import (
    grow_square,
    keep_square,
    most_served_key,
)
from coordinator.strategies.local import Local
from faultfleet.tasks import TrainConfig
from tests.coordinator.fakes import SyntheticFleet, seeded_factory
from tests.coordinator.strategies.test_contract import GROUPS, Factory, engine_for

NEWCOMER = "c11"
BEFORE = 12
"""Rounds before the newcomer joins: every strategy has clustered by then (FLACC separates
after round 10 on these options, CFL's min_rounds is 2, FL+HC's warm-up 2, FedAC's 1)."""


def started_without_newcomer(strategy_factory: Factory, seed: int = 0) -> RoundEngine:
    engine = engine_for(strategy_factory(), SyntheticFleet(GROUPS), seed)
    engine.remove_clients([NEWCOMER])
    for _ in range(BEFORE):
        engine.run_round()
    return engine


def join(engine: RoundEngine) -> str:
    """Place the newcomer by its own evaluation and add it; the key it was placed on."""
    strategy = engine.strategy
    keys = strategy.join_candidates()
    served = Counter(strategy.model_key_for(c) for c in strategy.client_ids_)
    placed = place(
        engine.fleet,
        engine.server_round,
        [NEWCOMER],
        {k: strategy.models[k] for k in keys},
        {k: served.get(k, 0) for k in keys},
    )[NEWCOMER]
    assert placed.verified
    engine.add_clients([NEWCOMER], {NEWCOMER: placed.key})
    return placed.key


def test_a_newcomer_is_served_its_model_and_trains_from_it(new_strategy: Factory) -> None:
    # Prepare
    engine = started_without_newcomer(new_strategy)
    strategy = engine.strategy
    group_two = [f"c{i:02d}" for i, g in enumerate(GROUPS) if g == 2 and i != 11]

    # Execute
    key = join(engine)
    placed = strategy.models[key].copy()
    served = [strategy.models[k] for k in strategy.predict_models(NEWCOMER)]
    trains = [strategy.models[k] for k in strategy.fit_models(engine.server_round + 1, NEWCOMER)]
    fleet = engine.fleet
    assert isinstance(fleet, SyntheticFleet)
    fleet.offline = set(fleet.ids) - {NEWCOMER}
    engine.run_round()

    # Assert: its group's model, served and trained from; its update was taken
    assert key in {k for c in group_two for k in strategy.predict_models(c)}
    assert any(np.array_equal(w, placed) for w in served)
    assert any(np.array_equal(w, placed) for w in trains)
    assert NEWCOMER in fleet.fit_calls[-1]
    assert strategy.model_ready(NEWCOMER)
    assert set(strategy.cluster_labels()) == set(fleet.ids)


def test_a_newcomer_survives_a_state_round_trip(new_strategy: Factory) -> None:
    engine = started_without_newcomer(new_strategy)
    join(engine)

    restored = engine_for(new_strategy(), SyntheticFleet(GROUPS))
    restored.restore(engine.state())

    assert restored.strategy.client_ids_ == engine.strategy.client_ids_
    assert restored.strategy.cluster_labels() == engine.strategy.cluster_labels()
    assert restored.strategy.join_candidates() == engine.strategy.join_candidates()
    assert restored.strategy.model_ready(NEWCOMER) == engine.strategy.model_ready(NEWCOMER)
    for key, weights in engine.strategy.models.items():
        np.testing.assert_array_equal(restored.strategy.models[key], weights)


@pytest.mark.parametrize("stop", [BEFORE, BEFORE + 2])
def test_a_run_resumed_after_a_join_equals_the_uninterrupted_one(
    new_strategy: Factory, stop: int, tmp_path: Path
) -> None:
    total = BEFORE + 4
    uninterrupted = started_without_newcomer(new_strategy, seed=3)
    join(uninterrupted)
    for _ in range(total - BEFORE):
        uninterrupted.run_round()
    first = started_without_newcomer(new_strategy, seed=3)
    join(first)
    for _ in range(stop - BEFORE):
        first.run_round()
    save_state(tmp_path, first.state())

    resumed = engine_for(new_strategy(), SyntheticFleet(GROUPS), seed=3)
    resumed.restore(load_state(tmp_path))
    for _ in range(total - stop):
        resumed.run_round()

    assert resumed.strategy.cluster_labels() == uninterrupted.strategy.cluster_labels()
    assert set(resumed.strategy.models) == set(uninterrupted.strategy.models)
    for key, weights in uninterrupted.strategy.models.items():
        np.testing.assert_array_equal(resumed.strategy.models[key], weights)


def test_a_client_that_leaves_is_forgotten_and_the_run_goes_on(new_strategy: Factory) -> None:
    engine = engine_for(new_strategy(), SyntheticFleet(GROUPS))
    for _ in range(BEFORE):
        engine.run_round()
    separated = getattr(engine.strategy, "separated_", True)

    engine.remove_clients(["c00", "c05"])
    engine.run_round()
    restored = engine_for(new_strategy(), SyntheticFleet(GROUPS))
    restored.restore(engine.state())

    labels = engine.strategy.cluster_labels()
    assert set(labels) == {f"c{i:02d}" for i in range(12)} - {"c00", "c05"}
    assert restored.strategy.cluster_labels() == labels
    assert separated
    evidence = engine.strategy.cluster_evidence()
    assert len(evidence.client_ids) == 10
    if evidence.similarity is not None:
        assert evidence.similarity.shape == (10, 10)


def test_without_a_key_a_newcomer_joins_by_the_rule(new_strategy: Factory) -> None:
    engine = started_without_newcomer(new_strategy)

    engine.add_clients([NEWCOMER])
    engine.run_round()

    assert NEWCOMER in engine.strategy.cluster_labels()
    assert set(engine.strategy.predict_models(NEWCOMER)) <= set(engine.strategy.models)


# -- the shared pieces -------------------------------------------------------------------------


def test_most_served_key_counts_clients_and_breaks_ties_by_order() -> None:
    engine = RoundEngine(
        Local(fraction=1.0),
        SyntheticFleet([0, 1, 2]),
        model_factory=seeded_factory(),
        train_config=TrainConfig(),
        seed=0,
    )
    strategy = engine.strategy

    assert most_served_key(strategy, ["c02", "c01"]) == "c01"  # one client each: first
    assert most_served_key(strategy, ["c02", "c01"], exclude=["c01"]) == "c02"
    with pytest.raises(ValueError, match="no model key"):
        most_served_key(strategy, [])


def test_square_matrices_grow_and_shrink_by_position() -> None:
    matrix = np.arange(9, dtype=np.float64).reshape(3, 3)

    grown = grow_square(matrix, 2, np.nan)
    kept = keep_square(matrix, [0, 2])

    assert grown.shape == (5, 5)
    np.testing.assert_array_equal(grown[:3, :3], matrix)
    assert np.isnan(grown[3:, :]).all()
    assert np.isnan(grown[:, 3:]).all()
    np.testing.assert_array_equal(kept, [[0, 2], [6, 8]])
