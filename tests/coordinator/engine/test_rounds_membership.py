"""Clients joining and leaving a run between rounds, through the round engine."""

from __future__ import annotations

import numpy as np
import pytest

from coordinator.engine.rounds import RoundEngine
from coordinator.strategies.base import Strategy
from coordinator.strategies.fedavg import FedAvg
from coordinator.strategies.local import Local
from faultfleet.tasks import TrainConfig
from tests.coordinator.fakes import SyntheticFleet, seeded_factory

GROUPS = [0, 0, 1, 1, 2, 2]


def make(strategy: Strategy, fleet: SyntheticFleet) -> RoundEngine:
    return RoundEngine(
        strategy,
        fleet,
        model_factory=seeded_factory(fleet.targets.shape[1]),
        train_config=TrainConfig(),
        seed=0,
    )


def test_a_removed_client_is_no_longer_sampled_and_an_added_one_is() -> None:
    # Prepare: every client of the fleet is available; c05 leaves after round 1
    fleet = SyntheticFleet(GROUPS)
    engine = make(FedAvg(fraction=1.0), fleet)
    first = engine.run_round()

    # Execute
    engine.remove_clients(["c05"])
    without = engine.run_round()
    engine.add_clients(["c05"])
    back = engine.run_round()

    # Assert
    assert "c05" in first.sampled
    assert without.sampled == ("c00", "c01", "c02", "c03", "c04")
    assert "c05" in back.sampled
    assert engine.strategy.client_ids_ == ("c00", "c01", "c02", "c03", "c04", "c05")


def test_a_joining_client_takes_the_model_it_was_assigned() -> None:
    # Prepare: local training, c05 out of the run; it joins on c02's model
    fleet = SyntheticFleet(GROUPS)
    engine = make(Local(fraction=1.0), fleet)
    engine.remove_clients(["c05"])
    engine.run_round()

    # Execute
    engine.add_clients(["c05"], {"c05": "c02"})

    # Assert: a copy of c02's model, not served before c05 trained it
    np.testing.assert_array_equal(engine.strategy.models["c05"], engine.strategy.models["c02"])
    assert not engine.strategy.model_ready("c05")
    engine.run_round()
    assert engine.strategy.model_ready("c05")


def test_an_assigned_key_must_serve_a_client() -> None:
    engine = make(FedAvg(fraction=1.0), SyntheticFleet(GROUPS))

    with pytest.raises(ValueError, match=r"assigned model 'cluster-7', which serves no client"):
        engine.add_clients(["c09"], {"c09": "cluster-7"})
    with pytest.raises(ValueError, match="not joining: c08"):
        engine.add_clients(["c09"], {"c08": "global"})
    assert engine.strategy.client_ids_ == tuple(f"c{i:02d}" for i in range(6))


def test_joining_and_leaving_check_the_ids() -> None:
    engine = make(FedAvg(fraction=1.0), SyntheticFleet(GROUPS))

    with pytest.raises(ValueError, match="already registered: c01"):
        engine.add_clients(["c01"])
    with pytest.raises(ValueError, match="unique"):
        engine.add_clients(["x", "x"])
    with pytest.raises(ValueError, match="unknown clients: zz"):
        engine.remove_clients(["zz"])
    with pytest.raises(ValueError, match="every client"):
        engine.remove_clients([f"c{i:02d}" for i in range(6)])


def test_membership_survives_a_state_round_trip() -> None:
    fleet = SyntheticFleet(GROUPS)
    engine = make(FedAvg(fraction=1.0), fleet)
    engine.run_round()
    engine.remove_clients(["c02"])
    state = engine.state()

    restored = make(FedAvg(fraction=1.0), fleet)
    restored.restore(state)

    assert "c02" not in restored.strategy.client_ids_
    assert "c02" not in restored.run_round().sampled
