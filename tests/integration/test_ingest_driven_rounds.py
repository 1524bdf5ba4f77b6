"""``faultfleet coordinator`` with ``[ingest] workers``: its fit rounds go through two ingest
workers sharing the results topic (MQTT 5 shared subscription, real Mosquitto), and the
evaluations the workers receive come back to it.

The agents are fake (:class:`~tests.integration.wire_clients.FakeAgents`): two groups whose
updates point in two nearly orthogonal directions, so FLACC under sketches must cluster
them by group, exactly as the single-process path does.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.runtime.ingest_service import IngestWorkerService
from coordinator.runtime.ingest_settings import IngestSettings
from coordinator.runtime.ingest_worker_settings import IngestWorkerSettings
from coordinator.runtime.run_summary import RunSummary
from coordinator.runtime.service import CoordinatorService
from coordinator.runtime.settings import CoordinatorSettings, RunSettings, TrainSettings
from coordinator.strategies.base import Strategy
from coordinator.strategies.flacc import FLACC
from faultfleet.wire.messages import FitTaskMessage, GradientTaskMessage, LossesTaskMessage
from faultfleet.wire.settings import BrokerSettings, MetricsSettings

from .services import CoordinatorThread, install_signing_key, sample_value
from .wire_clients import (
    CONNECT_TIMEOUT_S,
    FakeAgents,
    ReceivedTask,
    fit_frame,
    gradient_frame,
    losses_frame,
)

GROUPS = {"a0": 0, "a1": 0, "a2": 1, "a3": 1}
ROUNDS = 3
WORKERS = ("ingest-1", "ingest-2")


class TwoGroups(FakeAgents):
    """Fake agents whose updates step 0.01 along their group's direction (plus noise); offered
    several models (IFCA), an agent trains the one its group numbers."""

    def fit_answer(self, task: ReceivedTask) -> bytes:
        assert isinstance(task.header, FitTaskMessage)
        keys = task.header.model_keys
        key = keys[GROUPS[task.header.agent_id] % len(keys)]
        weights = task.weights[key]
        direction = np.random.default_rng(GROUPS[task.header.agent_id]).standard_normal(
            weights.shape
        )
        direction /= np.linalg.norm(direction)
        seed = zlib.crc32(f"{task.header.agent_id}/{task.header.server_round}".encode())
        rng = np.random.default_rng(seed)  # not the task id: it holds the run's random id
        noise = rng.normal(0.0, 1e-5, weights.shape)
        trained = (weights + 0.01 * direction + noise).astype(np.float32)
        return fit_frame(task.header, trained, model_key=key)

    def probe_answer(self, task: ReceivedTask) -> bytes | None:
        """FAACL's losses probes: each model's loss on ten windows, lower on the models
        the agent's group trained (their weights moved along its direction); JGL's
        gradient probes: minus the group's direction for every model. The same in every
        run."""
        header = task.header
        if isinstance(header, GradientTaskMessage):
            gradients = {}
            for key in header.model_keys:
                shape = task.weights[key].shape
                direction = np.random.default_rng(GROUPS[header.agent_id]).standard_normal(shape)
                gradients[key] = (-direction / np.linalg.norm(direction)).astype(np.float32)
            return gradient_frame(header, gradients)
        if not isinstance(header, LossesTaskMessage):
            return None
        group = GROUPS[header.agent_id]
        losses = {}
        for key in header.model_keys:
            weights = task.weights[key]
            direction = np.random.default_rng(group).standard_normal(weights.shape)
            alignment = float(weights @ direction) / float(np.linalg.norm(direction))
            losses[key] = np.full(10, 1.0 - alignment, dtype=np.float32)
        return losses_frame(header, losses)


@contextmanager
def ingest_workers(broker: BrokerSettings, state_dir: Path) -> Iterator[list[IngestWorkerService]]:
    """The two ingest workers in threads, subscribed; stopped on exit."""
    services = [
        IngestWorkerService(IngestWorkerSettings(worker_id=w, state_dir=state_dir, broker=broker))
        for w in WORKERS
    ]
    stop = threading.Event()
    threads = [
        threading.Thread(target=s.run, args=(stop,), name=s.settings.worker_id) for s in services
    ]
    for thread in threads:
        thread.start()
    try:
        for service in services:
            assert service.connection.wait_subscribed(CONNECT_TIMEOUT_S)
        yield services
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)


FLACC_OPTIONS = {"pairwise": "sketch", "partners": 8, "sketch_epsilon": 0.5}
STREAMING: dict[str, dict[str, object]] = {
    # the updates step 0.01: their mean across the two groups about 0.007
    "cfl": {
        "pairwise": "sketch",
        "sketch_epsilon": 0.5,
        "min_rounds": 1,
        "eps1": 0.009,
        "eps2": 0.009,
    },
    "flhc": {"pairwise": "sketch", "sketch_epsilon": 0.5, "n_warmup": 1},
    "ifca": {"pairwise": "sketch", "sketch_epsilon": 0.5, "n_clusters": 2},
    "jgl": {"pairwise": "sketch", "sketch_epsilon": 0.5, "n_clusters": 2, "batch_size": 8},
    # compare nothing: the workers fold without sketching
    "fedavg": {"streaming": "on"},
    "fixed": {"streaming": "on", "assignment": GROUPS},
    "faacl": {"pairwise": "sketch", "sketch_epsilon": 0.5, "init_rounds": 1},
}
"""The other strategies ingest workers serve, with options that cluster within 3 rounds."""


def settings(
    broker: BrokerSettings,
    state_dir: Path,
    workers: tuple[str, ...],
    strategy: str = "flacc",
    options: dict[str, object] | None = None,
) -> CoordinatorSettings:
    install_signing_key(state_dir)
    run = RunSettings(
        strategy=strategy,
        strategy_options=FLACC_OPTIONS if options is None else options,
        rounds=ROUNDS,
        fraction=1.0,
        min_agents=len(GROUPS),
        round_deadline_s=600.0,
        retry_wait_s=0.0,
        eval_every=1,
        publish_every=100,
    )
    return CoordinatorSettings(
        state_dir=state_dir,
        broker=broker,
        metrics=MetricsSettings(port=0),
        run=run,
        train=TrainSettings(epochs=1),
        ingest=IngestSettings(workers=workers),
    )


def run_coordinator(
    broker: BrokerSettings, state_dir: Path, workers: tuple[str, ...]
) -> tuple[RunSummary, FLACC, CoordinatorMetrics]:
    """A whole FLACC run of the coordinator with ``workers``: its summary, strategy and
    metrics."""
    summary, strategy, metrics = run_strategy(broker, state_dir, workers)
    assert isinstance(strategy, FLACC)
    return summary, strategy, metrics


def run_strategy(
    broker: BrokerSettings,
    state_dir: Path,
    workers: tuple[str, ...],
    strategy: str = "flacc",
    options: dict[str, object] | None = None,
) -> tuple[RunSummary, Strategy, CoordinatorMetrics]:
    """A whole run of ``strategy`` with ``workers``: its summary, strategy and metrics."""
    metrics = CoordinatorMetrics(CollectorRegistry())
    agents = TwoGroups(broker, GROUPS)
    built = settings(broker, state_dir, workers, strategy, options)
    service = CoordinatorService(built, metrics)
    coordinator = CoordinatorThread(service)
    try:
        summary = coordinator.result(300)
        assert service.engine is not None
        return summary, service.engine.strategy, metrics
    finally:
        coordinator.close()
        agents.stop()


def test_fit_rounds_through_two_ingest_workers_cluster_as_one_process_does(
    broker_settings: BrokerSettings, tmp_path: Path
) -> None:
    # Prepare: two ingest workers on the shared subscription
    with ingest_workers(broker_settings, tmp_path / "ingest") as workers:
        # Execute: three FLACC rounds through the workers, each evaluated
        summary, strategy, metrics = run_coordinator(broker_settings, tmp_path / "driven", WORKERS)
        connected = [
            sample_value(w.metrics.registry, "faultfleet_broker_connected") for w in workers
        ]
    # ... and the same run ingested by the coordinator itself
    _, reference, _ = run_coordinator(broker_settings, tmp_path / "single", ())

    # Assert: every update went through one worker and counted once
    updates = ROUNDS * len(GROUPS)
    registry = metrics.registry
    counts = [w.worker.counts for w in workers]
    assert sum(c["accepted"] - c["retracted"] for c in counts) == updates
    assert all(c["accepted"] + c["forwarded"] > 0 for c in counts)
    assert sample_value(registry, "faultfleet_updates_received_total") == updates
    assert (
        sample_value(registry, "faultfleet_ingest_workers_missing_total", {"stage": "close"}) == 0
    )
    assert summary.server_round == ROUNDS
    assert summary.rounds_retried == 0
    # ... as each worker's metrics say, with every message's bytes given back
    assert connected == [1.0, 1.0]
    for worker, count in zip(workers, counts, strict=True):
        own = worker.metrics.registry
        for outcome in ("accepted", "forwarded", "retracted"):
            labels = {"outcome": outcome}
            assert sample_value(own, "faultfleet_ingest_messages_total", labels) == count[outcome]
        assert sample_value(own, "faultfleet_ingest_round") == ROUNDS
        assert sample_value(own, "faultfleet_ingest_partial_sums_total") >= ROUNDS
        assert sample_value(own, "faultfleet_answers_held_bytes") == 0
    # ... the evaluations came back through the workers
    assert sum(c["forwarded"] for c in counts) >= ROUNDS * len(GROUPS)
    assert summary.accuracy_by_agent == dict.fromkeys(GROUPS, 0.5)
    # ... and the clusters are the groups, the model the one process gives
    assert sorted(strategy.entities) == [("a0", "a1"), ("a2", "a3")]
    assert strategy.entities == reference.entities
    np.testing.assert_allclose(strategy.models["global"], reference.models["global"], atol=1e-6)


@pytest.mark.parametrize("strategy", sorted(STREAMING))
def test_the_other_streaming_strategies_through_two_workers_run_as_one_process(
    broker_settings: BrokerSettings, tmp_path: Path, strategy: str
) -> None:
    # Prepare: two ingest workers on the shared subscription
    options = STREAMING[strategy]
    with ingest_workers(broker_settings, tmp_path / "ingest") as workers:
        # Execute: three rounds through the workers
        summary, driven, metrics = run_strategy(
            broker_settings, tmp_path / "driven", WORKERS, strategy, options
        )
    # ... and the same run ingested by the coordinator itself
    _, reference, _ = run_strategy(broker_settings, tmp_path / "single", (), strategy, options)

    # Assert: every update went through one worker and counted once, no round retried
    counts = [w.worker.counts for w in workers]
    updates = sample_value(metrics.registry, "faultfleet_updates_received_total")
    assert sum(c["accepted"] - c["retracted"] for c in counts) == updates
    assert updates >= ROUNDS * len(GROUPS)
    assert summary.server_round == ROUNDS
    assert summary.rounds_retried == 0
    # ... the clusters and models are the one process's (CFL's, FL+HC's and JGL's clusters
    # the groups; IFCA's second model trained by the group that chose it; the fixed
    # clusters' by the group assigned to it)
    labels = driven.cluster_labels()
    assert labels == reference.cluster_labels()
    if strategy in ("cfl", "flhc", "jgl"):
        assert labels["a0"] == labels["a1"] != labels["a2"] == labels["a3"]
    if strategy in ("ifca", "fixed"):  # both clusters' models averaged from their groups
        assert driven.averaged_.averages == 2
    assert list(driven.models) == list(reference.models)
    for key, model in reference.models.items():
        np.testing.assert_allclose(driven.models[key], model, atol=1e-6)
