"""Probes, several fit tasks per agent and proximal terms over a real Mosquitto broker.

Three simulated machines run as edge agents in threads of this process (one broker and
one set of agents for the whole module) and an :class:`~coordinator.adapters.mqtt_fleet.MqttFleet`
drives them directly, as the round engine would. Every answer that crossed the broker must
equal what :class:`~faultfleet_apps.simulation.fleet.InProcessFleet` computes on the same
machines' data — the wire adds no numerical difference of its own, float16 transport aside.
Silent and killed agents become failures, at the deadline (on a clock the test moves) and
at once respectively.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from prometheus_client import CollectorRegistry
from pydantic import TypeAdapter

from coordinator.adapters.journal import RoundJournal
from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.mqtt_fleet import MqttFleet
from coordinator.adapters.presence import AgentRegistry
from coordinator.adapters.round_tasks import QuorumError
from edge_agent.service import AgentService
from faultfleet.clock import SYSTEM_CLOCK, Clock
from faultfleet.models.weights import embedding_mask, flatten_weights, parameter_count
from faultfleet.models.zoo import build_model
from faultfleet.tasks import (
    Failure,
    FitTask,
    GradientTask,
    LossesTask,
    Proximal,
    Split,
    TrainConfig,
)
from faultfleet.types import FloatArray
from faultfleet.wire.codec import parse_envelope
from faultfleet.wire.messages import AgentStatus, ModelSpec, TensorEncoding
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from faultfleet_apps.brokers.launch import RunningBroker, start_broker
from faultfleet_apps.simulation.fleet import InProcessFleet
from signal_pipeline.federation import Federation
from signal_pipeline.scenarios import MIXED_FAULT_CLASS_NAMES
from tests.clocks import ManualClock

from .services import REPO_ROOT, kill, running_agents, wait_until
from .wire_clients import CONNECT_TIMEOUT_S, TOPICS, FakeAgents, Recorder

SPEC = ModelSpec(name="compact", sample_shape=(1, 1024), n_classes=12)
MACHINES = (0, 5, 13)
AGENTS = tuple(f"m{index:02d}" for index in MACHINES)
CPU_ARCHITECTURE = build_model(SPEC.name, SPEC.sample_shape, SPEC.n_classes)
N_PARAMS = parameter_count(CPU_ARCHITECTURE)
HALF = TensorEncoding(dtype="float16", compression="zlib")
SGD = TrainConfig(optimizer="sgd", learning_rate=1e-4, epochs=1, batch_size=16)


def initial(seed: int) -> FloatArray:
    return flatten_weights(build_model(SPEC.name, SPEC.sample_shape, SPEC.n_classes, seed=seed))


MODELS = {"cluster-0": initial(1), "cluster-1": initial(2)}
_STATUS = TypeAdapter(AgentStatus)
_DTYPE = {"float32": np.float32, "float16": np.float16}


@pytest.fixture(scope="module")
def module_broker(
    mosquitto_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerSettings]:
    running: RunningBroker = start_broker(
        prefer="mosquitto", workdir=tmp_path_factory.mktemp("probe-broker")
    )
    try:
        yield BrokerSettings(host=running.host, port=running.port)
    finally:
        running.stop()


@pytest.fixture(scope="module")
def agents(
    module_broker: BrokerSettings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[AgentService]]:
    with running_agents(
        module_broker, tmp_path_factory.mktemp("probe-agents"), MACHINES, interval_s=1.0
    ) as services:
        for agent in services:
            assert agent.connection.wait_subscribed(CONNECT_TIMEOUT_S), agent.agent_id
        yield services


@pytest.fixture(scope="module")
def in_process(agents: list[AgentService]) -> InProcessFleet:
    """The same machines' data in the simulator's fleet, clients named like the agents."""
    data = [(a.agent_id, a.labelled.active) for a in agents]
    clients = tuple(replace(d, client_id=agent) for agent, d in data if d is not None)
    federation = Federation("probes", clients, SPEC.n_classes, MIXED_FAULT_CLASS_NAMES)
    return InProcessFleet(
        federation, CPU_ARCHITECTURE, device=torch.device(agents[0].device), batched=False
    )


@contextmanager
def mqtt_fleet(
    broker: BrokerSettings,
    journal_dir: Path,
    *,
    deadline_s: float = 30.0,
    encoding: TensorEncoding = TensorEncoding(),  # noqa: B008 - frozen pydantic model
    registry: CollectorRegistry | None = None,
    min_quorum: int = 1,
    clients: tuple[str, ...] = AGENTS,
    round_clock: Clock = SYSTEM_CLOCK,
) -> Iterator[MqttFleet]:
    """A connected MqttFleet; agents' status messages reach its presence registry, so a
    last will fails an agent's open tasks as in the coordinator service."""
    holder: list[MqttFleet] = []

    def offline(agent_id: str) -> None:
        holder[0].agent_offline(agent_id)

    presence = AgentRegistry(on_offline=offline)
    connection = MqttConnection(client_id="test-coordinator", settings=broker)
    fleet = MqttFleet(
        connection,
        TOPICS,
        presence,
        clients,
        run_id=uuid.uuid4().hex[:12],
        model=SPEC,
        n_params=N_PARAMS,
        encoding=encoding,
        deadline_s=deadline_s,
        min_quorum=min_quorum,
        journal=RoundJournal(journal_dir),
        metrics=CoordinatorMetrics(registry),
        max_payload_bytes=broker.max_payload_bytes,
        round_clock=round_clock,
    ).start()
    holder.append(fleet)

    def on_status(topic: str, payload: bytes) -> None:
        if payload:
            presence.update(parse_envelope(_STATUS, payload))

    connection.route(TOPICS.all_agent_status(), on_status)
    connection.start()
    assert connection.wait_subscribed(CONNECT_TIMEOUT_S)
    try:
        yield fleet
    finally:
        connection.stop()
        fleet.close()


# -- probes equal the simulator ------------------------------------------------------------


def test_losses_probes_equal_the_in_process_fleet(
    module_broker: BrokerSettings,
    agents: list[AgentService],
    in_process: InProcessFleet,
    tmp_path: Path,
) -> None:
    tasks = [
        LossesTask(AGENTS[0], MODELS, Split.VAL),
        LossesTask(AGENTS[1], MODELS, Split.TEST, per_sample=False),
        LossesTask(AGENTS[2], {"cluster-1": MODELS["cluster-1"]}, Split.TRAIN),
    ]

    with mqtt_fleet(module_broker, tmp_path / "journal") as fleet:
        outcome = fleet.losses(1, tasks)
    expected = in_process.losses(1, tasks)

    assert outcome.failures == ()
    assert [r.client_id for r in outcome.results] == list(AGENTS)
    assert outcome.bytes_down > 0
    assert outcome.bytes_up > 0
    for got, want in zip(outcome.results, expected.results, strict=True):
        assert got.num_samples == want.num_samples
        assert list(got.losses) == list(want.losses)
        for key, losses in got.losses.items():
            assert losses.dtype == np.float32
            np.testing.assert_allclose(losses, want.losses[key], rtol=1e-5, atol=1e-6)
    assert outcome.results[1].losses["cluster-0"].shape == (1,)


@pytest.mark.parametrize("encoding", [TensorEncoding(), HALF], ids=["float32", "float16-zlib"])
def test_gradient_probes_equal_the_in_process_fleet(
    module_broker: BrokerSettings,
    agents: list[AgentService],
    in_process: InProcessFleet,
    tmp_path: Path,
    encoding: TensorEncoding,
) -> None:
    tasks = [GradientTask(agent, MODELS, 16, seed=40 + i) for i, agent in enumerate(AGENTS)]
    # The agents compute at the weights they received: float16-rounded ones in float16.
    rounded = {k: w.astype(_DTYPE[encoding.dtype]).astype(np.float32) for k, w in MODELS.items()}
    reference = [GradientTask(t.client_id, rounded, t.batch_size, t.seed) for t in tasks]

    with mqtt_fleet(module_broker, tmp_path / "journal", encoding=encoding) as fleet:
        outcome = fleet.gradients(2, tasks)
    expected = in_process.gradients(2, reference)

    assert outcome.failures == ()
    assert [r.client_id for r in outcome.results] == list(AGENTS)
    rtol = 1e-5 if encoding.dtype == "float32" else 2.0**-11
    for got, want in zip(outcome.results, expected.results, strict=True):
        assert got.num_samples == want.num_samples == 16
        assert list(got.gradients) == list(got.losses) == list(MODELS)
        for key, gradient in got.gradients.items():
            assert got.losses[key] == pytest.approx(want.losses[key], rel=1e-6)
            largest = float(np.abs(want.gradients[key]).max())
            np.testing.assert_allclose(
                gradient, want.gradients[key], rtol=rtol, atol=largest * 1e-6
            )


# -- fit: several tasks per agent, proximal terms ------------------------------------------


def test_one_agent_trains_two_models_in_one_round_and_a_replay_reads_both_from_the_journal(
    module_broker: BrokerSettings,
    agents: list[AgentService],
    in_process: InProcessFleet,
    tmp_path: Path,
) -> None:
    config = TrainConfig(optimizer="adam", learning_rate=1e-3, epochs=1, batch_size=16)
    tasks = [
        FitTask(AGENTS[0], {"cluster-0": MODELS["cluster-0"]}, config, seed=1),
        FitTask(AGENTS[0], {"cluster-1": MODELS["cluster-1"]}, config, seed=2),
        FitTask(AGENTS[1], {"cluster-0": MODELS["cluster-0"]}, config, seed=3),
    ]
    journal = tmp_path / "journal"

    with mqtt_fleet(module_broker, journal) as fleet:
        fleet.begin_round(1, replay=False)
        outcome = fleet.fit(1, tasks)
    expected = in_process.fit(1, tasks)
    # A restarted coordinator replays the round: every update comes from the journal.
    with MqttFleet(
        MqttConnection(client_id="never-started", settings=module_broker),
        TOPICS,
        AgentRegistry(),
        AGENTS,
        run_id=fleet.run_id,
        model=SPEC,
        n_params=N_PARAMS,
        encoding=TensorEncoding(),
        deadline_s=5.0,
        min_quorum=3,
        journal=RoundJournal(journal),
        metrics=CoordinatorMetrics(CollectorRegistry()),
        max_payload_bytes=module_broker.max_payload_bytes,
    ) as restarted:
        replayed = restarted.fit(1, tasks)

    assert outcome.failures == replayed.failures == ()
    assert [(r.client_id, r.model_key) for r in outcome.results] == [
        (AGENTS[0], "cluster-0"),
        (AGENTS[0], "cluster-1"),
        (AGENTS[1], "cluster-0"),
    ]
    for got, again, want in zip(outcome.results, replayed.results, expected.results, strict=True):
        assert (got.client_id, got.model_key) == (want.client_id, want.model_key)
        np.testing.assert_allclose(got.weights, want.weights, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(again.weights, got.weights)
        np.testing.assert_array_equal(got.delta, got.weights - MODELS[got.model_key])
        assert got.train_loss == pytest.approx(want.train_loss, rel=1e-5)
    assert not np.array_equal(outcome.results[0].weights, outcome.results[1].weights)


def test_a_huge_proximal_strength_returns_weights_near_the_target(
    module_broker: BrokerSettings,
    agents: list[AgentService],
    in_process: InProcessFleet,
    tmp_path: Path,
) -> None:
    start, target = MODELS["cluster-0"], initial(9)
    # SGD with learning_rate · strength = 1 steps onto the target and stays there.
    pulled = FitTask(
        AGENTS[2], {"cluster-0": start}, SGD, seed=4, proximal=(Proximal(target, 1e4),)
    )
    embedding_only = FitTask(
        AGENTS[1],
        {"cluster-0": start},
        SGD,
        seed=5,
        proximal=(Proximal(start, 0.5), Proximal(target, 1e4, "embedding")),
    )

    with mqtt_fleet(module_broker, tmp_path / "journal") as fleet:
        outcome = fleet.fit(1, [pulled, embedding_only])
    expected = in_process.fit(1, [pulled, embedding_only])

    assert outcome.failures == ()
    near, partly = outcome.results
    assert np.abs(start - target).max() > 0.1
    # Each step lands on the target less learning_rate · (cross-entropy gradient).
    np.testing.assert_allclose(near.weights, target, atol=1e-2)
    # The embedding term pulls all but the decision part (the last linear layer).
    embedding = embedding_mask(CPU_ARCHITECTURE)
    np.testing.assert_allclose(partly.weights[embedding], target[embedding], atol=1e-2)
    np.testing.assert_allclose(partly.weights[~embedding], start[~embedding], atol=1e-2)
    for got, want in zip(outcome.results, expected.results, strict=True):
        np.testing.assert_allclose(got.weights, want.weights, rtol=1e-5, atol=1e-6)


# -- failures --------------------------------------------------------------------------------


def test_a_silent_agent_fails_a_probe_at_the_deadline(
    module_broker: BrokerSettings, agents: list[AgentService], tmp_path: Path
) -> None:
    deadline_s = 2.0
    round_clock = ManualClock()
    mute = FakeAgents(module_broker, ["mute"])
    tasks = [LossesTask(AGENTS[0], MODELS), LossesTask("mute", MODELS)]

    try:
        with (
            mqtt_fleet(
                module_broker, tmp_path / "journal", deadline_s=deadline_s, round_clock=round_clock
            ) as fleet,
            ThreadPoolExecutor(1) as pool,
        ):
            future = pool.submit(fleet.losses, 1, tasks)
            wait_until(lambda: fleet.waiting_for() == ["mute"], 120, f"{AGENTS[0]}'s answer")
            round_clock.advance(deadline_s - 0.5)
            wait_until(
                lambda: round_clock.waiting_until() == [deadline_s], 60, "a wait for the deadline"
            )
            open_before_deadline = not future.done()
            round_clock.advance(0.5)
            outcome = future.result(timeout=60)
    finally:
        mute.stop()

    assert open_before_deadline
    assert [r.client_id for r in outcome.results] == [AGENTS[0]]
    assert outcome.failures == (Failure("mute", "no answer within the 2 s deadline"),)
    assert [type(t.header).__name__ for t in mute.received] == ["LossesTaskMessage"]


def test_a_probe_answered_by_fewer_agents_than_the_quorum_fails_the_round(
    module_broker: BrokerSettings, agents: list[AgentService], tmp_path: Path
) -> None:
    # Prepare: two agents asked, one of them mute, a quorum of two
    round_clock = ManualClock()
    mute = FakeAgents(module_broker, ["mute"])
    tasks = [GradientTask(AGENTS[0], MODELS, 8, 1), GradientTask("mute", MODELS, 8, 2)]

    # Execute / Assert: the round is refused (the service rolls it back and retries) rather
    # than trained on whoever answered
    try:
        with (
            mqtt_fleet(
                module_broker,
                tmp_path / "journal",
                deadline_s=1.0,
                min_quorum=2,
                round_clock=round_clock,
            ) as fleet,
            ThreadPoolExecutor(1) as pool,
        ):
            future = pool.submit(fleet.gradients, 1, tasks)
            wait_until(lambda: fleet.waiting_for() == ["mute"], 120, f"{AGENTS[0]}'s answer")
            round_clock.advance(1.0)
            with pytest.raises(QuorumError, match="gradient answers from 1 of 2 agents"):
                future.result(timeout=60)
    finally:
        mute.stop()


def test_a_killed_agent_fails_a_probe_at_once_through_its_last_will(
    module_broker: BrokerSettings, agents: list[AgentService], tmp_path: Path
) -> None:
    ghost = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.integration.ghost_agent",
            module_broker.host,
            str(module_broker.port),
            "ghost",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    recorder = Recorder(module_broker)
    round_clock = ManualClock()  # never moved: the deadline cannot pass
    try:
        assert ghost.stdout is not None
        assert ghost.stdout.readline().strip() == b"ready"
        with (
            mqtt_fleet(
                module_broker,
                tmp_path / "journal",
                deadline_s=60.0,
                clients=(*AGENTS, "ghost"),
                round_clock=round_clock,
            ) as fleet,
            ThreadPoolExecutor(1) as pool,
        ):
            wait_until(lambda: "ghost" in fleet.registry.online(), 60, "the ghost's status")
            round_agents = fleet.begin_round(3, replay=False)
            tasks = [GradientTask(AGENTS[0], MODELS, 8, 1), GradientTask("ghost", MODELS, 8, 2)]
            future = pool.submit(fleet.gradients, 3, tasks)
            wait_until(lambda: bool(recorder.tasks("ghost")), 60, "the ghost's task")
            kill(ghost)
            outcome = future.result(timeout=60)
            available_after = fleet.available()
            fleet.end_round()
    finally:
        kill(ghost)
        recorder.stop()

    assert round_clock.monotonic() == 0.0  # the round closed before its deadline
    assert [r.client_id for r in outcome.results] == [AGENTS[0]]
    assert outcome.failures == (Failure("ghost", "the agent went offline during the round"),)
    # an agent gone since the round began is no longer offered for the round's next tasks
    assert "ghost" in round_agents
    assert "ghost" not in available_after
