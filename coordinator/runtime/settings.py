"""Settings of ``faultfleet coordinator``: a TOML file plus ``FAULTFLEET_COORDINATOR_*`` overrides.

See ``deploy/config/coordinator.toml`` for a commented example. Nested keys are overridden
with a double underscore: ``FAULTFLEET_COORDINATOR_RUN__ROUNDS=20``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from coordinator.runtime.ingest_settings import IngestSettings, check_ingest_strategy
from coordinator.strategies.registry import STRATEGIES, make_strategy
from coordinator.strategies.robust import DEFAULT_POLICY, AggregationPolicy
from faultfleet.errors import FaultfleetError
from faultfleet.models.zoo import MODEL_NAMES
from faultfleet.tasks import TrainConfig
from faultfleet.wire.messages import TensorEncoding
from faultfleet.wire.settings import BrokerSettings, FileSettings, MetricsSettings
from signal_pipeline.scenarios import MIXED_FAULT_CLASS_NAMES

Positive = Annotated[int, Field(ge=1)]


class RunSettings(BaseModel):
    """The federated run: strategy, model, rounds, participation and deadlines."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    strategy: str = "flacc"
    strategy_options: dict[str, Any] = Field(default_factory=dict)
    model: str = "compact"
    sample_shape: tuple[Positive, ...] = (1, 1024)
    class_names: tuple[str, ...] = MIXED_FAULT_CLASS_NAMES
    rounds: Positive = 100
    """Rounds of the first campaign, at the first start (``[campaigns] rounds``: the later)."""
    fraction: Annotated[float, Field(gt=0, le=1)] = 0.25
    seed: int = 0
    min_agents: Positive = 2
    """Agents that must be online (and able to train) before the first round."""
    round_deadline_s: Annotated[float, Field(gt=0)] = 120.0
    min_quorum: Positive = 1
    """Updates a round needs; with fewer by the deadline the round is tried again."""
    retry_wait_s: Annotated[float, Field(ge=0)] = 10.0
    """Pause before trying a round again that missed its quorum."""
    eval_every: Positive = 10
    publish_every: Positive = 10
    """Export and publish the cluster models every this many rounds (and after the last)."""

    @field_validator("strategy")
    @classmethod
    def _known_strategy(cls, value: str) -> str:
        if value not in STRATEGIES:
            raise ValueError(f"unknown strategy {value!r}; choose one of {', '.join(STRATEGIES)}")
        return value

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value not in MODEL_NAMES:
            raise ValueError(f"unknown model {value!r}; choose one of {', '.join(MODEL_NAMES)}")
        return value

    @field_validator("class_names")
    @classmethod
    def _enough_classes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(value) < 2:
            raise ValueError("class_names must name at least 2 classes")
        return value

    @model_validator(mode="after")
    def _strategy_takes_its_options(self) -> RunSettings:
        """Build the strategy once, so a misspelt or ill-typed option stops the coordinator
        at start, not when the first agents come online."""
        try:
            make_strategy(self.strategy, fraction=self.fraction, options=self.strategy_options)
        except (FaultfleetError, TypeError, ValueError) as error:
            raise ValueError(f"strategy_options for {self.strategy!r}: {error}") from None
        return self


class TrainSettings(BaseModel):
    """Local training sent with every fit task (FLACC §VI defaults)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    optimizer: Literal["sgd", "adam"] = "adam"
    learning_rate: Annotated[float, Field(gt=0)] = 5e-4
    epochs: Positive = 5
    batch_size: Positive = 32
    momentum: Annotated[float, Field(ge=0, lt=1)] = 0.0

    def config(self) -> TrainConfig:
        return TrainConfig(**self.model_dump())


class ModelsSettings(BaseModel):
    """The model registry and the promotion gate (docs/runtime.md, "Model registry")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    promotion_margin: Annotated[float, Field(ge=0, le=1)] = 0.02
    """A new version is published only if its mean validation accuracy over the cluster's
    agents is at most this much (a ratio) below the serving version's."""
    keep_versions: Positive = 20
    """Versions kept per cluster; serving, pinned and restored-from versions always are."""
    request_poll_s: Annotated[float, Field(gt=0)] = 5.0
    """How often a coordinator between campaigns looks for pins, rollbacks, campaign
    requests, the schedule and new labelled windows, seconds."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|min|h|d|w)?\s*$")
_UNIT_S = {"s": 1.0, "min": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}


def parse_duration(value: str | float) -> float:
    """Seconds from ``"90s"``, ``"30min"``, ``"12h"``, ``"7d"``, ``"2w"`` or a number of seconds.

    Raises
    ------
    ValueError
        Not a positive duration; the message shows the forms accepted.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(value)
        if match is None:
            raise ValueError(
                f'{value!r} is not a duration; write e.g. "7d", "12h", "30min", "90s" or a '
                "number of seconds"
            )
        seconds = float(match[1]) * _UNIT_S[match[2] or "s"]
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"{value!r}: a duration must be above 0 seconds")
    return seconds


class CampaignSettings(BaseModel):
    """When training campaigns start after the first (docs/runtime.md, "Campaigns")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    every: str | float = ""
    """Start a campaign this long after the last one started (``"7d"``, ``"12h"``, seconds);
    empty: no schedule."""
    min_new_labelled_windows: Annotated[int, Field(ge=0)] = 500
    """Start a campaign once the agents report this many labelled windows more than when the
    last one started (summed over agents); 0: new labels start none."""
    rounds: Positive | None = None
    """Rounds of each campaign after the first (which runs ``run.rounds``); unset:
    ``run.rounds``."""

    @field_validator("every")
    @classmethod
    def _a_duration(cls, value: str | float) -> str | float:
        if value != "":
            parse_duration(value)
        return value

    @property
    def every_s(self) -> float | None:
        """The schedule's period in seconds; None without a schedule."""
        return None if self.every == "" else parse_duration(self.every)


class SigningSettings(BaseModel):
    """The Ed25519 key that signs every published model and assignment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key_file: Path | None = None
    """PEM private key (mode 0600). Unset: ``state_dir/signing.key``, created at the first
    start; a key_file that is set must exist (``faultfleet keys generate``)."""


class AggregationSettings(BaseModel):
    """How updates are bounded and averaged (docs/federated.md, "Robust aggregation").

    Every rule is off at 0. The first is checked on arrival; the others apply to every
    average a strategy makes (:mod:`coordinator.strategies.robust`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_samples_per_agent: Positive = 1_000_000
    """Training windows an agent may declare when it comes online; one declaring more is
    not asked to train. An update may claim at most what its agent declared."""
    weight_cap: Annotated[float, Field(ge=0)] = DEFAULT_POLICY.weight_cap
    clip_factor: Annotated[float, Field(ge=0)] = DEFAULT_POLICY.clip_factor
    clip_norm: Annotated[float, Field(ge=0)] = DEFAULT_POLICY.clip_norm
    trim_fraction: Annotated[float, Field(ge=0, lt=0.5)] = DEFAULT_POLICY.trim_fraction
    noise_multiplier: Annotated[float, Field(ge=0)] = DEFAULT_POLICY.noise_multiplier
    dp_delta: Annotated[float, Field(gt=0, lt=1)] = DEFAULT_POLICY.dp_delta

    @model_validator(mode="after")
    def _valid_policy(self) -> AggregationSettings:
        try:
            self.policy()
        except FaultfleetError as error:
            raise ValueError(str(error)) from None
        return self

    def policy(self) -> AggregationPolicy:
        """The averaging policy these settings describe."""
        return AggregationPolicy(
            **self.model_dump(exclude={"max_samples_per_agent"}),
        )


class CoordinatorSettings(FileSettings):
    """Everything ``faultfleet coordinator`` reads at start."""

    model_config = SettingsConfigDict(
        extra="forbid", frozen=True, env_nested_delimiter="__", env_prefix="FAULTFLEET_COORDINATOR_"
    )

    state_dir: Path = Path("/var/lib/faultfleet/coordinator")
    broker: BrokerSettings = BrokerSettings()
    metrics: MetricsSettings = MetricsSettings(port=9400)
    run: RunSettings = RunSettings()
    train: TrainSettings = TrainSettings()
    wire: TensorEncoding = TensorEncoding()
    signing: SigningSettings = SigningSettings()
    models: ModelsSettings = ModelsSettings()
    campaigns: CampaignSettings = CampaignSettings()
    aggregation: AggregationSettings = AggregationSettings()
    ingest: IngestSettings = IngestSettings()

    @model_validator(mode="after")
    def _quorum_reachable(self) -> CoordinatorSettings:
        if self.run.min_quorum > self.run.min_agents:
            raise ValueError(
                f"run.min_quorum ({self.run.min_quorum}) cannot exceed run.min_agents "
                f"({self.run.min_agents}): no round could ever reach it"
            )
        return self

    @model_validator(mode="after")
    def _ingest_workers_can_serve(self) -> CoordinatorSettings:
        if self.ingest.workers:
            run = self.run
            aggregation = self.aggregation
            check_ingest_strategy(
                run.strategy,
                run.fraction,
                run.strategy_options,
                aggregation.noise_multiplier,
                aggregation.trim_fraction,
            )
        return self
