"""Task frames of every kind, as :class:`coordinator.adapters.mqtt_fleet.MqttFleet` publishes them.

A frame's header is one of the task envelopes of :mod:`faultfleet.wire.messages` and its
body the task's weights in the run's tensor encoding: one tensor per model key, plus, for a
fit task, one per proximal target that is not already one of its models (a target that *is*
a candidate model, like FedAC's pull towards the model being trained, travels once).

Task ids are deterministic (:func:`coordinator.adapters.round_tasks.task_id`): they hash the run,
the round, the agent, the header without its id, issue time and deadline, and the body. An
agent with several tasks in one round — several fit tasks for different models, say —
therefore gets one id per task, and a replayed round after a restart gets the same ids again.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coordinator.adapters.round_tasks import Pending, task_id
from faultfleet.tasks import EvaluateTask, FitTask, GradientTask, LossesTask, Proximal
from faultfleet.types import FloatArray
from faultfleet.wire.codec import encode_tensors
from faultfleet.wire.messages import (
    AnyTaskMessage,
    EvaluateTaskMessage,
    FitTaskMessage,
    GradientTaskMessage,
    LossesTaskMessage,
    ModelSpec,
    ProximalSpec,
    TensorEncoding,
    TrainSpec,
)

Frame = tuple[Pending, AnyTaskMessage, bytes]
"""A task's bookkeeping entry, its header and its encoded tensor body."""


@dataclass
class _Batch:
    """The frames of one dispatch being built: shared bodies and the ids given so far."""

    issued_at: float
    bodies: dict[tuple[tuple[str, int], ...], tuple[bytes, str]] = field(default_factory=dict)
    """Encoded bodies and their SHA-256 by the (name, array) pairs sent: the tasks of a round
    mostly share their models, which are then encoded and hashed once."""
    occurrences: dict[str, int] = field(default_factory=dict)


class TaskFrames:
    """Builds the task frames of one run.

    Parameters
    ----------
    run_id : str
    model : ModelSpec
    encoding : TensorEncoding
        Encoding of the weights sent, and of the answers asked for.
    deadline_s : float
        Every task's ``deadline_s``: seconds the answers are waited for.
    clock : callable
        Unix time in seconds: every task's ``issued_at``.
    """

    def __init__(
        self,
        *,
        run_id: str,
        model: ModelSpec,
        encoding: TensorEncoding,
        deadline_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.run_id = run_id
        self.model = model
        self.encoding = encoding
        self.deadline_s = deadline_s
        self.clock = clock

    def fit(self, server_round: int, tasks: Sequence[FitTask]) -> list[Frame]:
        """One frame per fit task, with its proximal targets (see the module docstring)."""
        batch = self._batch()
        frames = []
        for task in tasks:
            tensors, proximal = proximal_tensors(task.models, task.proximal)
            header = FitTaskMessage(
                **self._common(server_round, task.client_id, task.models, batch),
                train=TrainSpec.of(task.config),
                seed=task.seed,
                proximal=proximal,
            )
            frames.append(self._frame(batch, header, task.models, tensors))
        return frames

    def evaluate(self, server_round: int, tasks: Sequence[EvaluateTask]) -> list[Frame]:
        """One frame per evaluate task."""
        batch = self._batch()
        return [
            self._frame(
                batch,
                EvaluateTaskMessage(
                    **self._common(server_round, task.client_id, task.models, batch),
                    split=task.split,
                ),
                task.models,
            )
            for task in tasks
        ]

    def losses(self, server_round: int, tasks: Sequence[LossesTask]) -> list[Frame]:
        """One frame per losses probe."""
        batch = self._batch()
        return [
            self._frame(
                batch,
                LossesTaskMessage(
                    **self._common(server_round, task.client_id, task.models, batch),
                    split=task.split,
                    per_sample=task.per_sample,
                ),
                task.models,
            )
            for task in tasks
        ]

    def gradients(self, server_round: int, tasks: Sequence[GradientTask]) -> list[Frame]:
        """One frame per gradient probe."""
        batch = self._batch()
        return [
            self._frame(
                batch,
                GradientTaskMessage(
                    **self._common(server_round, task.client_id, task.models, batch),
                    batch_size=task.batch_size,
                    seed=task.seed,
                ),
                task.models,
            )
            for task in tasks
        ]

    def _batch(self) -> _Batch:
        return _Batch(issued_at=self.clock())

    def _common(
        self, server_round: int, agent_id: str, models: Mapping[str, FloatArray], batch: _Batch
    ) -> dict[str, Any]:
        """The header fields every task kind shares; the id is filled in by :meth:`_frame`."""
        return {
            "task_id": "",
            "run_id": self.run_id,
            "server_round": server_round,
            "agent_id": agent_id,
            "model": self.model,
            "model_keys": tuple(models),
            "encoding": self.encoding,
            "issued_at": batch.issued_at,
            "deadline_s": self.deadline_s,
        }

    def _frame(
        self,
        batch: _Batch,
        header: AnyTaskMessage,
        models: Mapping[str, FloatArray],
        tensors: Mapping[str, FloatArray] | None = None,
    ) -> Frame:
        tensors = models if tensors is None else tensors
        sent = tuple((name, id(array)) for name, array in tensors.items())
        if sent not in batch.bodies:
            body = encode_tensors(tensors, self.encoding)
            batch.bodies[sent] = (body, hashlib.sha256(body).hexdigest())
        body, body_sha256 = batch.bodies[sent]
        label = header.model_dump_json(exclude={"task_id", "issued_at", "deadline_s"})
        first = task_id(self.run_id, header.server_round, header.agent_id, label, body_sha256, 0)
        occurrence = batch.occurrences.get(first, 0)
        batch.occurrences[first] = occurrence + 1
        tid = first
        if occurrence:
            tid = task_id(
                self.run_id, header.server_round, header.agent_id, label, body_sha256, occurrence
            )
        header = header.model_copy(update={"task_id": tid})
        return Pending(tid, header.agent_id, header.server_round, models, header), header, body


def proximal_tensors(
    models: Mapping[str, FloatArray], terms: Sequence[Proximal]
) -> tuple[dict[str, FloatArray], tuple[ProximalSpec, ...]]:
    """The tensors of a fit task's body and the wire form of its proximal terms.

    A target that is one of ``models`` (the same array) or of an earlier term refers to
    that tensor; any other target becomes a tensor ``proximal-<i>`` (``i`` the term's
    position; prefixed with ``_`` until it differs from every model key).
    """
    tensors = dict(models)
    specs = []
    for position, term in enumerate(terms):
        name = next((n for n, array in tensors.items() if array is term.target), None)
        if name is None:
            name = f"proximal-{position}"
            while name in tensors:
                name = f"_{name}"
            tensors[name] = term.target
        specs.append(ProximalSpec(tensor=name, strength=term.strength, part=term.part))
    return tensors, tuple(specs)
