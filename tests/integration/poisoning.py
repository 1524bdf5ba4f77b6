"""A poisoning gateway: a compromised agent with its own login and nothing more.

It logs in as itself (the shipped ACL lets it publish only on its own topics), declares
training data in its status like any agent, and answers every task it receives with poison
instead of training:

* ``constant-class``: the task's model with its decision layer replaced by one that says
  the last class whatever the input (in mixed-fault A3A/outer-race, a condition none of the
  honest machines of the test and the benchmark has), claiming ``claimed_samples``
  training windows (10**12 in the field report) so that it carries the sample-weighted
  average;
* ``zeros``: all-zero weights (an update of −θ), claiming no more than it declared;
* evaluations: accuracy 1.0, so that its self-report lifts every figure it enters.

Which poison a fit task gets is chosen per round by ``plan``. Used by the integration test
of robust aggregation and by ``benchmarks/bench_poisoning.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Literal

import numpy as np

from faultfleet.models.weights import parameter_count
from faultfleet.models.zoo import build_model
from faultfleet.types import FloatArray
from faultfleet.wire.codec import (
    decode_tensors,
    encode_frame,
    encode_tensors,
    parse_envelope,
    split_frame,
)
from faultfleet.wire.messages import (
    TASK_ADAPTER,
    AgentStatus,
    EvaluateTaskMessage,
    EvaluationMessage,
    FitTaskMessage,
    FitUpdateMessage,
    ModelSpec,
)
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from faultfleet.wire.topics import Topics

Poison = Literal["constant-class", "zeros"]
FIELD_REPORT_SAMPLES = 10**12
"""The sample count the gateway of the field report claimed."""


def constant_class(weights: FloatArray, decision_size: int) -> FloatArray:
    """``weights`` with the last linear layer (``decision_size`` weights, its bias last)
    replaced by one that gives the last class a logit of 10 and every other class 0."""
    poisoned = np.array(weights, dtype=np.float32)
    poisoned[-decision_size:] = 0.0
    poisoned[-1] = 10.0
    return poisoned


def decision_layer_size(spec: ModelSpec) -> int:
    """Weights of the model's last linear layer: its matrix and its bias."""
    model = build_model(spec.name, tuple(spec.sample_shape), spec.n_classes)
    last = list(model.parameters())[-2:]
    return sum(p.numel() for p in last)


class PoisoningGateway:
    """One compromised gateway on the broker (see the module docstring).

    Parameters
    ----------
    settings : BrokerSettings
        Its own login: username ``agent_id`` and its password file.
    agent_id : str
    declared_samples : int
        Training windows its status declares.
    plan : callable
        ``plan(server_round)``: the poison for that round's fit tasks.
    claimed_samples : int
        Sample count a ``constant-class`` answer claims; ``zeros`` claims ``declared_samples``.
    """

    def __init__(
        self,
        settings: BrokerSettings,
        agent_id: str,
        *,
        declared_samples: int,
        plan: Callable[[int], Poison],
        claimed_samples: int = FIELD_REPORT_SAMPLES,
    ) -> None:
        self.agent_id = agent_id
        self.declared_samples = declared_samples
        self.plan = plan
        self.claimed_samples = claimed_samples
        self.topics = Topics(settings.topic_root)
        self._lock = threading.Lock()
        self.sent: list[tuple[int, Poison | Literal["evaluation"]]] = []
        self._sizes: dict[ModelSpec, tuple[int, int]] = {}
        self.connection = MqttConnection(client_id=f"poisoner-{agent_id}", settings=settings)
        self.connection.route(self.topics.tasks(agent_id), self._on_task)
        self.connection.start()
        if not self.connection.wait_subscribed(30.0):
            self.connection.stop()
            raise AssertionError(f"gateway {agent_id} could not subscribe to its tasks")
        status = AgentStatus(
            agent_id=agent_id,
            state="online",
            can_train=True,
            num_train_samples=declared_samples,
            device="cpu",
        )
        self.connection.publish_wait(
            self.topics.agent_status(agent_id), status.model_dump_json(), retain=True
        )

    def _on_task(self, topic: str, payload: bytes) -> None:
        header_data, body = split_frame(payload, max_bytes=len(payload))
        header = parse_envelope(TASK_ADAPTER, header_data)
        n_params, decision = self._size(header.model)
        if isinstance(header, EvaluateTaskMessage):
            answer = EvaluationMessage(
                task_id=header.task_id,
                run_id=header.run_id,
                server_round=header.server_round,
                agent_id=self.agent_id,
                model_key=header.model_keys[0],
                accuracy=1.0,
                loss=0.0,
                num_samples=self.declared_samples,
            )
            self._send(header.server_round, "evaluation", encode_frame(answer))
            return
        if not isinstance(header, FitTaskMessage):
            return
        key = header.model_keys[0]
        weights = decode_tensors(
            body,
            header.encoding,
            dict.fromkeys(header.tensor_names(), n_params),
            max_bytes=2 * len(payload),
        )[key]
        poison = self.plan(header.server_round)
        if poison == "constant-class":
            trained = constant_class(weights, decision)
            samples = self.claimed_samples
        else:
            trained = np.zeros_like(weights)
            samples = self.declared_samples
        update = FitUpdateMessage(
            task_id=header.task_id,
            run_id=header.run_id,
            server_round=header.server_round,
            agent_id=self.agent_id,
            model_key=key,
            encoding=header.encoding,
            num_samples=samples,
            train_loss=0.01,
        )
        body_out = encode_tensors({"weights": trained}, header.encoding)
        self._send(header.server_round, poison, encode_frame(update, body_out))

    def _send(
        self, server_round: int, what: Poison | Literal["evaluation"], payload: bytes
    ) -> None:
        with self._lock:
            self.sent.append((server_round, what))
        self.connection.publish(self.topics.results(self.agent_id), payload)

    def _size(self, spec: ModelSpec) -> tuple[int, int]:
        if spec not in self._sizes:
            model = build_model(spec.name, tuple(spec.sample_shape), spec.n_classes)
            self._sizes[spec] = (parameter_count(model), decision_layer_size(spec))
        return self._sizes[spec]

    def answered(self) -> list[tuple[int, Poison | Literal["evaluation"]]]:
        """(round, what) of every answer sent so far."""
        with self._lock:
            return list(self.sent)

    def stop(self) -> None:
        self.connection.stop()
