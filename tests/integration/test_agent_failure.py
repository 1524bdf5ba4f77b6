"""An agent that stops answering never holds a round past its deadline.

Two ways an agent fails mid-round:

* it stays connected but never answers: the round closes at its deadline with a
  :class:`~faultfleet.tasks.Failure` for it and the other agents' updates;
* its process is killed (SIGKILL) while it trains: the broker publishes its retained
  ``offline`` last will, and the coordinator fails its task at once instead of waiting for
  a deadline that may be long.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from coordinator.adapters.journal import RoundJournal
from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.mqtt_fleet import MqttFleet
from coordinator.adapters.presence import AgentRegistry
from coordinator.runtime.service import CoordinatorService
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.tasks import Failure, FitTask, TrainConfig
from faultfleet.wire.messages import AgentStatus, ModelSpec, TensorEncoding
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from tests.clocks import ManualClock

from .services import (
    TRUSTED,
    CoordinatorThread,
    broker_table,
    coordinator_settings,
    kill,
    sample_value,
    start_cli,
    wait_until,
    write_toml,
)
from .wire_clients import (
    CONNECT_TIMEOUT_S,
    TOPICS,
    FakeAgents,
    Recorder,
)

SPEC = ModelSpec(name="compact", sample_shape=(1, 1024), n_classes=12)


def test_silent_agent_fails_at_the_deadline_and_the_round_keeps_the_others(
    broker_settings: BrokerSettings, tmp_path: Path
) -> None:
    # Prepare: the round's time stands still until the test moves it
    deadline_s = 2.0
    round_clock = ManualClock()
    weights = flatten_weights(build_model(SPEC.name, SPEC.sample_shape, SPEC.n_classes))
    agents = FakeAgents(
        broker_settings,
        ["a0", "mute"],
        policy=lambda task: None if task.agent_id == "mute" else 0.0,
    )
    connection = MqttConnection(client_id="test-coordinator", settings=broker_settings)
    presence = AgentRegistry()  # as the service keeps it: the training windows each declared
    for agent in ("a0", "mute"):
        presence.update(
            AgentStatus(agent_id=agent, state="online", can_train=True, num_train_samples=10)
        )
    fleet = MqttFleet(
        connection,
        TOPICS,
        presence,
        ["a0", "mute"],
        run_id="run-1",
        model=SPEC,
        n_params=weights.size,
        encoding=TensorEncoding(),
        deadline_s=deadline_s,
        min_quorum=1,
        journal=RoundJournal(tmp_path / "journal"),
        metrics=CoordinatorMetrics(CollectorRegistry()),
        max_payload_bytes=broker_settings.max_payload_bytes,
        round_clock=round_clock,
    ).start()
    connection.start()
    assert connection.wait_subscribed(CONNECT_TIMEOUT_S)
    config = TrainConfig(optimizer="adam", learning_rate=5e-4, epochs=1, batch_size=32)
    tasks = [FitTask(a, {"global": weights}, config, seed=1) for a in ("a0", "mute")]

    # Execute: a0 answers; the round still waits for "mute" until its deadline passes
    try:
        fleet.begin_round(1, replay=False)
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(fleet.fit, 1, tasks)
            wait_until(lambda: fleet.waiting_for() == ["mute"], 120, "a0's update")
            round_clock.advance(deadline_s - 0.5)
            wait_until(
                lambda: round_clock.waiting_until() == [deadline_s], 60, "a wait for the deadline"
            )
            open_before_deadline = not future.done()
            round_clock.advance(0.5)
            outcome = future.result(timeout=60)
    finally:
        connection.stop()
        fleet.close()
        agents.stop()

    # Assert
    assert open_before_deadline
    assert round_clock.waiting_until() == []
    assert [r.client_id for r in outcome.results] == ["a0"]
    assert outcome.failures == (Failure("mute", "no answer within the 2 s deadline"),)
    assert np.isfinite(outcome.results[0].weights).all()


@pytest.mark.timeout(600)  # one of the few long tests
def test_agent_killed_while_training_fails_at_once_through_its_last_will(
    broker_settings: BrokerSettings,
    tmp_path: Path,
    recorder: Recorder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Prepare: a real agent process with enough data to train for a while, one fake agent
    caplog.set_level(logging.DEBUG, logger="coordinator.engine.rounds")
    deadline_s = 60.0
    config = write_toml(
        tmp_path / "agent.toml",
        {
            "agent_id": "victim",
            "device": "cpu",
            "state_dir": tmp_path / "victim",
            "broker": broker_table(broker_settings),
            "metrics": {"port": 0},
            "source": {
                "machine_index": 0,
                "clients_per_group": 4,
                "windows_per_client": [300, 400],
            },
            "signing": {"trusted_keys": list(TRUSTED.trusted_keys)},
        },
    )
    registry = CollectorRegistry()
    settings = coordinator_settings(
        broker_settings, tmp_path / "coordinator", rounds=1, round_deadline_s=deadline_s
    )
    round_clock = ManualClock()  # never moved: the round deadline cannot pass
    victim = start_cli(["agent", "--config", str(config)], tmp_path / "victim.log")
    agents = FakeAgents(broker_settings, ["a0"])
    service = CoordinatorService(settings, CoordinatorMetrics(registry), round_clock=round_clock)
    coordinator = CoordinatorThread(service)

    # Execute
    try:
        wait_until(lambda: bool(recorder.tasks("victim")), 120, "the victim's task")
        kill(victim)
        wait_until(lambda: sample_value(registry, "faultfleet_rounds_total") == 1, 120, "round 1")
        summary = coordinator.result(timeout_s=60)
    finally:
        kill(victim)
        coordinator.close()
        agents.stop()

    # Assert: the round ended through the last will, its deadline never passed
    assert round_clock.monotonic() == 0.0
    assert "round 1: victim failed: the agent went offline during the round" in caplog.messages
    assert sample_value(registry, "faultfleet_updates_received_total") == 1
    assert summary.finished
    assert not recorder.on(TOPICS.results("victim"))
