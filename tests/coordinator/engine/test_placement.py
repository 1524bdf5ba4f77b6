"""Placing a joining machine: lowest validation loss, else the cluster of most machines."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import pytest

from coordinator.engine.fleet import Fleet
from coordinator.engine.placement import (
    evaluation_tasks,
    most_members,
    place,
    placements,
    rank,
)
from faultfleet.tasks import EvaluateOutcome, EvaluateResult, EvaluateTask, Failure, Split

MODELS = {"A": np.zeros(4, np.float32), "B": np.ones(4, np.float32)}


def result(client: str, key: str, loss: float, accuracy: float) -> EvaluateResult:
    return EvaluateResult(client, key, accuracy, loss, 20)


def test_the_lowest_loss_wins_then_accuracy_then_the_key() -> None:
    ranked = rank(
        [
            result("m", "C", 0.5, 0.9),
            result("m", "B", 0.2, 0.7),
            result("m", "A", 0.5, 0.9),
            result("m", "D", 0.5, 1.0),
        ]
    )

    assert [s.key for s in ranked] == ["B", "D", "A", "C"]


def test_most_members_breaks_ties_by_key_and_needs_a_candidate() -> None:
    assert most_members({"B": 2, "A": 2, "C": 1}) == "A"
    assert most_members({"B": 3, "A": 2}) == "B"
    with pytest.raises(ValueError, match="no candidate model"):
        most_members({})


def test_one_task_per_machine_and_candidate_on_the_validation_split() -> None:
    tasks = evaluation_tasks(["m1", "m2"], MODELS)

    assert [(t.client_id, tuple(t.models)) for t in tasks] == [
        ("m1", ("A",)),
        ("m1", ("B",)),
        ("m2", ("A",)),
        ("m2", ("B",)),
    ]
    assert {t.split for t in tasks} == {Split.VAL}


def test_a_machine_without_a_score_is_placed_by_rule_and_says_why() -> None:
    placed = placements(
        ["m1", "m2"],
        [result("m1", "A", 0.9, 0.5), result("m1", "B", 0.1, 0.9)],
        [Failure("m2", "this agent holds no val windows")],
        {"A": 3, "B": 1},
    )

    assert (placed["m1"].key, placed["m1"].verified) == ("B", True)
    assert [s.key for s in placed["m1"].scores] == ["B", "A"]
    assert (placed["m2"].key, placed["m2"].basis) == ("A", "most_members")
    assert not placed["m2"].verified
    assert placed["m2"].note == "this agent holds no val windows"


class Scoring:
    """A fleet whose machines score a model by how close it is to their own vector."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def evaluate(self, server_round: int, tasks: Sequence[EvaluateTask]) -> EvaluateOutcome:
        results = []
        for task in tasks:
            self.asked.append(task.client_id)
            ((key, weights),) = task.models.items()
            target = 1.0 if task.client_id == "ones" else 0.0
            loss = float(np.abs(weights - target).sum())
            results.append(EvaluateResult(task.client_id, key, 1.0 - loss / 4, loss, 10))
        return EvaluateOutcome(tuple(results))


def test_place_asks_only_labelled_machines() -> None:
    fleet = Scoring()

    placed = place(
        cast(Fleet, fleet),
        3,
        ["ones", "zeros", "blank"],
        MODELS,
        {"A": 0, "B": 1},
        unlabelled=["blank"],
    )

    assert {c: p.key for c, p in placed.items()} == {"ones": "B", "zeros": "A", "blank": "B"}
    assert placed["blank"].note == "it holds no labelled windows"
    assert sorted(set(fleet.asked)) == ["ones", "zeros"]
