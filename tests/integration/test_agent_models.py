"""An agent against a real broker: model delivery when clusters change, failed tasks answered.

The coordinator's side is played by the real :class:`~coordinator.adapters.publisher.ModelPublisher`
(retained models, then assignments, stale clusters cleared) and by hand-made task frames.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from coordinator.adapters.publisher import ModelPublisher
from edge_agent.inference import ModelIntegrityError
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.tasks import TrainConfig
from faultfleet.types import FloatArray
from faultfleet.wire.codec import encode_frame, encode_tensors, parse_envelope, split_frame
from faultfleet.wire.messages import (
    ANSWER_ADAPTER,
    FitTaskMessage,
    ModelSpec,
    TaskFailedMessage,
    TensorEncoding,
    TrainSpec,
)
from faultfleet.wire.settings import BrokerSettings

from .services import SIGNING_KEY, running_agents, wait_until
from .wire_clients import TOPICS, Recorder, connect

SPEC = ModelSpec(name="compact", sample_shape=(1, 1024), n_classes=12)
CLASSES = tuple(f"class {i}" for i in range(12))


def _weights(seed: int) -> FloatArray:
    return flatten_weights(build_model("compact", (1, 1024), 12, seed=seed))


def test_an_agent_moved_back_to_an_earlier_cluster_loads_that_clusters_new_model(
    broker_settings: BrokerSettings, tmp_path: Path
) -> None:
    # Prepare: one agent, and the coordinator's publisher on its own connection.
    a1, b2, a3 = (_weights(seed) for seed in (1, 2, 3))
    coordinator = connect("test-coordinator", broker_settings, {})
    publisher = ModelPublisher(coordinator, TOPICS, SPEC, CLASSES, "run", SIGNING_KEY)
    try:
        with running_agents(broker_settings, tmp_path, [0], clients_per_group=1) as (agent,):

            def serving(cluster: str, version: int) -> bool:
                active = agent.diagnoser.active
                return active is not None and (active.cluster_id, active.version) == (
                    cluster,
                    version,
                )

            # Execute: cluster A, then B (A's retained model is cleared), then A again with a
            # model published while the agent was still assigned to B.
            first = publisher.publish(1, 1, {"A": a1}, {"m00": "A"})
            wait_until(lambda: serving("A", 1), 30, "model A v1")
            publisher.publish(2, 2, {"B": b2}, {"m00": "B"})
            wait_until(lambda: serving("B", 2), 30, "model B v2")
            third = publisher.publish(3, 3, {"A": a3}, {"m00": "A"})
            wait_until(lambda: serving("A", 3), 30, "model A v3")

            # Assert
            active = agent.diagnoser.active
            assert active is not None
            assert first.clusters == third.clusters == {"A": ["m00"]}

            def stored_version() -> int | None:
                try:
                    saved = agent.store.load()
                except ModelIntegrityError:  # caught between writing model.onnx and model.json
                    return None
                return None if saved is None else saved[1].version

            wait_until(lambda: stored_version() == 3, 30, "model A v3 in the agent's store")
            saved = agent.store.load()
            assert saved is not None
            assert saved[1].sha256 == active.sha256
    finally:
        coordinator.stop()


def test_a_task_the_agent_cannot_run_is_answered_as_failed(
    broker_settings: BrokerSettings,
    tmp_path: Path,
    recorder: Recorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Prepare: training raises inside the agent (as a CUDA out-of-memory error would).
    coordinator = connect("test-coordinator", broker_settings, {})
    try:
        with running_agents(broker_settings, tmp_path, [0], clients_per_group=1) as (agent,):
            runner = agent.runner

            def broken(*args: object) -> None:
                raise RuntimeError("CUDA out of memory")

            monkeypatch.setattr(runner, "run", broken)
            # Subscribed, not only connected: a task published before the broker took the
            # agent's subscription to its task topic would reach nobody.
            wait_until(
                lambda: agent.connection.wait_subscribed(0.1), 30, "the agent's subscriptions"
            )
            task = FitTaskMessage(
                task_id="t" * 24,
                run_id="run",
                server_round=1,
                agent_id="m00",
                model=SPEC,
                model_keys=("global",),
                encoding=TensorEncoding(),
                issued_at=time.time(),
                deadline_s=600.0,
                train=TrainSpec.of(TrainConfig()),
                seed=0,
            )
            body = encode_tensors({"global": _weights(0)}, TensorEncoding())

            # Execute
            coordinator.publish(TOPICS.tasks("m00"), encode_frame(task, body))
            wait_until(lambda: bool(recorder.on(TOPICS.results("m00"))), 30, "the agent's answer")

            # Assert
            (seen,) = recorder.on(TOPICS.results("m00"))
            header, _ = split_frame(seen.payload, max_bytes=len(seen.payload))
            answer = parse_envelope(ANSWER_ADAPTER, header)
            assert isinstance(answer, TaskFailedMessage)
            assert answer.task_id == task.task_id
            assert answer.reason == "RuntimeError: CUDA out of memory"
    finally:
        coordinator.stop()
