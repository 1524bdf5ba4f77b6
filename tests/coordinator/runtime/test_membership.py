"""Who joins and who leaves a running federation, and how the change is applied (the
broker test is in tests/integration/test_membership.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.presence import AgentRegistry
from coordinator.engine.membership import MembershipChange, plan_membership
from coordinator.engine.rounds import RoundEngine
from coordinator.runtime.membership import MembershipSync
from coordinator.strategies.base import Strategy
from coordinator.strategies.fedavg import FedAvg
from coordinator.strategies.local import Local
from faultfleet.tasks import TrainConfig
from faultfleet.wire.messages import AgentStatus
from tests.coordinator.fakes import SyntheticFleet, seeded_factory


def test_newcomers_join_and_retired_members_leave() -> None:
    change = plan_membership(
        members=["m00", "m01", "m02"], online_trainers=["m00", "m05", "m04"], retired=["m01"]
    )

    assert change == MembershipChange(joining=("m05", "m04"), leaving=("m01",))


def test_an_offline_member_keeps_its_place_and_a_retired_stranger_is_ignored() -> None:
    change = plan_membership(members=["m00", "m01"], online_trainers=["m00"], retired=["m09"])

    assert not change


def test_the_last_members_stay_unless_someone_joins() -> None:
    alone = plan_membership(members=["m00", "m01"], online_trainers=[], retired=["m00", "m01"])
    replaced = plan_membership(
        members=["m00", "m01"], online_trainers=["m02"], retired=["m00", "m01"]
    )

    assert not alone
    assert replaced == MembershipChange(joining=("m02",), leaving=("m00", "m01"))


class MemberList:
    """A fleet's member list (what MqttFleet.set_clients keeps)."""

    def __init__(self) -> None:
        self.clients: list[str] | None = None

    def set_clients(self, clients: Sequence[str]) -> None:
        self.clients = list(clients)


def status(agent_id: str, state: Literal["online", "offline", "retired"]) -> AgentStatus:
    return AgentStatus(agent_id=agent_id, state=state, can_train=True)


def engine_of(strategy: Strategy, fleet: SyntheticFleet) -> RoundEngine:
    return RoundEngine(
        strategy, fleet, model_factory=seeded_factory(8), train_config=TrainConfig(), seed=0
    )


def test_apply_updates_strategy_fleet_and_metrics() -> None:
    # Prepare: c00-c03 started the run; c03 is retired and m09 comes online
    registry = CollectorRegistry()
    metrics = CoordinatorMetrics(registry)
    presence = AgentRegistry()
    for agent in ("c00", "c01", "c02", "m09"):
        presence.update(status(agent, "online"))
    presence.update(status("c03", "retired"))
    engine = engine_of(FedAvg(fraction=1.0), SyntheticFleet([0, 0, 1, 1]))
    fleet = MemberList()

    # Execute
    after = MembershipSync(presence, metrics).apply(engine, fleet, ["c00", "c01", "c02", "c03"])

    # Assert
    assert after == fleet.clients == ["c00", "c01", "c02", "m09"]
    assert engine.strategy.client_ids_ == ("c00", "c01", "c02", "m09")
    value = registry.get_sample_value
    assert value("faultfleet_membership_changes_total", {"change": "joined"}) == 1
    assert value("faultfleet_membership_changes_total", {"change": "left"}) == 1
    assert value("faultfleet_federation_agents") == 4


def test_only_placed_agents_join_each_with_its_key() -> None:
    # Prepare: local training on c00-c01; m08 was placed on c01's model, m09 not yet
    presence = AgentRegistry()
    for agent in ("c00", "c01", "m08", "m09"):
        presence.update(status(agent, "online"))
    engine = engine_of(Local(fraction=1.0), SyntheticFleet([0, 1]))
    fleet = MemberList()
    sync = MembershipSync(presence, CoordinatorMetrics(CollectorRegistry()))
    members = ["c00", "c01"]
    placed: dict[str, str | None] = {"m08": "c01"}

    # Execute
    waiting = sync.has_newcomers(members, {})
    after = sync.apply(engine, fleet, members, placed=placed)

    # Assert
    assert not waiting
    assert sync.has_newcomers(members, placed)
    assert after == fleet.clients == ["c00", "c01", "m08"]
    assert engine.strategy.client_ids_ == ("c00", "c01", "m08")
    np.testing.assert_array_equal(engine.strategy.models["m08"], engine.strategy.models["c01"])


def test_a_member_moves_to_the_key_its_new_data_chose() -> None:
    # Prepare: local training; c01's new data chose c02's model, c02's its own
    presence = AgentRegistry()
    for agent in ("c00", "c01", "c02"):
        presence.update(status(agent, "online"))
    engine = engine_of(Local(fraction=1.0), SyntheticFleet([0, 0, 1]))
    engine.run_round()
    members = ["c00", "c01", "c02"]

    # Execute
    after = MembershipSync(presence, CoordinatorMetrics(CollectorRegistry())).apply(
        engine, MemberList(), members, placed={}, moves={"c01": "c02", "c02": "c02"}
    )

    # Assert: only c01 moves (to the end of the order), on a copy of c02's model
    assert after == ["c00", "c02", "c01"]
    np.testing.assert_array_equal(engine.strategy.models["c01"], engine.strategy.models["c02"])


def test_apply_keeps_a_run_whose_every_member_was_retired() -> None:
    presence = AgentRegistry()
    presence.update(status("c00", "retired"))
    presence.update(status("c01", "retired"))
    engine = engine_of(FedAvg(fraction=1.0), SyntheticFleet([0, 1]))
    members = ["c00", "c01"]

    after = MembershipSync(presence, CoordinatorMetrics(CollectorRegistry())).apply(
        engine, MemberList(), members
    )

    assert after is members
    assert engine.strategy.client_ids_ == ("c00", "c01")
