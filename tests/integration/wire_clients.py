"""Test-side MQTT clients: a recorder of everything on the broker and fake agents.

:class:`Recorder` keeps every message published under the topic root, so a test can wait
for (and inspect) tasks, results, assignments, models and diagnoses exactly as a third
party on the broker sees them. :class:`FakeAgents` plays edge agents on the wire — online
status, answers to tasks — without training, for tests about the coordinator's side of the
protocol. Both use the product's :class:`~faultfleet.wire.mqtt.MqttConnection`; the frame
builders make valid answers and deliberately broken ones.
"""

from __future__ import annotations

import json
import struct
import threading
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from faultfleet.models.weights import parameter_count
from faultfleet.models.zoo import build_model
from faultfleet.types import FloatArray
from faultfleet.wire.codec import (
    MAGIC,
    decode_tensors,
    encode_frame,
    encode_tensors,
    parse_envelope,
    split_frame,
)
from faultfleet.wire.messages import (
    TASK_ADAPTER,
    AgentStatus,
    AnyTaskMessage,
    EvaluateTaskMessage,
    EvaluationMessage,
    FitTaskMessage,
    FitUpdateMessage,
    GradientMessage,
    GradientTaskMessage,
    LossesMessage,
    LossesTaskMessage,
    ModelSpec,
)
from faultfleet.wire.mqtt import Handler, MqttConnection
from faultfleet.wire.settings import BrokerSettings
from faultfleet.wire.topics import Topics

TOPICS = Topics()
ALL_MODELS = f"{TOPICS.root}/clusters/+/model"
ALL_ASSIGNMENTS = f"{TOPICS.root}/agents/+/assignment"
CONNECT_TIMEOUT_S = 30.0


def connect(
    client_id: str,
    settings: BrokerSettings,
    routes: Mapping[str, Handler],
    *,
    persistent_session: bool = False,
    on_connection_change: Callable[[bool], None] | None = None,
) -> MqttConnection:
    """A started connection with ``routes`` (topic filter → handler), subscribed."""
    connection = MqttConnection(
        client_id=client_id,
        settings=settings,
        persistent_session=persistent_session,
        on_connection_change=on_connection_change,
    )
    for topic_filter, handler in routes.items():
        connection.route(topic_filter, handler)
    connection.start()
    if not connection.wait_subscribed(CONNECT_TIMEOUT_S):
        connection.stop()
        raise AssertionError(f"{client_id} could not subscribe to {list(routes)}")
    return connection


@dataclass(frozen=True)
class Seen:
    """One message as the recorder received it."""

    topic: str
    payload: bytes


class Recorder:
    """Every message under the topic root, in arrival order.

    With ``persistent_session`` the broker keeps its subscription while it is away and
    queues what it misses (it must have persisted the session: a broker restart).
    """

    def __init__(self, settings: BrokerSettings, *, persistent_session: bool = False) -> None:
        self._lock = threading.Lock()
        self._messages: list[Seen] = []
        self.connection = connect(
            "test-recorder",
            settings,
            {f"{TOPICS.root}/#": self._keep},
            persistent_session=persistent_session,
        )

    def _keep(self, topic: str, payload: bytes) -> None:
        with self._lock:
            self._messages.append(Seen(topic, payload))

    def on(self, topic_filter: str) -> list[Seen]:
        """Messages whose topic matches ``topic_filter`` (``+`` wildcards allowed)."""
        pattern = topic_filter.split("/")
        with self._lock:
            messages = list(self._messages)
        return [m for m in messages if _matches(pattern, m.topic.split("/"))]

    def tasks(self, agent_id: str) -> list[AnyTaskMessage]:
        """The headers of the tasks sent to ``agent_id``, in order."""
        headers = [
            split_frame(m.payload, max_bytes=len(m.payload))[0]
            for m in self.on(TOPICS.tasks(agent_id))
        ]
        return [parse_envelope(TASK_ADAPTER, header) for header in headers]

    def stop(self) -> None:
        self.connection.stop()


def _matches(pattern: list[str], levels: list[str]) -> bool:
    if len(pattern) != len(levels):
        return False
    return all(p in ("+", level) for p, level in zip(pattern, levels, strict=True))


AnswerPolicy = Callable[[FitTaskMessage], float | None]
"""Seconds a fake agent waits before answering a fit task; None: it never answers."""


def answer_at_once(task: FitTaskMessage) -> float | None:
    """The default policy: every fit task is answered at once."""
    return 0.0


@dataclass(frozen=True)
class ReceivedTask:
    """A task a fake agent received, with its candidate weights (float32)."""

    header: AnyTaskMessage
    weights: dict[str, FloatArray]
    """Every tensor of the body: the models, and a fit task's other proximal targets."""


class FakeAgents:
    """Edge agents played by one connection: online, answering tasks without training.

    A fit task is answered with the task's weights plus a little noise, after the delay
    ``policy`` gives (or never); evaluate tasks are answered at once; probes (losses and
    gradient tasks) are answered with what :meth:`probe_answer` gives: by default nothing
    (they are only recorded). Tests answer by hand with :meth:`fit_answer` and :meth:`send`.

    Parameters
    ----------
    settings : BrokerSettings
    agent_ids : iterable of str
        Announced online (retained status, able to train).
    policy : AnswerPolicy
    like_agents : bool
        Behave like real agents across broker restarts: a persistent session, and the
        online statuses published again on every reconnection.
    """

    def __init__(
        self,
        settings: BrokerSettings,
        agent_ids: Iterable[str],
        policy: AnswerPolicy = answer_at_once,
        *,
        like_agents: bool = False,
    ) -> None:
        self.agent_ids = list(agent_ids)
        self.policy = policy
        self._lock = threading.Lock()
        self.received: list[ReceivedTask] = []
        self._timers: list[threading.Timer] = []
        self._sizes: dict[ModelSpec, int] = {}
        self._started = False
        self.connection = connect(
            "test-fake-agents",
            settings,
            {f"{TOPICS.root}/agents/+/tasks": self._on_task},
            persistent_session=like_agents,
            on_connection_change=self._reconnected if like_agents else None,
        )
        for agent_id in self.agent_ids:
            self.connection.publish_wait(
                TOPICS.agent_status(agent_id), self._status(agent_id), retain=True
            )
        self._started = True

    @staticmethod
    def _status(agent_id: str) -> bytes:
        status = AgentStatus(
            agent_id=agent_id, state="online", can_train=True, num_train_samples=10
        )
        return status.model_dump_json().encode()

    def _reconnected(self, connected: bool) -> None:
        if connected and self._started:  # the first connection announces in __init__
            for agent_id in self.agent_ids:
                self.connection.publish(
                    TOPICS.agent_status(agent_id), self._status(agent_id), retain=True
                )

    def fit_tasks(self, agent_id: str, server_round: int | None = None) -> list[ReceivedTask]:
        """Fit tasks ``agent_id`` received (of ``server_round`` only, if given)."""
        with self._lock:
            return [
                t
                for t in self.received
                if t.header.agent_id == agent_id
                and isinstance(t.header, FitTaskMessage)
                and server_round in (None, t.header.server_round)
            ]

    def _on_task(self, topic: str, payload: bytes) -> None:
        if TOPICS.agent_of(topic) not in self.agent_ids:
            return  # a real agent's task
        header_data, body = split_frame(payload, max_bytes=len(payload))
        header = parse_envelope(TASK_ADAPTER, header_data)
        weights = decode_tensors(
            body,
            header.encoding,
            dict.fromkeys(header.tensor_names(), self._n_params(header.model)),
            max_bytes=2 * len(payload),
        )
        task = ReceivedTask(header, weights)
        with self._lock:
            self.received.append(task)
        if isinstance(header, EvaluateTaskMessage):
            self.send(header.agent_id, evaluation_frame(header))
            return
        if not isinstance(header, FitTaskMessage):
            probe = self.probe_answer(task)
            if probe is not None:
                self.send(header.agent_id, probe)
            return
        delay_s = self.policy(header)
        if delay_s is None:
            return
        answer = self.fit_answer(task)
        if delay_s <= 0:
            self.send(header.agent_id, answer)
            return
        timer = threading.Timer(delay_s, self.send, args=(header.agent_id, answer))
        with self._lock:
            self._timers.append(timer)
        timer.start()

    def probe_answer(self, task: ReceivedTask) -> bytes | None:
        """The answer to a probe (losses or gradient task), sent at once; None: no answer."""
        return None

    def fit_answer(self, task: ReceivedTask) -> bytes:
        """A valid update for ``task``: its weights plus noise of standard deviation 1e-3."""
        assert isinstance(task.header, FitTaskMessage)
        weights = task.weights[task.header.model_keys[0]]
        rng = np.random.default_rng(zlib.crc32(task.header.task_id.encode()))
        noise = rng.normal(0.0, 1e-3, weights.shape).astype(np.float32)
        return fit_frame(task.header, weights + noise)

    def send(self, agent_id: str, payload: bytes) -> None:
        """Publish ``payload`` on ``agent_id``'s results topic."""
        self.connection.publish(TOPICS.results(agent_id), payload)

    def _n_params(self, spec: ModelSpec) -> int:
        if spec not in self._sizes:
            model = build_model(spec.name, tuple(spec.sample_shape), spec.n_classes)
            self._sizes[spec] = parameter_count(model)
        return self._sizes[spec]

    def stop(self) -> None:
        with self._lock:
            timers = list(self._timers)
        for timer in timers:
            timer.cancel()
        self.connection.stop()


def fit_header(task: FitTaskMessage, **changes: Any) -> FitUpdateMessage:
    """The header of a valid update answering ``task``, with ``changes`` applied."""
    fields: dict[str, Any] = {
        "task_id": task.task_id,
        "run_id": task.run_id,
        "server_round": task.server_round,
        "agent_id": task.agent_id,
        "model_key": task.model_keys[0],
        "encoding": task.encoding,
        "num_samples": 10,
        "train_loss": 1.0,
    }
    return FitUpdateMessage(**(fields | changes))


def fit_frame(task: FitTaskMessage, weights: FloatArray, **changes: Any) -> bytes:
    """A frame answering ``task`` with ``weights`` (any length: the receiver checks)."""
    body = encode_tensors({"weights": weights}, task.encoding)
    return encode_frame(fit_header(task, **changes), body)


def raw_frame(header: Mapping[str, Any], body: bytes = b"") -> bytes:
    """A frame with an arbitrary JSON header, bypassing the envelope models' validation."""
    text = json.dumps(header).encode("utf-8")
    return MAGIC + struct.pack(">I", len(text)) + text + body


def evaluation_frame(task: EvaluateTaskMessage) -> bytes:
    """A valid evaluation answering ``task``: accuracy 0.5 on 10 windows."""
    message = EvaluationMessage(
        task_id=task.task_id,
        run_id=task.run_id,
        server_round=task.server_round,
        agent_id=task.agent_id,
        model_key=task.model_keys[0],
        accuracy=0.5,
        loss=1.0,
        num_samples=10,
    )
    return encode_frame(message)


def losses_frame(
    task: LossesTaskMessage, losses: Mapping[str, FloatArray], **changes: Any
) -> bytes:
    """A frame answering ``task`` with ``losses`` (any shapes and keys: the receiver checks)."""
    fields: dict[str, Any] = {
        "task_id": task.task_id,
        "run_id": task.run_id,
        "server_round": task.server_round,
        "agent_id": task.agent_id,
        "num_samples": max(len(v) for v in losses.values()),
    }
    message = LossesMessage(**(fields | changes))
    return encode_frame(message, encode_tensors(losses, message.encoding))


def gradient_frame(
    task: GradientTaskMessage, gradients: Mapping[str, FloatArray], **changes: Any
) -> bytes:
    """A frame answering ``task`` with ``gradients`` (loss 1.0 for each) in float32."""
    fields: dict[str, Any] = {
        "task_id": task.task_id,
        "run_id": task.run_id,
        "server_round": task.server_round,
        "agent_id": task.agent_id,
        "num_samples": task.batch_size,
        "losses": dict.fromkeys(gradients, 1.0),
    }
    message = GradientMessage(**(fields | changes))
    return encode_frame(message, encode_tensors(gradients, message.encoding))
