"""Tests for JGL's options and state: checks by name, initial models, resuming a run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from coordinator.engine.rounds import RoundEngine
from coordinator.engine.state import load_state, save_state
from coordinator.strategies.base import StrategyState
from coordinator.strategies.jgl import JointGradientLoss
from faultfleet.scoring import clustering_scores
from faultfleet.tasks import TrainConfig
from faultfleet.types import FloatArray
from tests.coordinator.fakes import SyntheticFleet, seeded_factory
from tests.coordinator.strategies.jgl_helpers import (
    CLIENTS,
    KEYS,
    UPDATES,
    ZERO,
    answer,
    factory,
    make_jgl,
    probe,
    with_updates,
)

# -- options and state ----------------------------------------------------------------------


def test_initial_models_are_independent_initialisations() -> None:
    calls: list[int] = []

    def recording(k: int) -> FloatArray:
        calls.append(k)
        return factory(k)

    strategy = JointGradientLoss(n_clusters=3)
    strategy.initialize(CLIENTS, recording)

    assert calls == [0, 1, 2]
    assert tuple(strategy.models) == KEYS


def test_state_round_trips_mid_round() -> None:
    # Prepare: probed and configured, not yet aggregated
    strategy = make_jgl(lam=0.5)
    with_updates(strategy, UPDATES)
    strategy.identities_ = {"b1": 2}
    probe(strategy, 4, [answer(c, [0.0, 1.0, 2.0], [ZERO] * 3) for c in ("a0", "a1", "b0")])
    strategy.configure_round(4, CLIENTS, np.random.default_rng(0))

    # Execute
    state = strategy.state_dict()
    restored = make_jgl(lam=0.5)
    restored.load_state_dict(StrategyState(dict(state.arrays), dict(state.meta)))

    # Assert
    for name in ("identities_", "choices_", "probe_round_", "probed_", "plan_round_", "plan_"):
        assert getattr(restored, name) == getattr(strategy, name), name
    assert restored.round_metrics() == strategy.round_metrics()
    np.testing.assert_array_equal(restored.last_update_, strategy.last_update_)
    np.testing.assert_array_equal(restored.has_update_, strategy.has_update_)
    assert restored.cluster_labels() == strategy.cluster_labels()


def test_state_of_another_cluster_count_is_refused() -> None:
    state = make_jgl().state_dict()
    other = JointGradientLoss(n_clusters=2)
    other.initialize(CLIENTS, factory)
    with pytest.raises(ValueError, match="n_clusters=3"):
        other.load_state_dict(state)


GROUPS = [0, 0, 0, 1, 1, 1, 2, 2, 2]


def synthetic_run(rounds: int, seed: int = 4) -> RoundEngine:
    engine = RoundEngine(
        JointGradientLoss(fraction=1.0, n_clusters=3, batch_size=8),
        SyntheticFleet(GROUPS),
        model_factory=seeded_factory(),
        train_config=TrainConfig(),
        seed=seed,
    )
    for _ in range(rounds):
        engine.run_round()
    return engine


def test_recovers_synthetic_groups_and_resumes_identically(tmp_path: Path) -> None:
    # Prepare
    uninterrupted = synthetic_run(6)
    first = synthetic_run(2)
    save_state(tmp_path, first.state())

    # Execute
    resumed = RoundEngine(
        JointGradientLoss(fraction=1.0, n_clusters=3, batch_size=8),
        SyntheticFleet(GROUPS),
        model_factory=seeded_factory(),
        train_config=TrainConfig(),
        seed=4,
    )
    resumed.restore(load_state(tmp_path))
    for _ in range(4):
        resumed.run_round()

    # Assert
    truth = {f"c{i:02d}": g for i, g in enumerate(GROUPS)}
    assert clustering_scores(truth, uninterrupted.strategy.cluster_labels()).purity == 1.0
    assert resumed.strategy.cluster_labels() == uninterrupted.strategy.cluster_labels()
    assert resumed.strategy.round_metrics() == uninterrupted.strategy.round_metrics()
    for key, weights in uninterrupted.strategy.models.items():
        np.testing.assert_array_equal(resumed.strategy.models[key], weights)
