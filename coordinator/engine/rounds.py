"""The round engine: drives federated rounds through a :class:`~coordinator.engine.fleet.Fleet`.

The engine does not know how it talks to clients (in process or over MQTT) nor how clients
are clustered (the :class:`~coordinator.strategies.base.Strategy` decides). Per round it

0. for strategies that probe clients, runs probe steps until the strategy has what it
   needs (``configure_probe`` / ``aggregate_probe``; a strategy that streams its gradient
   probes, :class:`~coordinator.strategies.probe_streaming.StreamingProbeStrategy`, has each
   answer taken into its stream as it arrives or in client order, ``aggregate_probe_stream``),
1. asks the strategy which clients to sample among the available ones and which model
   each trains (``configure_round``),
2. fills in the weights, the training configuration and a per-client seed derived from the
   run seed, and hands the tasks to the fleet,
3. passes results and failures to the strategy (``aggregate_round``) — or, for a strategy
   that streams (:class:`~coordinator.strategies.streaming.StreamingStrategy`), has each
   update folded into the strategy's stream as it arrives (a
   :class:`~coordinator.engine.fleet.StreamingFleet`) or folds the fleet's results itself,
   and hands over the stream (``aggregate_stream``).

Its whole state — round number, sampling generator, strategy state — is captured by
:meth:`RoundEngine.state` and restored by :meth:`RoundEngine.restore`; a run resumed from
any round ends identical to an uninterrupted one with the same seed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, cast

import numpy as np

from coordinator.engine.fleet import Fleet, ProbingFleet, StreamingFleet, StreamingProbeFleet
from coordinator.engine.state import EngineState
from coordinator.strategies.base import Strategy, StrategyState
from coordinator.strategies.probe_streaming import GradientStream, StreamingProbeStrategy
from coordinator.strategies.streaming import StreamingStrategy, UpdateStream, fold_all
from faultfleet.errors import UsageError
from faultfleet.scoring import mean_client_accuracy
from faultfleet.tasks import (
    EvaluateResult,
    EvaluateTask,
    Failure,
    FitInstruction,
    FitOutcome,
    FitTask,
    GradientInstruction,
    GradientOutcome,
    GradientTask,
    LossesInstruction,
    LossesOutcome,
    LossesTask,
    ProbeInstructions,
    ProbeResults,
    Proximal,
    Split,
    TrainConfig,
    client_seed,
)
from faultfleet.types import ModelFactory

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
    """Sample-weighted mean training loss of the updates that came back (nan if none); a
    client that trained several models counts once per model."""
    probe_steps: int = 0
    """Probe steps run before training (strategies that probe clients)."""


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
        if strategy.probes and not isinstance(fleet, ProbingFleet):
            raise TypeError(
                f"strategy {strategy.name!r} probes clients (losses and gradient tasks), but "
                f"{type(fleet).__name__} does not carry probes"
            )
        self.model_factory = model_factory
        strategy.initialize(fleet.client_ids(), model_factory)

    def add_clients(
        self, client_ids: Sequence[str], assigned: Mapping[str, str] | None = None
    ) -> None:
        """Register clients joining between rounds; the fleet must reach them from the next
        round on (the service updates the MQTT fleet's members right after).

        ``assigned`` maps a joining client to the model key its own evaluation chose
        (:mod:`coordinator.engine.placement`); the others join by the strategy's rule.

        Raises
        ------
        ValueError
            An id is repeated or already registered, or an assigned key serves no client.
        """
        self.strategy.add_clients(client_ids, self.model_factory, assigned)

    def remove_clients(self, client_ids: Sequence[str]) -> None:
        """Unregister clients leaving for good, between rounds.

        Raises
        ------
        ValueError
            An id is unknown, or no client would be left.
        """
        self.strategy.remove_clients(client_ids)

    def run_round(self) -> RoundReport:
        """Run the next round; returns its report."""
        server_round = self.server_round + 1
        probe_steps, probe_down, probe_up, probe_failures = self._probe(server_round)
        instructions = self.strategy.configure_round(server_round, self.fleet.available(), self.rng)
        tasks = self._fit_tasks(server_round, instructions)
        stream = self._open_stream(server_round)
        outcome = self._fit(server_round, tasks, stream) if tasks else None
        results = outcome.results if outcome else ()
        failures = outcome.failures if outcome else ()
        if stream is None:
            self.strategy.aggregate_round(server_round, results, failures)
            answers = [(r.client_id, r.num_samples, r.train_loss) for r in results]
        else:
            assert isinstance(self.strategy, StreamingStrategy)
            self.strategy.aggregate_stream(server_round, stream, failures)
            answers = [(u.client_id, u.num_samples, u.train_loss) for u in stream.updates()]
        self.server_round = server_round
        counts = np.array([n for _, n, _ in answers], dtype=np.float64)
        losses = np.array([loss for _, _, loss in answers], dtype=np.float64)
        train_loss = float(losses @ counts / counts.sum()) if counts.sum() > 0 else float("nan")
        for failure in (*probe_failures, *failures):
            logger.debug("round %d: %s failed: %s", server_round, failure.client_id, failure.reason)
        return RoundReport(
            server_round=server_round,
            sampled=tuple(dict.fromkeys(i.client_id for i in instructions)),
            answered=tuple(dict.fromkeys(client for client, _, _ in answers)),
            failures=(*probe_failures, *failures),
            bytes_down=probe_down + (outcome.bytes_down if outcome else 0),
            bytes_up=probe_up + (outcome.bytes_up if outcome else 0),
            train_loss=train_loss,
            probe_steps=probe_steps,
        )

    def _open_stream(self, server_round: int) -> UpdateStream | None:
        if isinstance(self.strategy, StreamingStrategy):
            return self.strategy.open_stream(server_round)
        return None

    def _fit(
        self, server_round: int, tasks: Sequence[FitTask], stream: UpdateStream | None
    ) -> FitOutcome:
        """The fleet's answers; with a stream, every update folded into it (by the fleet as
        it arrives, or here) and none returned."""
        if stream is None:
            return self.fleet.fit(server_round, tasks)
        if isinstance(self.fleet, StreamingFleet):
            return self.fleet.fit_streaming(server_round, tasks, stream)
        outcome = self.fleet.fit(server_round, tasks)
        fold_all(
            stream, sorted(outcome.results, key=lambda r: (self._order(r.client_id), r.model_key))
        )
        return FitOutcome((), outcome.failures, outcome.bytes_down, outcome.bytes_up)

    def _fit_tasks(
        self, server_round: int, instructions: Sequence[FitInstruction]
    ) -> list[FitTask]:
        """Fill the weights, configuration, seed and proximal targets into instructions.

        A client with several tasks in one round gets one seed per task (its model keys
        join the seed's derivation), so its trainings do not share a batch order.
        """
        models = self.strategy.models
        per_client: dict[str, int] = {}
        for i in instructions:
            per_client[i.client_id] = per_client.get(i.client_id, 0) + 1
        tasks = []
        for i in instructions:
            name = i.client_id
            if per_client[name] > 1:
                name = f"{i.client_id}/{'+'.join(i.model_keys)}"
            tasks.append(
                FitTask(
                    client_id=i.client_id,
                    models={key: models[key] for key in i.model_keys},
                    config=self.train_config,
                    seed=client_seed(self.seed, server_round, name),
                    proximal=tuple(
                        Proximal(models[term.model_key], term.strength, term.part)
                        for term in i.proximal
                    ),
                )
            )
        return tasks

    def _probe(self, server_round: int) -> tuple[int, int, int, tuple[Failure, ...]]:
        """Run the strategy's probe steps; returns (steps, bytes down, bytes up, failures)."""
        steps = bytes_down = bytes_up = 0
        failures: list[Failure] = []
        while True:
            request = self.strategy.configure_probe(
                server_round, steps, self.fleet.available(), self.rng
            )
            if not request:
                return steps, bytes_down, bytes_up, tuple(failures)
            stream = self._open_probe_stream(server_round, steps, request)
            outcome = self._run_probe(server_round, steps, request, stream)
            if stream is not None:
                assert isinstance(self.strategy, StreamingProbeStrategy)
                self.strategy.aggregate_probe_stream(server_round, steps, stream, outcome.failures)
            else:
                # one kind per step, so the sorted list is all losses or all gradient results
                ordered = cast(
                    ProbeResults, sorted(outcome.results, key=lambda r: self._order(r.client_id))
                )
                self.strategy.aggregate_probe(server_round, steps, ordered, outcome.failures)
            failures.extend(outcome.failures)
            bytes_down += outcome.bytes_down
            bytes_up += outcome.bytes_up
            steps += 1

    def _open_probe_stream(
        self, server_round: int, step: int, request: ProbeInstructions
    ) -> GradientStream | None:
        if isinstance(self.strategy, StreamingProbeStrategy) and all(
            isinstance(i, GradientInstruction) for i in request
        ):
            return self.strategy.open_probe_stream(server_round, step)
        return None

    def _run_probe(
        self,
        server_round: int,
        step: int,
        request: ProbeInstructions,
        stream: GradientStream | None,
    ) -> LossesOutcome | GradientOutcome:
        """One probe step on the fleet, the weights and (for gradients) the seeds filled in;
        with a stream, every gradient answer taken into it (by the fleet as it arrives, or
        here in client order) and none returned."""
        fleet = self.fleet
        assert isinstance(fleet, ProbingFleet)  # checked in __init__
        models = self.strategy.models
        if all(isinstance(i, LossesInstruction) for i in request):
            return fleet.losses(
                server_round,
                [
                    LossesTask(
                        i.client_id, {k: models[k] for k in i.model_keys}, i.split, i.per_sample
                    )
                    for i in request
                    if isinstance(i, LossesInstruction)
                ],
            )
        if all(isinstance(i, GradientInstruction) for i in request):
            tasks = [
                GradientTask(
                    i.client_id,
                    {k: models[k] for k in i.model_keys},
                    i.batch_size,
                    client_seed(self.seed, server_round, f"{i.client_id}#probe{step}"),
                )
                for i in request
                if isinstance(i, GradientInstruction)
            ]
            if stream is None:
                return fleet.gradients(server_round, tasks)
            if isinstance(fleet, StreamingProbeFleet):
                return fleet.gradients_streaming(server_round, tasks, stream)
            outcome = fleet.gradients(server_round, tasks)
            for result in sorted(outcome.results, key=lambda r: self._order(r.client_id)):
                stream.add(result)
            return GradientOutcome((), outcome.failures, outcome.bytes_down, outcome.bytes_up)
        raise TypeError(
            f"strategy {self.strategy.name!r} mixed losses and gradient instructions in one "
            "probe step; send one kind per step"
        )

    def _order(self, client_id: str) -> int:
        return self.strategy.client_index_.get(client_id, len(self.strategy.client_index_))

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
            raise UsageError(
                f"saved state has format {meta.get('format')!r}; this version reads format "
                f"{STATE_FORMAT}"
            )
        if meta["seed"] != self.seed:
            raise UsageError(
                f"saved state was made with seed {meta['seed']}, this run uses seed {self.seed}"
            )
        saved_config = TrainConfig(**meta["train_config"])
        if saved_config != self.train_config:
            raise UsageError(
                f"saved state was made with {saved_config}, this run uses {self.train_config}"
            )
        self.strategy.load_state_dict(
            StrategyState(arrays=dict(state.arrays), meta=meta["strategy"])
        )
        self.rng.bit_generator.state = meta["rng"]
        self.server_round = int(meta["server_round"])
