"""The round engine's probe steps, several fit tasks per client, and proximal terms."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, cast

import numpy as np
import pytest

from coordinator.engine.rounds import RoundEngine
from coordinator.strategies.fedavg import FedAvg
from coordinator.strategies.jgl import JointGradientLoss
from coordinator.strategies.keys import GLOBAL
from coordinator.strategies.probe_streaming import GradientStream
from faultfleet.tasks import (
    EvaluateOutcome,
    EvaluateTask,
    Failure,
    FitInstruction,
    FitOutcome,
    FitResult,
    FitTask,
    GradientInstruction,
    GradientOutcome,
    GradientResult,
    GradientTask,
    LossesInstruction,
    LossesResult,
    ProbeInstructions,
    ProbeResults,
    ProximalTerm,
    TrainConfig,
    client_seed,
)
from tests.coordinator.fakes import SyntheticFleet, seeded_factory

GROUPS = [0, 0, 1, 1]


class ProbingAverage(FedAvg):
    """FedAvg that asks for losses, then gradients, before every round's training."""

    name: ClassVar[str] = "probing-average"
    probes: ClassVar[bool] = True

    def __init__(self, plan: Sequence[str] = ("losses", "gradients")) -> None:
        super().__init__(fraction=1.0)
        self.plan = list(plan)
        self.seen: list[tuple[int, int, list[Any], list[Failure]]] = []

    def configure_probe(
        self, server_round: int, step: int, available: Sequence[str], rng: np.random.Generator
    ) -> ProbeInstructions | None:
        if step >= len(self.plan):
            return None
        kind = self.plan[step]
        if kind == "losses":
            return [LossesInstruction(c, (GLOBAL,)) for c in available]
        if kind == "gradients":
            return [GradientInstruction(c, (GLOBAL,), batch_size=4) for c in available]
        mixed: ProbeInstructions = cast(
            "list[LossesInstruction]",
            [
                LossesInstruction(available[0], (GLOBAL,)),
                GradientInstruction(available[1], (GLOBAL,), batch_size=4),
            ],
        )
        return mixed  # deliberately wrong: the engine must refuse it

    def aggregate_probe(
        self, server_round: int, step: int, results: ProbeResults, failures: Sequence[Failure]
    ) -> None:
        self.seen.append((server_round, step, list(results), list(failures)))


class SeedRecordingFleet(SyntheticFleet):
    """Remembers the gradient tasks it was given."""

    def __init__(self, groups: list[int], **kwargs: Any) -> None:
        super().__init__(groups, **kwargs)
        self.gradient_seeds: list[tuple[str, int]] = []

    def gradients(self, server_round: int, tasks: Any) -> Any:
        self.gradient_seeds.extend((t.client_id, t.seed) for t in tasks)
        return super().gradients(server_round, tasks)


def engine_for(strategy: FedAvg, fleet: Any, seed: int = 3) -> RoundEngine:
    return RoundEngine(
        strategy, fleet, model_factory=seeded_factory(), train_config=TrainConfig(), seed=seed
    )


def test_probe_steps_run_in_order_before_training_and_count_failures() -> None:
    # Prepare
    fleet = SeedRecordingFleet(GROUPS, offline=["c03"])
    strategy = ProbingAverage()
    engine = engine_for(strategy, fleet)

    # Execute
    report = engine.run_round()

    # Assert
    assert report.probe_steps == 2
    assert [(r, s) for r, s, _, _ in strategy.seen] == [(1, 0), (1, 1)]
    losses, gradients = strategy.seen[0][2], strategy.seen[1][2]
    assert all(isinstance(r, LossesResult) for r in losses)
    assert all(isinstance(r, GradientResult) for r in gradients)
    assert [r.client_id for r in losses] == ["c00", "c01", "c02"]
    # an offline client is left out of sampling, so probes only went to available ones
    assert strategy.seen[0][3] == []
    assert fleet.gradient_seeds == [
        (c, client_seed(3, 1, f"{c}#probe1")) for c in ("c00", "c01", "c02")
    ]
    assert report.answered == ("c00", "c01", "c02")


def test_a_client_that_drops_out_during_a_probe_is_a_failure_of_the_round() -> None:
    class Dropping(SyntheticFleet):
        def losses(self, server_round: int, tasks: Any) -> Any:
            self.offline.add("c01")
            return super().losses(server_round, tasks)

    strategy = ProbingAverage(plan=("losses",))
    report = engine_for(strategy, Dropping(GROUPS)).run_round()
    assert strategy.seen[0][3] == [Failure("c01", "offline")]
    assert Failure("c01", "offline") in report.failures


def test_mixing_probe_kinds_in_one_step_is_refused() -> None:
    engine = engine_for(ProbingAverage(plan=("mixed",)), SyntheticFleet(GROUPS))
    with pytest.raises(TypeError, match="one kind per step"):
        engine.run_round()


def test_a_probing_strategy_needs_a_fleet_that_carries_probes() -> None:
    class PlainFleet:
        def client_ids(self) -> list[str]:
            return ["a"]

        def available(self) -> list[str]:
            return ["a"]

        def fit(self, server_round: int, tasks: Sequence[FitTask]) -> FitOutcome:
            return FitOutcome(())

        def evaluate(self, server_round: int, tasks: Sequence[EvaluateTask]) -> EvaluateOutcome:
            return EvaluateOutcome(())

    with pytest.raises(TypeError, match="does not carry probes"):
        engine_for(ProbingAverage(), PlainFleet())


class TwoModels(FedAvg):
    """Every client trains the global model and, on its behalf, a second one with a pull."""

    name: ClassVar[str] = "two-models"

    def _initialize(self, model_factory: Any) -> None:
        super()._initialize(model_factory)
        self.models_["other"] = model_factory(1)
        self.received: list[FitResult] = []

    def configure_round(
        self, server_round: int, available: Sequence[str], rng: np.random.Generator
    ) -> list[FitInstruction]:
        return [
            instruction
            for c in self.sample_clients(available, rng)
            for instruction in (
                FitInstruction(c, (GLOBAL,)),
                FitInstruction(c, ("other",), proximal=(ProximalTerm(GLOBAL, 0.5, "all"),)),
            )
        ]

    def _aggregate(
        self, server_round: int, results: Sequence[FitResult], failures: Sequence[Failure]
    ) -> None:
        self.received = list(results)


class TaskRecordingFleet(SyntheticFleet):
    def __init__(self, groups: list[int]) -> None:
        super().__init__(groups)
        self.tasks: list[FitTask] = []

    def fit(self, server_round: int, tasks: Sequence[FitTask]) -> FitOutcome:
        self.tasks.extend(tasks)
        return super().fit(server_round, tasks)


def test_a_client_can_train_several_models_in_one_round_with_their_own_seeds() -> None:
    # Prepare
    fleet = TaskRecordingFleet(GROUPS)
    strategy = TwoModels(fraction=0.5)
    engine = engine_for(strategy, fleet)

    # Execute
    report = engine.run_round()

    # Assert
    assert len(fleet.tasks) == 4
    assert len(set(report.sampled)) == 2
    seeds = {(t.client_id, next(iter(t.models))): t.seed for t in fleet.tasks}
    assert len(set(seeds.values())) == 4
    assert [(r.client_id, r.model_key) for r in strategy.received] == sorted(
        (c, k) for c in report.sampled for k in (GLOBAL, "other")
    )
    pulled = [t for t in fleet.tasks if "other" in t.models]
    assert all(len(t.proximal) == 1 for t in pulled)
    np.testing.assert_array_equal(pulled[0].proximal[0].target, strategy.models[GLOBAL])
    assert pulled[0].proximal[0].strength == 0.5


def test_two_answers_for_the_same_client_and_model_are_refused() -> None:
    strategy = TwoModels(fraction=1.0)
    engine_for(strategy, SyntheticFleet(GROUPS))
    w = strategy.models[GLOBAL]
    result = FitResult("c00", GLOBAL, w, w * 0, 10, 0.0)
    with pytest.raises(ValueError, match="more than once for model 'global'"):
        strategy.aggregate_round(1, [result, result], [])


class StreamingProbes(SyntheticFleet):
    """Hands each gradient answer to the stream itself, in reverse task order (as answers
    arriving out of order over MQTT would be); counts its calls."""

    def __init__(self, groups: list[int], **kwargs: Any) -> None:
        super().__init__(groups, **kwargs)
        self.streamed = 0

    def gradients_streaming(
        self, server_round: int, tasks: Sequence[GradientTask], stream: GradientStream
    ) -> GradientOutcome:
        self.streamed += 1
        outcome = self.gradients(server_round, tasks)
        for result in reversed(outcome.results):
            stream.add(result)
        return GradientOutcome((), outcome.failures, outcome.bytes_down, outcome.bytes_up)


JGL_GROUPS = [0, 0, 0, 1, 1, 1, 2, 2]


def run_jgl(fleet: SyntheticFleet, pairwise: str) -> tuple[JointGradientLoss, list[Any]]:
    strategy = JointGradientLoss(n_clusters=3, pairwise=pairwise, sketch_seed=1)
    engine = RoundEngine(
        strategy, fleet, model_factory=seeded_factory(), train_config=TrainConfig(), seed=5
    )
    reports = [engine.run_round() for _ in range(4)]
    return strategy, reports


def test_a_streamed_gradient_probe_runs_the_rounds_of_the_list() -> None:
    # Prepare / Execute: JGL on sketches over a fleet that streams its probe answers, over
    # one that returns them (the engine hands them to the stream), and on exact comparisons
    streaming = StreamingProbes(JGL_GROUPS, offline=["c07"])
    streamed, streamed_reports = run_jgl(streaming, "sketch")
    handed, handed_reports = run_jgl(SyntheticFleet(JGL_GROUPS, offline=["c07"]), "sketch")
    exact, exact_reports = run_jgl(SyntheticFleet(JGL_GROUPS, offline=["c07"]), "exact")

    # Assert
    assert streaming.streamed == 4
    assert streamed.cluster_labels() == handed.cluster_labels() == exact.cluster_labels()
    assert streamed.choices_ == handed.choices_ == exact.choices_
    assert sorted(streamed.choices_) == [f"c{i:02d}" for i in range(7)]
    np.testing.assert_array_equal(
        streamed.cluster_evidence().similarity_matrix(),
        handed.cluster_evidence().similarity_matrix(),
    )
    for key, model in exact.models.items():
        np.testing.assert_allclose(streamed.models[key], model, atol=1e-5)
    assert [r.answered for r in streamed_reports] == [r.answered for r in exact_reports]
    assert [r.answered for r in handed_reports] == [r.answered for r in exact_reports]
    assert streamed.round_metrics()["similarity_used"] == 1.0
