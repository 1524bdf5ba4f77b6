"""Newcomers: agents outside the federation placed on a serving cluster and served at once.

Two clusters serve one member each (v1). The fleet is a fake whose agents score a model by
a table of validation losses; the registry and the store are real files; the publisher is
real over a connection that records what it publishes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import partial
from itertools import count
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.model_registry import ModelRegistry
from coordinator.adapters.mqtt_fleet import MqttFleet
from coordinator.adapters.placement_store import PlacementStore
from coordinator.adapters.presence import AgentRegistry
from coordinator.adapters.publisher import ModelPublisher
from coordinator.engine.rounds import RoundEngine
from coordinator.runtime.campaign_book import LabelledCounts
from coordinator.runtime.newcomers import Newcomers
from coordinator.runtime.promotion import ModelPromotion
from coordinator.runtime.run_summary import RunSummary
from coordinator.strategies.fixed import FixedClusters
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.tasks import EvaluateOutcome, EvaluateResult, EvaluateTask, Failure
from faultfleet.types import FloatArray
from faultfleet.wire.messages import AgentStatus
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.signing import SigningKey
from tests.coordinator.runtime.test_promotion import SPEC, TOPICS, Recorder

MEMBERS = {"m00": "cluster-0", "m01": "cluster-1"}


def _weights(seed: int) -> FloatArray:
    return flatten_weights(build_model("compact", (1, 1024), 12, seed=seed))


def _digest(weights: FloatArray) -> str:
    return hashlib.sha256(weights.tobytes()).hexdigest()


class LossFleet:
    """Agents that score a model by a table: (agent, weights digest) → (loss, accuracy)."""

    def __init__(self) -> None:
        self.scores: dict[tuple[str, str], tuple[float, float]] = {}
        self.keys: list[str] = []

    def online_clients(self) -> list[str]:
        return []

    def evaluate(self, server_round: int, tasks: Sequence[EvaluateTask]) -> EvaluateOutcome:
        results, failures = [], []
        for task in tasks:
            ((key, weights),) = task.models.items()
            self.keys.append(key)
            score = self.scores.get((task.client_id, _digest(weights)))
            if score is None:
                failures.append(Failure(task.client_id, "this agent holds no val windows"))
                continue
            loss, accuracy = score
            results.append(EvaluateResult(task.client_id, key, accuracy, loss, 30))
        return EvaluateOutcome(tuple(results), tuple(failures))


class Fleet(SimpleNamespace):
    """What a test needs: the pieces and the two cluster models."""

    newcomers: Newcomers
    recorder: Recorder
    fleet: LossFleet
    presence: AgentRegistry
    counts: LabelledCounts
    summary: RunSummary
    weights: dict[str, FloatArray]
    store: PlacementStore
    promotion: ModelPromotion


def online(fleet: Fleet, agent: str, windows: int, *, can_train: bool = True) -> None:
    status = AgentStatus(
        agent_id=agent, state="online", can_train=can_train, labelled_windows=windows
    )
    fleet.presence.update(status)
    fleet.counts.update(status)


def newcomers_of(fleet: Fleet, engine: Any) -> Newcomers:
    return Newcomers(
        cast(RoundEngine, engine),
        cast(MqttFleet, fleet.fleet),
        fleet.promotion,
        fleet.presence,
        fleet.counts,
        fleet.store,
        fleet.summary,
        margin=0.05,
        clock=partial(next, count(2000.0)),
    )


@pytest.fixture
def served(tmp_path: Path) -> Fleet:
    """v1 of cluster-0 serves m00 and v1 of cluster-1 serves m01."""
    recorder = Recorder()
    publisher = ModelPublisher(
        cast(MqttConnection, recorder), TOPICS, SPEC, tuple(f"c{i}" for i in range(12)),
        "run", SigningKey.generate(), clock=lambda: 1000.0,
    )  # fmt: skip
    fake = LossFleet()
    promotion = ModelPromotion(
        ModelRegistry(tmp_path / "models"), publisher, cast(MqttFleet, fake),
        CoordinatorMetrics(CollectorRegistry()), margin=0.05, keep_versions=5,
    )  # fmt: skip
    weights = {"cluster-0": _weights(0), "cluster-1": _weights(1)}
    strategy = FixedClusters(fraction=1.0, assignment={"m00": 0, "m01": 1})
    strategy.initialize(list(MEMBERS), lambda i: weights["cluster-0"].copy())
    strategy.models_.update(weights)
    engine = SimpleNamespace(strategy=strategy, server_round=4)
    fleet = Fleet(
        recorder=recorder,
        fleet=fake,
        presence=AgentRegistry(),
        counts=LabelledCounts(),
        summary=RunSummary(run_id="run", strategy="fixed", agents=list(MEMBERS)),
        weights=weights,
        store=PlacementStore(tmp_path),
        promotion=promotion,
    )
    fleet.newcomers = newcomers_of(fleet, engine)
    promotion.publish(1, 4, weights, MEMBERS)
    for agent in MEMBERS:
        online(fleet, agent, 40)
    fleet.newcomers.serve()  # the members' window counts are noted; nobody is placed
    fleet.fleet.keys.clear()
    return fleet


def test_a_newcomer_is_placed_on_its_lowest_loss_cluster_and_assigned_at_once(
    served: Fleet,
) -> None:
    # Prepare: m02 fits cluster-1; m03 holds no labelled window
    fleet = served
    fleet.fleet.scores = {
        ("m02", _digest(fleet.weights["cluster-0"])): (2.5, 0.4),
        ("m02", _digest(fleet.weights["cluster-1"])): (0.2, 0.95),
    }
    online(fleet, "m02", 30)
    online(fleet, "m03", 0, can_train=False)

    # Execute
    changed = fleet.newcomers.serve()
    again = fleet.newcomers.serve()

    # Assert: assigned at once; m03 by the rule, unverified; nothing asked twice
    assert changed
    assert not again
    assert fleet.recorder.assignments() == {"m00": 1, "m01": 1, "m02": 1, "m03": 1}
    serving = fleet.promotion.registry.serving().agents
    assert (serving["m02"], serving["m03"]) == ("cluster-1", "cluster-0")
    notes = {n["agent_id"]: n for n in fleet.summary.placements}
    assert notes["m02"]["basis"] == "evaluation"
    assert notes["m02"]["verified"] is True
    assert [s["cluster_id"] for s in notes["m02"]["scores"]] == ["cluster-1", "cluster-0"]
    assert notes["m03"]["verified"] is False
    assert notes["m03"]["note"] == "it holds no labelled windows"
    assert notes["m02"]["model_version"] == 1
    assert len(fleet.fleet.keys) == 2  # m02's two candidates; m03 is not asked
    assert fleet.newcomers.joins() == {"m02": "cluster-1", "m03": None}


def test_labels_place_an_unverified_machine_again_with_a_new_offer(served: Fleet) -> None:
    fleet = served
    online(fleet, "m03", 0, can_train=False)
    fleet.newcomers.serve()
    first = fleet.newcomers.book.placements["m03"]
    fleet.fleet.scores = {
        ("m03", _digest(fleet.weights["cluster-0"])): (1.9, 0.5),
        ("m03", _digest(fleet.weights["cluster-1"])): (0.3, 0.9),
    }

    online(fleet, "m03", 25)
    fleet.newcomers.serve()

    note = fleet.newcomers.book.placements["m03"]
    assert (note.cluster_id, note.verified, note.labelled_windows) == ("cluster-1", True, 25)
    assert first.seen_at < first.placed_at < note.placed_at
    assert note.seen_at == first.seen_at  # found once, placed again
    assert all(key.endswith("/offer2") for key in fleet.fleet.keys)
    assert fleet.promotion.registry.serving().agents["m03"] == "cluster-1"


def test_a_member_moves_only_when_another_cluster_is_better_by_the_margin(
    served: Fleet,
) -> None:
    # Prepare: m00's new data fit cluster-1 much better; m01's fit cluster-0 barely better
    fleet = served
    w0, w1 = (_digest(fleet.weights[k]) for k in ("cluster-0", "cluster-1"))
    fleet.fleet.scores = {
        ("m00", w0): (1.5, 0.5),
        ("m00", w1): (0.4, 0.9),
        ("m01", w0): (0.45, 0.82),
        ("m01", w1): (0.5, 0.8),
    }

    # Execute
    online(fleet, "m00", 60)
    online(fleet, "m01", 70)
    fleet.newcomers.serve()

    # Assert
    assert fleet.newcomers.moves() == {"m00": "cluster-1"}
    assert fleet.promotion.registry.serving().agents == {"m00": "cluster-1", "m01": "cluster-1"}
    assert fleet.newcomers.book.placements["m00"].member
    assert "m01" not in fleet.newcomers.book.placements
    fleet.newcomers.settled(list(MEMBERS))
    assert fleet.newcomers.moves() == {}


def test_a_restarted_coordinator_does_not_ask_a_placed_machine_again(served: Fleet) -> None:
    fleet = served
    fleet.fleet.scores = {("m02", _digest(fleet.weights["cluster-1"])): (0.2, 0.9)}
    online(fleet, "m02", 30)
    fleet.newcomers.serve()
    asked = len(fleet.fleet.keys)

    restarted = newcomers_of(fleet, fleet.newcomers.engine)
    changed = restarted.serve()

    assert not changed
    assert len(fleet.fleet.keys) == asked
    assert [n["agent_id"] for n in fleet.summary.placements] == ["m02"]


def test_joining_notes_the_first_round_and_a_leaver_is_forgotten(served: Fleet) -> None:
    fleet = served
    fleet.fleet.scores = {("m02", _digest(fleet.weights["cluster-1"])): (0.2, 0.9)}
    online(fleet, "m02", 30)
    fleet.newcomers.serve()

    fleet.newcomers.settled([*MEMBERS, "m02"])
    joined = fleet.newcomers.book.placements["m02"].joined_round
    fleet.newcomers.settled(list(MEMBERS))

    assert joined == 5
    assert "m02" not in fleet.newcomers.book.placements


def test_nothing_is_placed_before_a_model_is_served(tmp_path: Path, served: Fleet) -> None:
    fleet = served
    empty = ModelPromotion(
        ModelRegistry(tmp_path / "empty"), fleet.promotion.publisher,
        cast(MqttFleet, fleet.fleet), CoordinatorMetrics(CollectorRegistry()),
        margin=0.05, keep_versions=5,
    )  # fmt: skip
    fleet.promotion = empty
    fleet.store = PlacementStore(tmp_path / "elsewhere")
    newcomers = newcomers_of(fleet, fleet.newcomers.engine)
    online(fleet, "m02", 30)

    assert not newcomers.serve()
    assert newcomers.joins() is None


def test_growing_labels_offer_the_models_once_per_campaign(served: Fleet) -> None:
    # Prepare: campaign c1; m00's labelled windows keep growing
    fleet = served
    fleet.promotion.campaign_id = "c1"
    w0, w1 = (_digest(fleet.weights[k]) for k in ("cluster-0", "cluster-1"))
    fleet.fleet.scores = {("m00", w0): (0.3, 0.9), ("m00", w1): (2.0, 0.4)}

    # Execute
    offers = []
    for windows, campaign in ((50, "c1"), (60, "c1"), (70, "c1"), (70, "c2"), (80, "c2")):
        fleet.promotion.campaign_id = campaign
        online(fleet, "m00", windows)
        fleet.newcomers.serve()
        offers.append(len(fleet.fleet.keys) // 2)

    # Assert: offered at 50 (c1) and again once c2 runs; it stays on its own cluster
    assert offers == [1, 1, 1, 2, 2]
    assert fleet.newcomers.moves() == {}
