"""An agent's fault streak, its last diagnosis and the heartbeat that carries them."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

from coordinator.adapters.onnx_export import export_model
from edge_agent.activity import RECONNECT_POLL_S, Activity, FaultStreak
from edge_agent.inference import OnnxDiagnoser
from edge_agent.metrics import AgentMetrics
from faultfleet.models.zoo import build_model
from faultfleet.wire.codec import parse_envelope
from faultfleet.wire.messages import AgentHeartbeat, Diagnosis
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from faultfleet.wire.topics import Topics
from tests.clocks import FakeClock, Wait
from tests.faultfleet.scrape import samples

CLASSES = ("normal", "inner_race", "outer_race")
SHAPE = (1, 1024)
HEARTBEAT = TypeAdapter(AgentHeartbeat)


def diagnosis(class_id: int, probability: float, timestamp: float = 1.0) -> Diagnosis:
    return Diagnosis(
        agent_id="m07",
        window_index=0,
        class_id=class_id,
        class_name=CLASSES[class_id],
        probability=probability,
        model_version=3,
        cluster_id="cluster-1",
        timestamp=timestamp,
    )


def reference_streak(windows: Sequence[tuple[str, float]], bar: float) -> tuple[str | None, int]:
    """The longest run at the end of ``windows`` of one class, each at least ``bar``."""
    if not windows or windows[-1][1] < bar:
        return None, 0
    last = windows[-1][0]
    run = 0
    for name, probability in reversed(windows):
        if name != last or probability < bar:
            break
        run += 1
    return last, run


@given(
    windows=st.lists(
        st.tuples(st.sampled_from(CLASSES), st.floats(0.0, 1.0, allow_nan=False)), max_size=40
    ),
    bar=st.floats(0.0, 1.0, allow_nan=False),
)
def test_the_streak_is_the_run_of_confident_windows_of_one_class_at_the_end(
    windows: list[tuple[str, float]], bar: float
) -> None:
    # Prepare
    streak = FaultStreak(bar)

    # Execute
    for name, probability in windows:
        streak.observe(name, probability)

    # Assert
    assert (streak.class_name, streak.windows) == reference_streak(windows, bar)


def test_a_probability_bar_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r"min_probability=1\.5"):
        FaultStreak(1.5)


def test_observed_diagnoses_set_the_streak_metric_and_the_heartbeat() -> None:
    # Prepare
    metrics = AgentMetrics(class_names=CLASSES)
    diagnoser = OnnxDiagnoser(SHAPE)
    exported = export_model(build_model("compact", SHAPE, len(CLASSES), seed=0), SHAPE)
    diagnoser.load(exported.onnx_bytes, sha256=exported.sha256, version=3, cluster_id="cluster-1")
    activity = Activity("m07", metrics, diagnoser, streak_min_probability=0.8, now=lambda: 50.0)

    # Execute: two confident outer-race windows after a doubtful one
    for observed in (diagnosis(2, 0.5, 10.0), diagnosis(2, 0.9, 11.0), diagnosis(2, 0.95, 12.0)):
        activity.observe(observed)
    heartbeat = activity.heartbeat()

    # Assert
    streaks = {
        dict(labels)["class_name"]: v
        for (name, labels), v in samples(metrics.registry).items()
        if name == "faultfleet_diagnosis_streak_windows"
    }
    assert streaks == {"normal": 0.0, "inner_race": 0.0, "outer_race": 2.0}
    assert (heartbeat.streak_class, heartbeat.streak_windows) == ("outer_race", 2)
    assert heartbeat.timestamp == 50.0
    assert (heartbeat.cluster_id, heartbeat.model_version) == ("cluster-1", 3)
    assert heartbeat.windows_diagnosed == 3
    assert heartbeat.last_diagnosis == diagnosis(2, 0.95, 12.0)


def test_before_any_model_or_window_the_heartbeat_says_so() -> None:
    # Execute
    activity = Activity(
        "m07",
        AgentMetrics(class_names=CLASSES),
        OnnxDiagnoser(SHAPE),
        streak_min_probability=0.9,
        now=lambda: 7.0,
    )
    heartbeat = activity.heartbeat()

    # Assert
    assert heartbeat == AgentHeartbeat(agent_id="m07", timestamp=7.0)


def test_without_a_connection_no_heartbeat_is_sent_and_it_looks_again_every_second() -> None:
    # Prepare: a connection never started is not connected
    stop = threading.Event()

    def stop_after_three(wait: Wait) -> None:
        if len(clock.waits) == 3:
            stop.set()

    clock = FakeClock(on_wait=stop_after_three)
    connection = MqttConnection(client_id="never-started", settings=BrokerSettings())
    activity = Activity(
        "m07",
        AgentMetrics(class_names=CLASSES),
        OnnxDiagnoser(SHAPE),
        streak_min_probability=0.9,
        now=clock.time,
    )

    # Execute
    activity.run(stop, connection, Topics().heartbeat("m07"), interval_s=30.0, clock=clock)

    # Assert
    assert clock.timeouts == [RECONNECT_POLL_S] * 3


def test_heartbeats_switched_off_return_at_once() -> None:
    # Prepare
    clock = FakeClock()
    activity = Activity(
        "m07",
        AgentMetrics(class_names=CLASSES),
        OnnxDiagnoser(SHAPE),
        streak_min_probability=0.9,
        now=clock.time,
    )
    connection = MqttConnection(client_id="off", settings=BrokerSettings())

    # Execute
    activity.run(threading.Event(), connection, "t", interval_s=0.0, clock=clock)

    # Assert
    assert clock.waits == []


def test_heartbeats_reach_the_broker_retained_every_interval(
    broker_settings: BrokerSettings,
) -> None:
    # Prepare: a real broker; the fake clock stops the loop after its third wait
    stop = threading.Event()
    clock = FakeClock(on_wait=lambda wait: stop.set() if len(clock.waits) == 3 else None)
    topic = Topics().heartbeat("m07")
    connection = MqttConnection(client_id="m07-heartbeat", settings=broker_settings)
    activity = Activity(
        "m07",
        AgentMetrics(class_names=CLASSES),
        OnnxDiagnoser(SHAPE),
        streak_min_probability=0.9,
        now=clock.time,
    )
    connection.start()
    assert connection.wait_connected(30.0)

    # Execute
    try:
        activity.run(stop, connection, topic, interval_s=30.0, clock=clock)
    finally:
        connection.stop()
    retained: list[bytes] = []
    arrived = threading.Event()

    def keep(_: str, payload: bytes) -> None:
        retained.append(payload)
        arrived.set()

    reader = MqttConnection(client_id="reader", settings=broker_settings)
    reader.route(topic, keep)
    reader.start()
    try:
        assert arrived.wait(30.0)
    finally:
        reader.stop()

    # Assert: three heartbeats, 30 s apart; the broker kept the last one
    assert clock.timeouts == [30.0, 30.0, 30.0]
    last = parse_envelope(HEARTBEAT, retained[0])
    assert last.agent_id == "m07"
    assert last.timestamp == clock.time()  # the third, sent 60 s after the first
