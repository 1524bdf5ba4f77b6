"""Message envelopes of the wire protocol (schema version 5).

Every message is a pydantic model with ``extra="forbid"``, ``frozen=True``, a
``schema_version`` and a ``kind`` that tells the variants apart. Presence, assignments and
diagnoses travel as plain JSON, readable with ``mosquitto_sub``; tasks, results and models
travel as frames (:mod:`faultfleet.wire.codec`) whose header is one of these envelopes and
whose body holds the tensors (safetensors) or the ONNX model.

A message from a newer (or older) schema version is refused with a message naming both
versions, so mixed deployments fail loudly instead of misreading each other. Version 2 added
proximal terms to fit tasks and the probe tasks (losses, gradient) with their answers;
version 3 signs the cluster models and assignments: both travel inside a
:class:`SignedMessage` (:mod:`faultfleet.wire.signing`); version 4 gives tasks their
deadline as a duration (``deadline_s``) and the coordinator's clock at sending
(``issued_at``) instead of an instant, so an agent whose clock is off still meets it;
version 5 adds the labelled windows to the agents' status and the training campaign,
recent promotions and placements of joining machines to the coordinator's
(:mod:`faultfleet.wire.campaign_messages`).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from faultfleet.tasks import ModelPart, Split, TrainConfig
from faultfleet.wire.campaign_messages import (
    MAX_PLACEMENTS,
    MAX_RECENT_PROMOTIONS,
    CampaignNote,
    PlacementNote,
    PromotionNote,
)
from faultfleet.wire.topics import NAME_PATTERN

SCHEMA_VERSION: Literal[5] = 5

Name = Annotated[str, Field(pattern=f"^{NAME_PATTERN}$")]
"""An agent or cluster id: usable as one topic level."""
Digest = Annotated[str, Field(pattern="^[0-9a-f]{64}$")]
NonNegative = Annotated[int, Field(ge=0)]
Positive = Annotated[int, Field(ge=1)]
Round = Annotated[int, Field(ge=1)]
DType = Literal["float32", "float16"]
Compression = Literal["none", "zlib"]


class Envelope(BaseModel):
    """Common base: strict, immutable, versioned.

    NaN and infinities are refused when a message is built: JSON cannot carry them (pydantic
    would write ``null``, which the receiver then rejects as a schema error).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    schema_version: Literal[5] = SCHEMA_VERSION


class TensorEncoding(BaseModel):
    """How a frame's tensors are stored: float32 or float16, optionally zlib-compressed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dtype: DType = "float32"
    compression: Compression = "none"


class ModelSpec(BaseModel):
    """The architecture every task's weights belong to (``faultfleet.models.zoo``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    sample_shape: tuple[Annotated[int, Field(ge=1)], ...]
    n_classes: Annotated[int, Field(ge=2)]


class TrainSpec(BaseModel):
    """Wire form of :class:`faultfleet.tasks.TrainConfig`."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    optimizer: Literal["sgd", "adam"]
    learning_rate: Annotated[float, Field(gt=0)]
    epochs: Annotated[int, Field(ge=1)]
    batch_size: Annotated[int, Field(ge=1)]
    momentum: Annotated[float, Field(ge=0, lt=1)] = 0.0

    @classmethod
    def of(cls, config: TrainConfig) -> TrainSpec:
        return cls(
            optimizer=config.optimizer,
            learning_rate=config.learning_rate,
            epochs=config.epochs,
            batch_size=config.batch_size,
            momentum=config.momentum,
        )

    def config(self) -> TrainConfig:
        return TrainConfig(
            optimizer=self.optimizer,
            learning_rate=self.learning_rate,
            epochs=self.epochs,
            batch_size=self.batch_size,
            momentum=self.momentum,
        )


# -- presence --------------------------------------------------------------------------------


class AgentStatus(Envelope):
    """Retained on ``agents/{id}/status``; the broker publishes the offline form as last will."""

    kind: Literal["agent_status"] = "agent_status"
    agent_id: Name
    state: Literal["online", "offline", "retired"]
    """``retired``: taken out of service for good (``faultfleet agent --retire``); a
    coordinator whose strategy takes leaving agents removes it from the federation."""
    timestamp: float = 0.0
    can_train: bool = False
    """The agent holds labelled training data (a diagnosis-only agent does not)."""
    num_train_samples: NonNegative = 0
    labelled_windows: NonNegative = 0
    """Labelled windows the agent holds for its next campaign (training, validation and test
    splits of its recordings and of its labelled live windows), newly labelled ones included."""
    device: str = ""
    model_version: int | None = None
    software_version: str = ""


class CoordinatorStatus(Envelope):
    """Retained on ``coordinator/status``."""

    kind: Literal["coordinator_status"] = "coordinator_status"
    state: Literal["online", "offline"]
    run_id: str = ""
    server_round: NonNegative = 0
    strategy: str = ""
    timestamp: float = 0.0
    campaign: CampaignNote | None = None
    """The running campaign, or the last one between campaigns; None before the first."""
    recent_promotions: tuple[PromotionNote, ...] = Field(
        default=(), max_length=MAX_RECENT_PROMOTIONS
    )
    """The newest decisions about cluster model versions, oldest first."""
    placements: tuple[PlacementNote, ...] = Field(default=(), max_length=MAX_PLACEMENTS)
    """Machines placed on a cluster when they joined: the unverified, then the newest."""


# -- tasks and results -----------------------------------------------------------------------


class _Task(Envelope):
    task_id: str
    run_id: str
    server_round: NonNegative
    agent_id: Name
    model: ModelSpec
    model_keys: tuple[str, ...] = Field(min_length=1)
    """The models of the task, distinct; each is a flat weight vector in the frame's body,
    named by its key."""
    encoding: TensorEncoding = TensorEncoding()
    """How the frame's tensors are encoded, and how the agent should encode its answer."""
    issued_at: float
    """Unix time on the coordinator's clock when the task was sent. An agent compares it
    with its own clock to report the skew between the two; it never judges the deadline by
    it."""
    deadline_s: Annotated[float, Field(gt=0)]
    """Seconds the coordinator waits for the answer. An agent counts them on its own
    monotonic clock from the task's receipt."""

    @field_validator("model_keys")
    @classmethod
    def _distinct_keys(cls, keys: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(keys)) != len(keys) or not all(keys):
            raise ValueError(f"model_keys must be distinct non-empty names, got {list(keys)}")
        return keys


class ProximalSpec(BaseModel):
    """Wire form of :class:`faultfleet.tasks.Proximal`: its target is a tensor of the frame."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    tensor: Annotated[str, Field(min_length=1)]
    """Name of the body tensor holding the target weights: one of the task's ``model_keys``
    (a target equal to a candidate model travels once) or a tensor of its own."""
    strength: Annotated[float, Field(ge=0)]
    part: ModelPart = "all"


class FitTaskMessage(_Task):
    """Train one of ``model_keys`` (lowest training loss among several) and send the weights.

    The body holds one tensor per model key and one per proximal target that is not a model
    key (:meth:`tensor_names`).
    """

    kind: Literal["fit"] = "fit"
    train: TrainSpec
    seed: NonNegative
    proximal: tuple[ProximalSpec, ...] = ()
    """Terms added to the local objective (see :mod:`faultfleet.tasks`)."""

    def tensor_names(self) -> tuple[str, ...]:
        """Names of the body's tensors: the model keys, then the other proximal targets."""
        targets = (p.tensor for p in self.proximal)
        return tuple(dict.fromkeys((*self.model_keys, *targets)))


class EvaluateTaskMessage(_Task):
    """Evaluate one of ``model_keys`` on a split of the agent's data."""

    kind: Literal["evaluate"] = "evaluate"
    split: Split = Split.TEST

    def tensor_names(self) -> tuple[str, ...]:
        return self.model_keys


class LossesTaskMessage(_Task):
    """Cross-entropy of every model of ``model_keys`` on a split: per sample, or the mean."""

    kind: Literal["losses"] = "losses"
    split: Split = Split.VAL
    per_sample: bool = True

    def tensor_names(self) -> tuple[str, ...]:
        return self.model_keys


class GradientTaskMessage(_Task):
    """Mean loss and gradient of every model of ``model_keys`` on one mini-batch of
    ``batch_size`` training windows drawn with ``seed`` (the same batch for every model)."""

    kind: Literal["gradient"] = "gradient"
    batch_size: Positive
    seed: NonNegative

    def tensor_names(self) -> tuple[str, ...]:
        return self.model_keys


class _Answer(Envelope):
    task_id: str
    run_id: str
    server_round: NonNegative
    agent_id: Name


class FitUpdateMessage(_Answer):
    """The trained weights θ_i (tensor ``weights``) of model ``model_key``."""

    kind: Literal["fit_update"] = "fit_update"
    model_key: str
    encoding: TensorEncoding = TensorEncoding()
    num_samples: Annotated[int, Field(ge=1)]
    train_loss: float
    train_seconds: Annotated[float, Field(ge=0)] = 0.0

    @field_validator("train_loss")
    @classmethod
    def _finite_loss(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError(f"train_loss must be finite, got {value}")
        return value


class EvaluationMessage(_Answer):
    """Accuracy and mean loss of ``model_key`` on ``num_samples`` samples."""

    kind: Literal["evaluation"] = "evaluation"
    model_key: str
    accuracy: Annotated[float, Field(ge=0, le=1)]
    loss: float
    num_samples: NonNegative


class LossesMessage(_Answer):
    """Losses of every model the task sent, on ``num_samples`` samples of its split.

    The body holds one float tensor per model key: every sample's cross-entropy, shape
    (num_samples,), in the split's order; or shape (1,), their mean, if the task asked for
    ``per_sample = false``.
    """

    kind: Literal["losses_result"] = "losses_result"
    encoding: TensorEncoding = TensorEncoding()
    num_samples: Positive


class GradientMessage(_Answer):
    """Mean loss and gradient of every model the task sent, on one mini-batch.

    The body holds one tensor per model key, the gradient w.r.t. the flat weights, shape
    (n_params,). A gradient is sent divided by ``2 ** exponents[key]`` (0 when absent) and
    the receiver multiplies it back, exactly: in float16 the scale puts the largest entry
    just below 2**15, so that small gradients keep float16's 11 significant bits instead of
    sinking into its subnormal range (:func:`faultfleet.wire.codec.scale_exponents`).
    """

    kind: Literal["gradient_result"] = "gradient_result"
    encoding: TensorEncoding = TensorEncoding()
    num_samples: Positive
    """Samples of the mini-batch: the task's batch size, clipped to the training data."""
    losses: dict[str, float]
    """Mean cross-entropy of every model on the mini-batch."""
    exponents: dict[str, Annotated[int, Field(ge=-300, le=300)]] = Field(default_factory=dict)


class TaskFailedMessage(_Answer):
    """The agent could not do the task (no training data, an error); ``reason`` says why."""

    kind: Literal["task_failed"] = "task_failed"
    reason: Annotated[str, Field(max_length=2000)]


AnyTaskMessage = FitTaskMessage | EvaluateTaskMessage | LossesTaskMessage | GradientTaskMessage
AnyAnswerMessage = (
    FitUpdateMessage | EvaluationMessage | LossesMessage | GradientMessage | TaskFailedMessage
)
TaskMessage = Annotated[AnyTaskMessage, Field(discriminator="kind")]
AnswerMessage = Annotated[AnyAnswerMessage, Field(discriminator="kind")]
TASK_ADAPTER: TypeAdapter[AnyTaskMessage] = TypeAdapter(TaskMessage)
ANSWER_ADAPTER: TypeAdapter[AnyAnswerMessage] = TypeAdapter(AnswerMessage)


# -- models and diagnoses --------------------------------------------------------------------

MAX_SIGNED_MESSAGE_CHARS = 65_536
"""Longest signed message; an announcement with a few hundred class names fits."""


class SignedMessage(Envelope):
    """A coordinator message with its Ed25519 signature (:mod:`faultfleet.wire.signing`).

    Retained on ``agents/{id}/assignment`` (``message`` holds a :class:`ClusterAssignment`)
    and the header of the frame on ``clusters/{cluster}/model`` (``message`` holds a
    :class:`ModelAnnouncement`, the frame's body the ONNX file).
    """

    kind: Literal["signed"] = "signed"
    key_id: Annotated[str, Field(pattern="^[0-9a-f]{16}$")]
    """Which coordinator key signed: the first 16 hex digits of its public key's SHA-256."""
    signature: Annotated[str, Field(pattern="^[A-Za-z0-9+/]{86}==$")]
    """Base64 of the 64-byte Ed25519 signature of the context prefix and ``message``."""
    message: Annotated[str, Field(min_length=2, max_length=MAX_SIGNED_MESSAGE_CHARS)]
    """The signed message's JSON, exactly the text that was signed."""


class ModelAnnouncement(Envelope):
    """What a cluster's model frame is; signed, inside the frame's :class:`SignedMessage`."""

    kind: Literal["model"] = "model"
    cluster_id: Name
    version: NonNegative
    """Increases with every model the coordinator publishes in a run."""
    sha256: Digest
    size_bytes: NonNegative
    run_id: str
    server_round: NonNegative
    model: ModelSpec
    class_names: tuple[str, ...]
    members: NonNegative
    max_abs_diff: float
    """ONNX Runtime against torch on the coordinator's probe windows (≤ 1e-5)."""
    created_at: float


class ClusterAssignment(Envelope):
    """Which cluster's model serves the agent; signed, inside a :class:`SignedMessage`."""

    kind: Literal["assignment"] = "assignment"
    agent_id: Name
    cluster_id: Name
    model_version: NonNegative
    sha256: Digest
    run_id: str
    server_round: NonNegative
    timestamp: float


class Diagnosis(Envelope):
    """One diagnosed window, published on ``agents/{id}/diagnoses``."""

    kind: Literal["diagnosis"] = "diagnosis"
    agent_id: Name
    window_index: NonNegative
    class_id: NonNegative
    class_name: str
    probability: Annotated[float, Field(ge=0, le=1)]
    model_version: NonNegative
    cluster_id: Name
    timestamp: float
    """Unix time the window was captured."""
    latency_s: Annotated[float, Field(ge=0)] = 0.0
    true_label: int | None = None
    """Known only for simulated machines and labelled recordings."""
    origin: str = ""


class AgentHeartbeat(Envelope):
    """Retained on ``agents/{id}/heartbeat``, every ``diagnosis.heartbeat_s`` while connected.

    Kept apart from :class:`AgentStatus`: the broker replaces the retained status with the
    agent's last will when it vanishes, but leaves this one, so that an agent that died
    still shows when it was last seen and what it last diagnosed (``faultfleet status``).
    """

    kind: Literal["agent_heartbeat"] = "agent_heartbeat"
    agent_id: Name
    timestamp: float
    """Unix time the heartbeat was sent: when the agent was last seen alive."""
    cluster_id: Name | None = None
    """Cluster of the model the agent diagnoses with; None before its first model."""
    model_version: NonNegative | None = None
    """Version of the model the agent diagnoses with (the serving version)."""
    windows_diagnosed: NonNegative = 0
    """Windows diagnosed since the agent started."""
    last_diagnosis: Diagnosis | None = None
    streak_class: str | None = None
    """Class of the current streak: the most recent windows all diagnosed as it with at least
    ``diagnosis.streak_min_probability``; None when the last window broke every streak."""
    streak_windows: NonNegative = 0
    """Length of that streak, windows."""
