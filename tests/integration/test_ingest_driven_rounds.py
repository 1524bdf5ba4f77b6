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
from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.runtime.ingest_service import IngestWorkerService
from coordinator.runtime.ingest_settings import IngestSettings
from coordinator.runtime.ingest_worker_settings import IngestWorkerSettings
from coordinator.runtime.run_summary import RunSummary
from coordinator.runtime.service import CoordinatorService
from coordinator.runtime.settings import CoordinatorSettings, RunSettings, TrainSettings
from coordinator.strategies.flacc import FLACC
from faultfleet.wire.messages import FitTaskMessage
from faultfleet.wire.settings import BrokerSettings, MetricsSettings

from .services import CoordinatorThread, install_signing_key, sample_value
from .wire_clients import CONNECT_TIMEOUT_S, FakeAgents, ReceivedTask, fit_frame

GROUPS = {"a0": 0, "a1": 0, "a2": 1, "a3": 1}
ROUNDS = 3
WORKERS = ("ingest-1", "ingest-2")


class TwoGroups(FakeAgents):
    """Fake agents whose updates step 0.01 along their group's direction (plus noise)."""

    def fit_answer(self, task: ReceivedTask) -> bytes:
        assert isinstance(task.header, FitTaskMessage)
        weights = task.weights[task.header.model_keys[0]]
        direction = np.random.default_rng(GROUPS[task.header.agent_id]).standard_normal(
            weights.shape
        )
        direction /= np.linalg.norm(direction)
        seed = zlib.crc32(f"{task.header.agent_id}/{task.header.server_round}".encode())
        rng = np.random.default_rng(seed)  # not the task id: it holds the run's random id
        noise = rng.normal(0.0, 1e-5, weights.shape)
        return fit_frame(task.header, (weights + 0.01 * direction + noise).astype(np.float32))


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


def settings(
    broker: BrokerSettings, state_dir: Path, workers: tuple[str, ...]
) -> CoordinatorSettings:
    install_signing_key(state_dir)
    run = RunSettings(
        strategy="flacc",
        strategy_options={"pairwise": "sketch", "partners": 8, "sketch_epsilon": 0.5},
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
    """A whole run of the coordinator with ``workers``: its summary, strategy and metrics."""
    metrics = CoordinatorMetrics(CollectorRegistry())
    agents = TwoGroups(broker, GROUPS)
    service = CoordinatorService(settings(broker, state_dir, workers), metrics)
    coordinator = CoordinatorThread(service)
    try:
        summary = coordinator.result(300)
        assert service.engine is not None
        assert isinstance(service.engine.strategy, FLACC)
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
