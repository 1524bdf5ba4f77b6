"""The round engine: drives federated rounds through a :class:`~coordinator.fleet.Fleet`.

The engine does not know how it talks to clients (in process or over MQTT) nor how clients
are clustered (the :class:`~coordinator.strategies.base.Strategy` decides). Per round it

1. asks the strategy which clients to sample among the available ones and which model
   each trains (``configure_round``),
2. fills in the weights, the training configuration and a per-client seed derived from the
   run seed, and hands the tasks to the fleet,
3. passes results and failures to the strategy (``aggregate_round``).

Its whole state — round number, sampling generator, strategy state — is captured by
:meth:`RoundEngine.state` and restored by :meth:`RoundEngine.restore`; a run resumed from
any round ends identical to an uninterrupted one with the same seed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from coordinator.fleet import Fleet
from coordinator.state import EngineState
from coordinator.strategies.base import ModelFactory, Strategy, StrategyState
from faultfleet.scoring import mean_client_accuracy
from faultfleet.tasks import (
    EvaluateResult,
    EvaluateTask,
    Failure,
    FitTask,
    Split,
    TrainConfig,
    client_seed,
)

logger = logging.getLogger(__name__)

STATE_FORMAT = 1


@dataclass(frozen=True)
class RoundReport:
    """What happened in one training round."""

    server_round: int
    sampled: tuple[str, ...]
    answered: tuple[str, ...]
    failures: tuple[Failure, ...]
    bytes_down: int
    bytes_up: int
    train_loss: float
    """Sample-weighted mean training loss of the clients that answered (nan if none)."""


@dataclass(frozen=True)
class EvaluationReport:
    """Per-client evaluation of the models that currently serve each client."""

    server_round: int
    split: Split
    results: tuple[EvaluateResult, ...]
    failures: tuple[Failure, ...]

    @property
    def accuracy(self) -> float:
        """Mean over clients of each client's accuracy (FLACC §V-B); nan if none answered."""
        if not self.results:
            return float("nan")
        return mean_client_accuracy([r.accuracy for r in self.results])

    def accuracy_by_client(self) -> dict[str, float]:
        """Accuracy of every client that answered."""
        return {r.client_id: r.accuracy for r in self.results}


class RoundEngine:
    """Federated rounds for one strategy over one fleet.

    Parameters
    ----------
    strategy : Strategy
        Initialised here (unless the engine is being restored).
    fleet : Fleet
    model_factory : callable
        ``model_factory(i)`` gives the i-th independent initialisation of the model weights.
    train_config : TrainConfig
        Local training settings sent with every fit task.
    seed : int
        Seeds client sampling and every client's batch order.
    """

    def __init__(
        self,
        strategy: Strategy,
        fleet: Fleet,
        *,
        model_factory: ModelFactory,
        train_config: TrainConfig,
        seed: int,
    ) -> None:
        self.strategy = strategy
        self.fleet = fleet
        self.train_config = train_config
        self.seed = seed
        self.server_round = 0
        self.rng = np.random.default_rng(seed)
        strategy.initialize(fleet.client_ids(), model_factory)

    def run_round(self) -> RoundReport:
        """Run the next round; returns its report."""
        server_round = self.server_round + 1
        instructions = self.strategy.configure_round(server_round, self.fleet.available(), self.rng)
        models = self.strategy.models
        tasks = [
            FitTask(
                client_id=i.client_id,
                models={key: models[key] for key in i.model_keys},
                config=self.train_config,
                seed=client_seed(self.seed, server_round, i.client_id),
            )
            for i in instructions
        ]
        outcome = self.fleet.fit(server_round, tasks) if tasks else None
        results = outcome.results if outcome else ()
        failures = outcome.failures if outcome else ()
        self.strategy.aggregate_round(server_round, results, failures)
        self.server_round = server_round
        counts = np.array([r.num_samples for r in results], dtype=np.float64)
        losses = np.array([r.train_loss for r in results], dtype=np.float64)
        train_loss = float(losses @ counts / counts.sum()) if counts.sum() > 0 else float("nan")
        for failure in failures:
            logger.debug("round %d: %s failed: %s", server_round, failure.client_id, failure.reason)
        return RoundReport(
            server_round=server_round,
            sampled=tuple(i.client_id for i in instructions),
            answered=tuple(r.client_id for r in results),
            failures=tuple(failures),
            bytes_down=outcome.bytes_down if outcome else 0,
            bytes_up=outcome.bytes_up if outcome else 0,
            train_loss=train_loss,
        )

    def evaluate(
        self, split: Split = Split.TEST, client_ids: Sequence[str] | None = None
    ) -> EvaluationReport:
        """Evaluate every (or the given) client with the model that serves it."""
        ids = list(client_ids) if client_ids is not None else self.fleet.client_ids()
        instructions = self.strategy.configure_evaluate(self.server_round, ids)
        models = self.strategy.models
        tasks = [
            EvaluateTask(i.client_id, {key: models[key] for key in i.model_keys}, split)
            for i in instructions
        ]
        outcome = self.fleet.evaluate(self.server_round, tasks)
        self.strategy.aggregate_evaluate(self.server_round, outcome.results)
        return EvaluationReport(self.server_round, split, outcome.results, outcome.failures)

    # -- state -----------------------------------------------------------------------------

    def state(self) -> EngineState:
        """Everything needed to continue this run exactly where it is."""
        strategy_state = self.strategy.state_dict()
        meta: dict[str, Any] = {
            "format": STATE_FORMAT,
            "server_round": self.server_round,
            "seed": self.seed,
            "rng": self.rng.bit_generator.state,
            "train_config": asdict(self.train_config),
            "strategy": strategy_state.meta,
        }
        return EngineState(meta=meta, arrays=dict(strategy_state.arrays))

    def restore(self, state: EngineState) -> None:
        """Continue from ``state`` (made by :meth:`state` for the same strategy settings)."""
        meta = state.meta
        if meta.get("format") != STATE_FORMAT:
            raise ValueError(
                f"saved state has format {meta.get('format')!r}; this version reads format "
                f"{STATE_FORMAT}"
            )
        if meta["seed"] != self.seed:
            raise ValueError(
                f"saved state was made with seed {meta['seed']}, this run uses seed {self.seed}"
            )
        saved_config = TrainConfig(**meta["train_config"])
        if saved_config != self.train_config:
            raise ValueError(
                f"saved state was made with {saved_config}, this run uses {self.train_config}"
            )
        self.strategy.load_state_dict(
            StrategyState(arrays=dict(state.arrays), meta=meta["strategy"])
        )
        self.rng.bit_generator.state = meta["rng"]
        self.server_round = int(meta["server_round"])
