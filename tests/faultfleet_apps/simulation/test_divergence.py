"""A client whose training diverges fails its task — on a gateway and in the simulator alike.

One machine's recording has a gap that reads as NaN, so its local training produces a NaN
loss. The agent answers ``task_failed`` (frames in, frames out), the in-process fleet
answers a :class:`~faultfleet.tasks.Failure` with the same reason on both of its paths, and
a round of FedAvg over the fleet aggregates the healthy machines only: NaN never reaches
the model.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from coordinator.engine.rounds import RoundEngine
from coordinator.strategies.fedavg import FedAvg
from coordinator.strategies.keys import GLOBAL
from faultfleet.models.zoo import build_model, model_factory
from faultfleet.tasks import Failure, FitResult, FitTask
from faultfleet_apps.simulation.fleet import InProcessFleet
from signal_pipeline.federation import ClientData, Dataset, Federation
from tests.edge_agent.task_frames import (
    CPU,
    MODEL,
    N_CLASSES,
    TRAIN,
    client,
    failure_reason,
    fit_task,
    frame,
    initial_weights,
    runner_for,
)

DIVERGED = "local training diverged (train loss nan); lower train.learning_rate"


def with_gap(data: ClientData, client_id: str) -> ClientData:
    """``data`` renamed, with NaN in one training window (a gap in the recording)."""
    x = data.train.x.copy()
    x[2, 0, 100:110] = np.nan
    return ClientData(client_id, 1, Dataset(x, data.train.y), data.val, data.test)


def federation() -> Federation:
    """Two healthy machines and one ("m09") whose recording has a gap."""
    healthy = [ClientData(f"m0{i}", 0, *list(client().splits().values())) for i in (7, 8)]
    clients = (*healthy, with_gap(client(), "m09"))
    return Federation("gap", tuple(clients), N_CLASSES, tuple("abcd"))


def test_the_agent_answers_task_failed() -> None:
    payload = frame(fit_task(), {"cluster-0": initial_weights(0)})

    reason = failure_reason(runner_for(with_gap(client(), "m07")), payload)

    assert reason == DIVERGED


@pytest.mark.parametrize("batched", [True, False])
def test_the_simulator_answers_a_failure_with_the_agents_reason(batched: bool) -> None:
    template = build_model(MODEL.name, MODEL.sample_shape, N_CLASSES)
    fleet = InProcessFleet(federation(), template, device=CPU, batched=batched)
    tasks = [FitTask(c, {"m": initial_weights(0)}, TRAIN.config(), 11) for c in fleet.client_ids()]

    outcome = fleet.fit(1, tasks)

    assert [r.client_id for r in outcome.results] == ["m07", "m08"]
    assert outcome.failures == (Failure("m09", DIVERGED),)
    assert all(np.isfinite(r.weights).all() for r in outcome.results)
    assert outcome.bytes_up == sum(r.weights.nbytes for r in outcome.results)


class RecordingFedAvg(FedAvg):
    """FedAvg that keeps what every round handed it."""

    def __init__(self) -> None:
        super().__init__(fraction=1.0)
        self.seen: list[FitResult] = []
        self.failed: list[Failure] = []

    def aggregate_round(
        self, server_round: int, results: Sequence[FitResult], failures: Sequence[Failure]
    ) -> None:
        self.seen.extend(results)
        self.failed.extend(failures)
        super().aggregate_round(server_round, results, failures)


@pytest.mark.parametrize("batched", [True, False])
def test_aggregation_never_sees_nan(batched: bool) -> None:
    template = build_model(MODEL.name, MODEL.sample_shape, N_CLASSES)
    fleet = InProcessFleet(federation(), template, device=CPU, batched=batched)
    strategy = RecordingFedAvg()
    factory = model_factory(MODEL.name, MODEL.sample_shape, N_CLASSES, 0)
    engine = RoundEngine(
        strategy, fleet, model_factory=factory, train_config=TRAIN.config(), seed=0
    )
    start = strategy.models[GLOBAL].copy()

    reports = [engine.run_round() for _ in range(2)]

    assert [r.answered for r in reports] == [("m07", "m08")] * 2
    assert [[f.client_id for f in r.failures] for r in reports] == [["m09"]] * 2
    assert [f.reason for f in strategy.failed] == [DIVERGED] * 2
    assert len(strategy.seen) == 4
    assert all(np.isfinite(r.weights).all() and np.isfinite(r.delta).all() for r in strategy.seen)
    assert all(np.isfinite(r.train_loss) for r in reports)
    assert np.isfinite(strategy.models[GLOBAL]).all()
    assert not np.array_equal(strategy.models[GLOBAL], start)
