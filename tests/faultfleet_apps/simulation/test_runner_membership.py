"""Simulated runs in which machines join and leave: who trains, who is scored, resumption."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from coordinator.engine.rounds import RoundEngine
from faultfleet.tasks import EvaluateOutcome, EvaluateTask, FitOutcome, FitTask, Split
from faultfleet_apps.simulation import runner
from faultfleet_apps.simulation.config import SimConfig
from faultfleet_apps.simulation.fleet import InProcessFleet
from faultfleet_apps.simulation.membership import apply_changes
from faultfleet_apps.simulation.runner import (
    RoundRecord,
    build_federation,
    evaluate_members,
    make_engine,
    membership_schedule,
    run_simulation,
)
from faultfleet_apps.simulation.wire_codec import WeightCodec
from signal_pipeline.federation import Federation
from tests.faultfleet_apps.simulation.test_runner import TINY

ALL = ["m00", "m01", "m02", "m03", "m04", "m05"]
BEFORE_JOIN = [c for c in ALL if c != "m05"]
AFTER_LEAVE = [c for c in ALL if c != "m01"]
SCHEDULED = replace(TINY, rounds=5, joins=(("m05", 3),), leaves=(("m01", 4),))
"""m05 joins before round 3, m01 leaves before round 4."""
FEDAVG = replace(SCHEDULED, strategy="fedavg", fraction=1.0, strategy_options={})
FAACL = replace(SCHEDULED, strategy="faacl", strategy_options={})
"""FAACL's defaults: every member trains in rounds 1-3 (init_rounds = 3), half after."""

Seen = dict[tuple[str, int], list[str]]


@cache
def federation() -> Federation:
    return build_federation(TINY)


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Seen:
    """Clients of the fleet's fit and evaluate tasks, by (kind, round)."""
    record: Seen = {}
    fit, evaluate = InProcessFleet.fit, InProcessFleet.evaluate

    def note(kind: str, server_round: int, tasks: Sequence[FitTask | EvaluateTask]) -> None:
        record[kind, server_round] = sorted({t.client_id for t in tasks})

    def spy_fit(self: InProcessFleet, server_round: int, tasks: Sequence[FitTask]) -> FitOutcome:
        note("fit", server_round, tasks)
        return fit(self, server_round, tasks)

    def spy_evaluate(
        self: InProcessFleet, server_round: int, tasks: Sequence[EvaluateTask]
    ) -> EvaluateOutcome:
        # a newcomer's placement scores candidates on its validation split, after the round
        placing = all(t.split is Split.VAL for t in tasks)
        note("place" if placing else "evaluate", server_round, tasks)
        return evaluate(self, server_round, tasks)

    monkeypatch.setattr(InProcessFleet, "fit", spy_fit)
    monkeypatch.setattr(InProcessFleet, "evaluate", spy_evaluate)
    return record


@pytest.fixture
def engines(monkeypatch: pytest.MonkeyPatch) -> list[RoundEngine]:
    """Every engine ``run_simulation`` makes, to read its clusters after each round."""
    made: list[RoundEngine] = []

    def keeping(
        config: SimConfig, federation: Federation, *, codec: WeightCodec | None = None
    ) -> RoundEngine:
        made.append(make_engine(config, federation, codec=codec))
        return made[-1]

    monkeypatch.setattr(runner, "make_engine", keeping)
    return made


def test_fedavg_trains_and_scores_members_only(seen: Seen) -> None:
    result = run_simulation(FEDAVG, federation=federation())

    members = [BEFORE_JOIN] * 2 + [ALL] + [AFTER_LEAVE] * 2
    assert [r.members for r in result.history] == [5, 5, 6, 5, 5]
    assert [r.answered for r in result.history] == [5, 5, 6, 5, 5]
    assert [seen["fit", r] for r in range(1, 6)] == members
    assert [seen["evaluate", r] for r in range(1, 6)] == members
    assert sorted(result.clusters) == AFTER_LEAVE
    assert sorted(result.client_accuracy) == AFTER_LEAVE
    assert result.to_json()["final"]["num_clusters"] == 1


def test_faacl_gives_the_newcomer_a_cluster_and_drops_the_leaver(
    seen: Seen, engines: list[RoundEngine]
) -> None:
    labels: list[dict[str, int]] = []

    def note_labels(_: RoundRecord) -> None:
        labels.append(engines[-1].strategy.cluster_labels())

    result = run_simulation(FAACL, federation=federation(), on_round=note_labels)

    assert [r.members for r in result.history] == [5, 5, 6, 5, 5]
    assert [r.evaluated for r in result.history] == [5, 5, 6, 5, 5]
    assert "m05" not in seen["fit", 1] + seen["fit", 2]
    assert seen["fit", 3] == ALL  # an initial round: every member trains, the newcomer too
    assert seen["evaluate", 3] == ALL
    for server_round in (4, 5):
        assert "m01" not in seen.get(("fit", server_round), [])
        assert seen["evaluate", server_round] == AFTER_LEAVE
    assert [sorted(found) for found in labels] == [BEFORE_JOIN] * 2 + [ALL] + [AFTER_LEAVE] * 2
    # the newcomer starts a cluster of its own
    assert labels[2]["m05"] not in {labels[2][c] for c in BEFORE_JOIN}
    assert sorted(result.clusters) == AFTER_LEAVE


def test_a_newcomer_is_not_evaluated_before_its_model_is_trained() -> None:
    config = replace(FAACL, rounds=2, joins=(("m05", 2),), leaves=())
    engine = make_engine(config, federation())
    engine.run_round()

    apply_changes(engine, membership_schedule(config, federation()), 2)
    evaluation = evaluate_members(engine, {"m05"})

    assert engine.fleet.client_ids() == ALL
    assert not engine.strategy.model_ready("m05")
    assert evaluation is not None
    assert sorted(evaluation.accuracy_by_client()) == BEFORE_JOIN


def test_members_from_the_start_are_evaluated_trained_or_not() -> None:
    # Prepare: no initial rounds, so FAACL trains only the sampled half in round 1
    config = replace(TINY, strategy="faacl", strategy_options={"init_rounds": 0}, rounds=1)
    engine = make_engine(config, federation())
    engine.run_round()
    untrained = [c for c in ALL if not engine.strategy.model_ready(c)]

    # Execute
    evaluation = evaluate_members(engine, ())

    # Assert: as before schedules existed, every member is scored
    assert untrained
    assert evaluation is not None
    assert sorted(evaluation.accuracy_by_client()) == ALL


def test_a_flacc_newcomer_is_placed_by_its_evaluation_and_trains(
    seen: Seen, engines: list[RoundEngine]
) -> None:
    result = run_simulation(SCHEDULED, federation=federation())

    assert seen["place", 2] == ["m05"]  # offered the models after round 2
    assert [r.members for r in result.history] == [5, 5, 6, 5, 5]
    assert "m05" in engines[-1].strategy.client_ids_
    assert "m01" not in engines[-1].strategy.client_ids_
    assert any("m05" in seen.get(("fit", r), []) for r in (3, 4, 5))


def test_an_unknown_client_is_an_error_naming_known_ones() -> None:
    config = replace(FEDAVG, joins=(("m99", 3),))

    with pytest.raises(ValueError, match=r"joins names 'm99'.*m00, m01, m02, m03, m04, …"):
        run_simulation(config, federation=federation())


_uninterrupted: dict[str, dict[str, Any]] = {}


def uninterrupted(config: SimConfig) -> dict[str, Any]:
    """The document of ``config`` run in one go (once per strategy)."""
    if config.strategy not in _uninterrupted:
        result = run_simulation(config, federation=federation())
        _uninterrupted[config.strategy] = comparable(result.to_json())
    return _uninterrupted[config.strategy]


def comparable(document: dict[str, Any]) -> dict[str, Any]:
    """A results document without its timings."""
    document.pop("wall_seconds")
    for record in document["history"]:
        record.pop("seconds")
    return document


RESUMABLE = {
    strategy: replace(config, rounds=6, leaves=(("m01", 5),))
    for strategy, config in (("faacl", FAACL), ("fedavg", FEDAVG))
}
"""m05 joins before round 3, m01 leaves before round 5: members 5, 5, 6, 6, 5, 5."""


@pytest.mark.parametrize(
    ("strategy", "stop"),
    [("faacl", 2), ("faacl", 3), ("faacl", 5), ("fedavg", 3)],
    ids=["faacl-before-join", "faacl-between", "faacl-after-leave", "fedavg-between"],
)
def test_resumed_run_equals_uninterrupted_across_membership_changes(
    tmp_path: Path, strategy: str, stop: int
) -> None:
    config = RESUMABLE[strategy]
    run_simulation(config, federation=federation(), checkpoint_dir=tmp_path, stop_after=stop)
    resumed = run_simulation(config, federation=federation(), checkpoint_dir=tmp_path, resume=True)

    document = comparable(resumed.to_json())
    assert document == uninterrupted(config)
    assert [r["members"] for r in document["history"]] == [5, 5, 6, 6, 5, 5]
    assert sorted(document["clusters"]) == AFTER_LEAVE
