"""Run a federated strategy on a simulated federation and record what happened per round.

The composition of a simulated run: build the federation, the model template, the strategy
and an :class:`~faultfleet_apps.simulation.fleet.InProcessFleet`; drive a
:class:`~coordinator.engine.rounds.RoundEngine`; after each round evaluate every member on its
test split with the model that serves it and score the clustering against the ground truth.
Before a round, machines join or leave as the settings' schedule says
(:mod:`faultfleet_apps.simulation.membership`). Optionally checkpoint the engine (and the
history so far) so a run can be resumed; a resumed run ends identical to an uninterrupted
one.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from coordinator.engine.rounds import EvaluationReport, RoundEngine
from coordinator.engine.state import has_state, load_state, save_state
from coordinator.strategies.privacy import (
    PrivacyReport,
    check_accountant,
    privacy_report,
    sampling_rate,
)
from coordinator.strategies.quality import RunQuality, assess
from coordinator.strategies.registry import make_strategy
from coordinator.strategies.robust import Averaging
from edge_agent.batching import select_device
from faultfleet.errors import UsageError
from faultfleet.models.zoo import build_model, model_factory
from faultfleet.scoring import clustering_scores, mean_client_accuracy
from faultfleet_apps.simulation.config import IMAGE_PREFIX, LABEL_GROUPS, SimConfig
from faultfleet_apps.simulation.fleet import InProcessFleet
from faultfleet_apps.simulation.membership import (
    MembershipSchedule,
    apply_changes,
    restore_members,
)
from faultfleet_apps.simulation.training_path import (
    choose_training_path,
    compute_lanes,
    parameter_count,
)
from faultfleet_apps.simulation.wire_codec import WeightCodec
from signal_pipeline.asymmetric import quality_skew, quantity_skew
from signal_pipeline.federation import Federation
from signal_pipeline.label_groups import label_groups
from signal_pipeline.overlap import OVERLAP_GROUPS, overlapping_labels
from signal_pipeline.scenarios import MIXED_FAULT_GROUPS, VibrationSettings, mixed_fault

logger = logging.getLogger(__name__)

Clock = Callable[[], float]
ProgressCallback = Callable[[int, int], None]


@dataclass(frozen=True)
class RoundRecord:
    """One round of a run, as stored in ``results.json`` under ``history``."""

    round: int
    accuracy: float | None
    """Mean client test accuracy after the round; None on rounds that were not evaluated."""
    num_clusters: int
    ari: float
    purity: float
    bytes_up: int
    bytes_down: int
    seconds: float
    train_loss: float
    answered: int
    failures: int
    strategy_metrics: dict[str, float] = field(default_factory=dict)
    members: int = 0
    """Members of the federation during the round; 0 in histories written before the
    count was kept."""
    evaluated: int = 0
    """Members whose test accuracy makes up ``accuracy`` (0 on rounds not evaluated, and
    in histories written before the count was kept)."""
    quality: dict[str, Any] = field(default_factory=dict)
    """Cluster quality after the round (:func:`round_quality`): ``confidence``,
    ``min_margin``, ``borderline_clusters`` and the round's scored ``merges``; empty in
    histories written before it was kept."""
    norm_clipped: int = 0
    """Updates the round's averaging scaled down to its norm bound
    (:mod:`coordinator.strategies.robust`)."""
    weight_capped: int = 0
    """Updates whose sample count the round's averaging cut to its weight cap."""


@dataclass
class SimResult:
    """The outcome of a run; :meth:`to_json` is the ``results.json`` document."""

    config: SimConfig
    federation: Federation
    history: list[RoundRecord]
    clusters: dict[str, int]
    client_accuracy: dict[str, float]
    wall_seconds: float
    quality: RunQuality | None = None
    """Cluster quality of the final clustering (None for results built by hand)."""
    privacy: PrivacyReport | None = None
    """Privacy spent, when the run's averaging is differentially private."""

    @property
    def true_groups(self) -> dict[str, int]:
        """Ground-truth group of each client."""
        return {c.client_id: c.group for c in self.federation.clients}

    def final(self) -> dict[str, float | int]:
        """Accuracy, clusters found, ARI and purity after the last round (of its members).

        The accuracy is nan if no member was evaluated (every model untrained).
        """
        members = {c: g for c, g in self.true_groups.items() if c in self.clusters}
        scores = clustering_scores(members, self.clusters)
        accuracies = list(self.client_accuracy.values())
        accuracy = mean_client_accuracy(accuracies) if accuracies else float("nan")
        return {
            "accuracy": accuracy,
            "num_clusters": scores.num_clusters,
            "ari": scores.ari,
            "purity": scores.purity,
        }

    def to_json(self) -> dict[str, Any]:
        """Everything ``faultfleet sim`` writes to ``results.json``."""
        return {
            "scenario": self.config.scenario,
            "strategy": self.config.strategy,
            "seed": self.config.seed,
            "config": self.config.to_json(),
            "final": _finite(self.final()),
            "clusters": self.clusters,
            "true_groups": self.true_groups,
            "client_accuracy": self.client_accuracy,
            "num_samples": {c.client_id: len(c.train) for c in self.federation.clients},
            "history": [_finite(asdict(r)) for r in self.history],
            "wall_seconds": self.wall_seconds,
            "cluster_quality": self.quality_json(),
            "aggregation": self.aggregation_json(),
            "privacy": None if self.privacy is None else self.privacy.to_json(),
        }

    def aggregation_json(self) -> dict[str, Any]:
        """The averaging policy and how many updates its rules clipped or capped."""
        return {
            "policy": asdict(self.config.aggregation),
            "norm_clipped": sum(r.norm_clipped for r in self.history),
            "weight_capped": sum(r.weight_capped for r in self.history),
        }

    def quality_json(self) -> dict[str, Any] | None:
        """The final cluster quality with every merge of the run, each scored in its round."""
        if self.quality is None:
            return None
        document = self.quality.to_json()
        document["merges"] = [m for r in self.history for m in r.quality.get("merges", [])]
        return document


def round_quality(quality: RunQuality) -> dict[str, Any]:
    """The run history's per-round summary of ``quality`` (figures and scored merges)."""
    return {
        "confidence": quality.confidence,
        "min_margin": quality.min_margin,
        "borderline_clusters": quality.borderline_clusters,
        "merges": [m.to_json() for m in quality.merges],
    }


def _finite(record: Mapping[str, Any]) -> dict[str, Any]:
    """Replace nan by None so the document is strict JSON."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in record.items()}


def build_federation(config: SimConfig, progress: ProgressCallback | None = None) -> Federation:
    """The federation ``config`` names, simulated from ``config.seed``.

    Every scenario takes ``windows_per_client``, ``snr_db`` and ``machine_spread``, and all
    but ``label-groups`` (whose ``groups`` give each group's size) take
    ``clients_per_group``; the asymmetric ones (``quality-skew``, ``quantity-skew``) keep
    their builders' defaults for everything else (:mod:`signal_pipeline.asymmetric`).
    """
    if config.scenario.startswith(IMAGE_PREFIX):
        raise UsageError(
            f"scenario {config.scenario!r} is built from an image dataset: run it with "
            "`faultfleet bench`, which builds the federation"
        )
    settings = VibrationSettings()
    if config.snr_db is not None:
        settings = replace(settings, snr_db=config.snr_db)
    if config.machine_spread is not None:
        settings = replace(settings, machine_spread=config.machine_spread)
    if config.scenario == LABEL_GROUPS:
        return label_groups(
            config.seed,
            groups=config.groups,
            windows_per_client=config.windows_per_client,
            settings=settings,
            progress=progress,
        )
    builder = {
        "mixed-fault": mixed_fault,
        "quality-skew": quality_skew,
        "quantity-skew": quantity_skew,
        "overlapping-labels": overlapping_labels,
    }[config.scenario]
    return builder(
        config.seed,
        clients_per_group=config.clients_per_group,
        windows_per_client=config.windows_per_client,
        settings=settings,
        progress=progress,
    )


def machine_count(config: SimConfig) -> int:
    """How many machines :func:`build_federation` simulates for ``config`` (for progress)."""
    if config.scenario == LABEL_GROUPS:
        return sum(group.machines for group in config.groups)
    groups = OVERLAP_GROUPS if config.scenario == "overlapping-labels" else MIXED_FAULT_GROUPS
    return config.clients_per_group * len(groups)


def make_engine(
    config: SimConfig, federation: Federation, *, codec: WeightCodec | None = None
) -> RoundEngine:
    """Wire the strategy, the in-process fleet and the engine for ``config``.

    The engine starts with the federation's clients less those that join later. ``codec``
    carries the fleet's weights as the wire would (:mod:`~faultfleet_apps.simulation.wire_codec`).

    Raises
    ------
    ValueError
        The schedule names a client the federation lacks, or leaves it without members.
    """
    schedule = membership_schedule(config, federation)
    device = select_device(config.device)
    template = build_model(config.model, federation.sample_shape, federation.n_classes)
    path = choose_training_path(config.training_path, parameter_count(template), device)
    lanes = compute_lanes(device, torch.get_num_threads())
    logger.debug("%s on %s: %s path, %d lane(s)", config.model, device, path, lanes)
    fleet = InProcessFleet(
        federation, template, device=device, codec=codec, batched=path == "batched", lanes=lanes
    )
    if schedule:
        fleet.set_clients(schedule.members(1))
    strategy = make_strategy(
        config.strategy, fraction=config.fraction, options=config.strategy_options
    )
    strategy.averaging = Averaging(config.aggregation, noise_seed=config.seed)
    factory = model_factory(
        config.model, federation.sample_shape, federation.n_classes, config.seed
    )
    return RoundEngine(
        strategy, fleet, model_factory=factory, train_config=config.train, seed=config.seed
    )


def membership_schedule(config: SimConfig, federation: Federation) -> MembershipSchedule:
    """``config``'s joins and leaves, checked against ``federation``'s clients."""
    clients = [c.client_id for c in federation.clients]
    return MembershipSchedule.plan(clients, config.joins, config.leaves)


def evaluate_members(engine: RoundEngine, joiners: Collection[str]) -> EvaluationReport | None:
    """Evaluate the fleet's members, less ``joiners`` whose model is not ready yet
    (:meth:`~coordinator.strategies.base.Strategy.model_ready`); None if none is left.

    Only machines that joined during the run wait for their model: every other member is
    evaluated as before schedules existed, trained or not.
    """
    members = engine.fleet.client_ids()
    ready = [c for c in members if c not in joiners or engine.strategy.model_ready(c)]
    return engine.evaluate(client_ids=ready) if ready else None


def run_simulation(
    config: SimConfig,
    *,
    federation: Federation | None = None,
    on_round: Callable[[RoundRecord], None] | None = None,
    checkpoint_dir: Path | None = None,
    resume: bool = False,
    stop_after: int | None = None,
    clock: Clock = time.perf_counter,
    codec: WeightCodec | None = None,
) -> SimResult:
    """Run ``config`` to its last round (or to round ``stop_after``) and return the result.

    Parameters
    ----------
    federation : Federation, optional
        Reuse an already built federation (it must be the one ``config`` describes).
    on_round : callable, optional
        Called with each round's record (progress display).
    checkpoint_dir : Path, optional
        Save the engine state and the history there after every round.
    resume : bool
        Continue from the checkpoint in ``checkpoint_dir`` if there is one; the fleet's
        members are those the restored strategy holds, checked against the schedule.
    stop_after : int, optional
        Stop after this round (for tests of resumption); the result covers rounds so far.
    clock : callable
        Seconds, for the wall times of the result and of every round.
    codec : WeightCodec, optional
        Carry every task's and answer's weights through this codec, as the wire would
        (:class:`~faultfleet_apps.simulation.wire_codec.WireCodec` for an encoding of
        ``[wire]``); byte counts become its encoded sizes. Default: weights pass untouched.
    """
    start = clock()
    if config.aggregation.private:
        check_accountant()
    federation = federation or build_federation(config)
    engine = make_engine(config, federation, codec=codec)
    schedule = membership_schedule(config, federation)
    joiners = {client for client, _ in config.joins}
    history: list[RoundRecord] = []
    if resume and checkpoint_dir is not None and has_state(checkpoint_dir):
        state = load_state(checkpoint_dir)
        saved = state.meta.get("simulation", {})
        if saved.get("config") != config.to_json():
            raise UsageError(
                f"{checkpoint_dir} holds a run with different settings; use another "
                "directory or the same options"
            )
        engine.restore(state)
        if schedule:
            restore_members(engine, schedule)
        history = [RoundRecord(**r) for r in saved.get("history", [])]
        logger.info("resumed from round %d", engine.server_round)
    true_groups = {c.client_id: c.group for c in federation.clients}
    last = min(config.rounds, stop_after) if stop_after is not None else config.rounds
    accuracy_by_client: dict[str, float] = {}
    while engine.server_round < last:
        round_start = clock()
        apply_changes(engine, schedule, engine.server_round + 1)
        report = engine.run_round()
        # the run's last round, not ``stop_after``'s: an interrupted run records what an
        # uninterrupted one does, so the resumed history matches it
        evaluate = (
            report.server_round % config.eval_every == 0 or report.server_round == config.rounds
        )
        accuracy: float | None = None
        evaluation = evaluate_members(engine, joiners) if evaluate else None
        if evaluation is not None:
            accuracy_by_client = evaluation.accuracy_by_client()
            accuracy = evaluation.accuracy
        labels = engine.strategy.cluster_labels()
        scores = clustering_scores({c: true_groups[c] for c in labels}, labels)
        record = RoundRecord(
            round=report.server_round,
            accuracy=accuracy,
            num_clusters=scores.num_clusters,
            ari=scores.ari,
            purity=scores.purity,
            bytes_up=report.bytes_up,
            bytes_down=report.bytes_down,
            seconds=clock() - round_start,
            train_loss=report.train_loss,
            answered=len(report.answered),
            failures=len(report.failures),
            strategy_metrics=engine.strategy.round_metrics(),
            members=len(engine.fleet.client_ids()),
            evaluated=0 if evaluation is None else len(evaluation.accuracy_by_client()),
            quality=round_quality(assess(engine.strategy.cluster_evidence(), report.server_round)),
            norm_clipped=engine.strategy.averaged_.report.norm_clipped,
            weight_capped=engine.strategy.averaged_.report.weight_capped,
        )
        history.append(record)
        if checkpoint_dir is not None:
            state = engine.state()
            state.meta["simulation"] = {
                "config": config.to_json(),
                "history": [asdict(r) for r in history],
            }
            save_state(checkpoint_dir, state)
        if on_round is not None:
            on_round(record)
    if not accuracy_by_client:
        evaluation = evaluate_members(engine, joiners)
        accuracy_by_client = evaluation.accuracy_by_client() if evaluation else {}
    return SimResult(
        config=config,
        federation=federation,
        history=history,
        clusters=engine.strategy.cluster_labels(),
        client_accuracy=accuracy_by_client,
        wall_seconds=clock() - start,
        quality=assess(engine.strategy.cluster_evidence()),
        privacy=privacy_report(
            config.aggregation,
            sampling_rate(
                config.fraction, len(engine.fleet.client_ids()), engine.strategy.full_participation
            ),
            engine.server_round,
        ),
    )
