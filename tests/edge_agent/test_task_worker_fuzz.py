"""Property-based fuzzing of the agent's task worker: whatever task frame arrives, the
worker answers it once or counts its refusal, and no exception reaches its loop.

Frames are built from task headers of every kind (:mod:`tests.faultfleet.wire.envelope_data`),
valid or broken in one field, often addressed to this agent and naming its model, with its
weights, no body or any bytes as body; plus nesting bombs and random bytes. The agent allows
3 epochs here, so a header asking for more is refused rather than run.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from pydantic import BaseModel

from edge_agent.metrics import AgentMetrics
from edge_agent.supervision import ErrorReport
from edge_agent.task_runner import TaskLimits, TaskRunner
from edge_agent.task_worker import ReceivedTask, TaskWorker
from faultfleet.wire.codec import MAGIC, encode_tensors, parse_envelope, split_frame
from faultfleet.wire.messages import (
    ANSWER_ADAPTER,
    EvaluateTaskMessage,
    FitTaskMessage,
    GradientTaskMessage,
    LossesTaskMessage,
    TensorEncoding,
)
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from tests.clocks import FakeClock
from tests.edge_agent.task_frames import CPU, LIMIT, MODEL, NOW, client, initial_weights
from tests.faultfleet.scrape import value
from tests.faultfleet.wire.envelope_data import mutated, valid_data

TASKS: list[type[BaseModel]] = [
    FitTaskMessage,
    EvaluateTaskMessage,
    LossesTaskMessage,
    GradientTaskMessage,
]
WEIGHTS = encode_tensors({"cluster-0": initial_weights(0)}, TensorEncoding())
OURS = {
    "agent_id": "m07",
    "model": MODEL.model_dump(mode="json"),
    "model_keys": ["cluster-0"],
    "issued_at": NOW,
    "deadline_s": 60.0,
}


class RecordingConnection(MqttConnection):
    """An unstarted connection that keeps what is published instead of sending it."""

    def __init__(self) -> None:
        super().__init__(client_id="test-m07", settings=BrokerSettings())
        self.sent: list[bytes] = []

    def publish(
        self, topic: str, payload: bytes | str, *, retain: bool = False, qos: int = 1
    ) -> int:
        data = payload.encode() if isinstance(payload, str) else payload
        self.sent.append(data)
        return len(data)


class Agent:
    """A task worker on :func:`tests.edge_agent.task_frames.client`'s data."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.metrics = AgentMetrics(CollectorRegistry())
        self.connection = RecordingConnection()
        runner = TaskRunner(
            "m07",
            client(),
            CPU,
            max_payload_bytes=LIMIT,
            clock=self.clock,
            limits=TaskLimits(max_epochs=3),
        )
        self.worker = TaskWorker(
            runner,
            self.connection,
            "results",
            self.metrics,
            ErrorReport("m07", self.metrics.thread_error),
            self.clock,
            max_queued=4,
            clock_skew_warn_s=30.0,
        )

    def rejected(self) -> float:
        return sum(
            value(self.metrics.registry, "faultfleet_tasks_rejected_total", reason=reason)
            for reason in ("malformed", "oversized", "schema")
        )

    def errors(self) -> float:
        return value(self.metrics.registry, "faultfleet_thread_errors_total", thread="tasks")

    def take(self, payload: bytes) -> tuple[int, float, float]:
        """Answers published, refusals counted and exceptions caught for ``payload``."""
        sent, rejected, errors = len(self.connection.sent), self.rejected(), self.errors()
        self.worker.answer(ReceivedTask(payload, self.clock.monotonic(), self.clock.time()))
        return (
            len(self.connection.sent) - sent,
            self.rejected() - rejected,
            self.errors() - errors,
        )


AGENT = Agent()


def frame_of(header: Any, body: bytes) -> bytes:
    text = json.dumps(header).encode()
    return MAGIC + struct.pack(">I", len(text)) + text + body


def frame_of_text(text: bytes) -> bytes:
    return MAGIC + struct.pack(">I", len(text)) + text


@st.composite
def task_headers(draw: st.DrawFn) -> Any:
    """A task header of any kind, valid or broken, often this agent's with its model."""
    model = draw(st.sampled_from(TASKS))
    fields: Any = draw(mutated(model) if draw(st.booleans()) else valid_data(model))
    if isinstance(fields, dict) and draw(st.booleans()):
        fields = {**fields, **OURS}
    return fields


@given(header=task_headers(), body=st.one_of(st.just(WEIGHTS), st.binary(max_size=256)))
def test_any_task_frame_is_answered_once_or_refused_once(header: Any, body: bytes) -> None:
    # Execute
    answers, refusals, errors = AGENT.take(frame_of(header, body))

    # Assert: one outcome, and nothing reached the worker's loop
    assert (answers, refusals) in ((1, 0), (0, 1))
    if answers:
        answer = AGENT.connection.sent[-1]
        message = parse_envelope(ANSWER_ADAPTER, split_frame(answer, max_bytes=LIMIT)[0])
        assert message.task_id == header["task_id"]
        assert message.agent_id == "m07"
    assert errors == 0


@given(
    payload=st.one_of(
        st.binary(max_size=512),
        st.integers(1, 200_000).map(
            lambda depth: frame_of_text(b'{"a":' * depth + b"0" + b"}" * depth)
        ),
        st.integers(1, 400_000).map(lambda n: MAGIC + struct.pack(">I", n) + b"[" * n),
    )
)
def test_bombs_and_noise_are_counted_refusals(payload: bytes) -> None:
    answers, refusals, errors = AGENT.take(payload)

    assert (answers, refusals, errors) == (0, 1, 0)
