"""Bad answers to probes are rejected, counted by reason, and the probe still completes.

An :class:`~coordinator.adapters.mqtt_fleet.MqttFleet` sends a losses probe and then a gradient
probe to two agents played on the wire by the test
(:class:`~tests.integration.wire_clients.FakeAgents`, which never answer probes by
themselves). While a probe waits, the test publishes one bad answer of every kind on the
agents' results topics, waits until the coordinator counted it under its reason, and then
answers properly; the probe returns exactly the good answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from coordinator.adapters.journal import RoundJournal
from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.mqtt_fleet import MqttFleet
from coordinator.adapters.presence import AgentRegistry
from faultfleet.tasks import GradientResult, GradientTask, LossesResult, LossesTask, Split
from faultfleet.types import FloatArray
from faultfleet.wire.codec import RejectReason, encode_frame, encode_tensors
from faultfleet.wire.messages import (
    AnyTaskMessage,
    GradientMessage,
    GradientTaskMessage,
    LossesTaskMessage,
    ModelSpec,
    TensorEncoding,
)
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from tests.clocks import ManualClock

from .services import sample_value, wait_until
from .wire_clients import (
    CONNECT_TIMEOUT_S,
    TOPICS,
    FakeAgents,
    gradient_frame,
    losses_frame,
)

SPEC = ModelSpec(name="compact", sample_shape=(1, 1024), n_classes=12)
N_PARAMS = 60_432
MAX_PAYLOAD_BYTES = 1024 * 1024
"""The fleet's limit: above a compact gradient answer of three models (726 KB), below the
oversized message. The connection's own limit stays at the default 64 MiB."""
RNG = np.random.default_rng(0)
MODELS = {key: RNG.standard_normal(N_PARAMS).astype(np.float32) for key in ("c0", "c1")}


@pytest.fixture
def fleet_and_metrics(
    broker_settings: BrokerSettings, tmp_path: Path
) -> Iterator[tuple[MqttFleet, CollectorRegistry]]:
    registry = CollectorRegistry()
    connection = MqttConnection(client_id="test-coordinator", settings=broker_settings)
    fleet = MqttFleet(
        connection,
        TOPICS,
        AgentRegistry(),
        ["a0", "a1"],
        run_id="run-bad-probes",
        model=SPEC,
        n_params=N_PARAMS,
        encoding=TensorEncoding(),
        deadline_s=30.0,
        min_quorum=1,
        journal=RoundJournal(tmp_path / "journal"),
        metrics=CoordinatorMetrics(registry),
        max_payload_bytes=MAX_PAYLOAD_BYTES,
        round_clock=ManualClock(),  # never moved: probes close only once answered
    ).start()
    connection.start()
    assert connection.wait_subscribed(CONNECT_TIMEOUT_S)
    try:
        yield fleet, registry
    finally:
        connection.stop()
        fleet.close()


def test_bad_probe_answers_are_rejected_by_reason_and_probes_complete(
    broker_settings: BrokerSettings, fleet_and_metrics: tuple[MqttFleet, CollectorRegistry]
) -> None:
    # Prepare
    fleet, registry = fleet_and_metrics
    agents = FakeAgents(broker_settings, ["a0", "a1"])

    def rejected(reason: RejectReason) -> float:
        return sample_value(registry, "faultfleet_updates_rejected_total", {"reason": reason})

    def counted(reason: RejectReason, times: int = 1) -> Callable[[], bool]:
        return lambda: rejected(reason) == times

    def probe_headers(n: int) -> list[AnyTaskMessage]:
        """The headers of the two tasks that made the received tasks ``n``, by agent."""
        wait_until(lambda: len(agents.received) == n, 60, f"{n} probe tasks")
        return sorted((t.header for t in agents.received[n - 2 :]), key=lambda h: h.agent_id)

    losses = {key: np.linspace(0.1, 2.0, 5, dtype=np.float32) + i for i, key in enumerate(MODELS)}
    gradients = {key: (1e-3 * RNG.standard_normal(N_PARAMS)).astype(np.float32) for key in MODELS}
    poisoned = {**losses, "c1": np.array([0.1, np.nan, 0.3, 0.4, 0.5], np.float32)}

    try:
        with ThreadPoolExecutor(1) as pool:
            # Execute: a losses probe
            losses_probe = pool.submit(
                fleet.losses, 1, [LossesTask(a, MODELS, Split.VAL) for a in ("a0", "a1")]
            )
            to_a0, to_a1 = probe_headers(2)
            assert isinstance(to_a0, LossesTaskMessage)
            assert isinstance(to_a1, LossesTaskMessage)
            gradient_for_losses = GradientMessage(
                task_id=to_a1.task_id,
                run_id=to_a1.run_id,
                server_round=1,
                agent_id="a1",
                num_samples=5,
                losses=dict.fromkeys(MODELS, 1.0),
            )
            wrong_kind = encode_frame(
                gradient_for_losses, encode_tensors(gradients, TensorEncoding())
            )
            bad_losses = [
                (RejectReason.WRONG_SHAPE, losses_frame(to_a1, {**losses, "c1": losses["c1"][:4]})),
                (RejectReason.NOT_FINITE, losses_frame(to_a1, poisoned)),
                (RejectReason.UNKNOWN_TASK, wrong_kind),
            ]
            for reason, payload in bad_losses:
                agents.send("a1", payload)
                wait_until(counted(reason), 60, f"the {reason} rejection")
            agents.send("a0", losses_frame(to_a0, losses))
            agents.send("a0", losses_frame(to_a0, losses))
            wait_until(counted(RejectReason.DUPLICATE), 60, "the duplicate rejection")
            agents.send("a1", losses_frame(to_a1, losses))
            losses_outcome = losses_probe.result(timeout=60)

            # Execute: a gradient probe
            gradient_probe = pool.submit(
                fleet.gradients, 1, [GradientTask(a, MODELS, 8, seed=3) for a in ("a0", "a1")]
            )
            g0, g1 = probe_headers(4)
            assert isinstance(g0, GradientTaskMessage)
            assert isinstance(g1, GradientTaskMessage)
            extra = {**gradients, "c9": gradients["c0"]}
            bad_gradients = [
                (RejectReason.MALFORMED, b"definitely not a frame"),
                (RejectReason.OVERSIZED, b"FFW1" + bytes(MAX_PAYLOAD_BYTES)),
                (RejectReason.SCHEMA, gradient_frame(g1, gradients, num_samples=9)),
                (RejectReason.WRONG_SHAPE, gradient_frame(g1, extra)),
            ]
            times = {RejectReason.WRONG_SHAPE: 2}
            for reason, payload in bad_gradients:
                agents.send("a1", payload)
                wait_until(counted(reason, times.get(reason, 1)), 60, f"the {reason} rejection")
            agents.send("a0", gradient_frame(g0, gradients))
            agents.send("a1", gradient_frame(g1, gradients, num_samples=6))
            gradient_outcome = gradient_probe.result(timeout=60)
        agents.send("a1", gradient_frame(g1, gradients))
        wait_until(counted(RejectReason.LATE), 60, "the late rejection")
    finally:
        agents.stop()

    # Assert: every bad answer was counted under its reason (a probe's sample count is no
    # averaging weight: too_many_samples concerns updates only)
    assert {r: rejected(r) for r in RejectReason} == dict.fromkeys(RejectReason, 1.0) | {
        RejectReason.WRONG_SHAPE: 2.0,
        RejectReason.TOO_MANY_SAMPLES: 0.0,
    }
    assert fleet.answers.connection.handler_errors == 0

    # Assert: the probes returned the good answers, in the tasks' order
    assert losses_outcome.failures == gradient_outcome.failures == ()
    assert [r.client_id for r in losses_outcome.results] == ["a0", "a1"]
    for result in losses_outcome.results:
        assert isinstance(result, LossesResult)
        assert_equal_arrays(result.losses, losses)
    assert [(r.client_id, r.num_samples) for r in gradient_outcome.results] == [
        ("a0", 8),
        ("a1", 6),
    ]
    for g_result in gradient_outcome.results:
        assert isinstance(g_result, GradientResult)
        assert g_result.losses == {"c0": 1.0, "c1": 1.0}
        assert_equal_arrays(g_result.gradients, gradients)


def assert_equal_arrays(got: object, expected: dict[str, FloatArray]) -> None:
    assert isinstance(got, dict)
    assert list(got) == list(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value)
