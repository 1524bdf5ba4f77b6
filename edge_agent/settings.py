"""Settings of ``faultfleet agent``: a TOML file plus ``FAULTFLEET_AGENT_*`` overrides.

See ``deploy/config/agent.toml`` for a commented example.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from faultfleet.wire.messages import Name
from faultfleet.wire.settings import BrokerSettings, FileSettings, MetricsSettings
from faultfleet.wire.signing import parse_public_key

Positive = Annotated[int, Field(ge=1)]


class SourceSettings(BaseModel):
    """Where the agent's windows come from.

    ``simulated``: a machine of a simulated scenario (demo and labs). ``recordings``: a
    folder of the plant's recordings (``manifest.csv``/``.toml`` labels training data,
    ``incoming/`` receives new recordings to diagnose). ``live``: a sensor driver pushes
    samples into the agent (see ``edge_agent.sources.LiveSensorSource``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["simulated", "recordings", "live"] = "simulated"
    scenario: Literal["mixed-fault"] = "mixed-fault"
    seed: int = 0
    machine_index: Annotated[int, Field(ge=0)] = 0
    clients_per_group: Positive = 8
    windows_per_client: tuple[Positive, Positive] = (200, 600)
    snr_db: float | None = None
    path: Path | None = None
    window_length: Annotated[int, Field(ge=16)] = 1024
    fs_hz: Annotated[float, Field(gt=0)] = 12_000.0
    """Sampling rate of a live sensor."""
    poll_s: Annotated[float, Field(gt=0)] = 2.0
    """How often ``incoming/`` is scanned for new recordings."""
    manifest_outside_folder: bool = False
    """Accept manifest entries naming files outside the recordings folder (after resolving
    ``..`` and symbolic links); refused by default."""
    max_incoming_bytes: Positive = 64_000_000
    """Largest file taken from ``incoming/``; a larger one is refused and left in place
    (a 200 MB recording needs about 9 times its size in memory while it is windowed)."""

    @model_validator(mode="after")
    def _path_for_recordings(self) -> SourceSettings:
        if self.kind == "recordings" and self.path is None:
            raise ValueError("source.path must name the recordings folder when kind = 'recordings'")
        return self


class DiagnosisSettings(BaseModel):
    """Live diagnosis: pacing of simulated windows and the local log of diagnoses."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interval_s: Annotated[float, Field(ge=0)] = 0.1
    """Time between simulated or replayed windows (a live sensor sets its own pace)."""
    log_max_bytes: Annotated[int, Field(ge=1024)] = 10_000_000
    log_backups: Annotated[int, Field(ge=0)] = 3
    flush_delay_s: Annotated[float, Field(ge=0, le=60)] = 1.0
    """Longest time a diagnosis log line or a kept window waits in memory before it is
    written to disk, so that a window costs no disk write of its own; a crash of the agent
    loses at most this much of the log and the kept windows (published diagnoses and the
    outbox are not delayed). 0: every window written at once."""
    backlog_windows: Positive = 256
    """Windows kept while no model has arrived yet; the oldest go first beyond this."""
    publish: bool = True
    """Publish every diagnosis on ``agents/{id}/diagnoses``."""
    publish_delay_s: Annotated[float, Field(ge=0, le=10)] = 0.25
    """Longest time a diagnosis waits on the agent before it is published: those made
    meanwhile leave together, in one turn of the outbox thread, instead of waking it (and
    the MQTT client's network thread) once per window. 0: each published as it is made."""
    streak_min_probability: Annotated[float, Field(ge=0, le=1)] = 0.9
    """A window extends its class's streak (``faultfleet_diagnosis_streak_windows``, the
    fault-alarm rule) only when the model gives that class at least this probability."""
    heartbeat_s: Annotated[float, Field(ge=0)] = 30.0
    """Seconds between the retained heartbeats on ``agents/{id}/heartbeat`` (last seen, last
    diagnosis, streak; read by ``faultfleet status``); 0 switches them off."""
    outbox_max_diagnoses: Annotated[int, Field(ge=0)] = 100_000
    """Diagnoses kept on disk (``state_dir/outbox``) while the broker is unreachable and sent
    once it is back, in order; beyond this the oldest are dropped and counted. About 400 bytes
    each: the default holds some 40 MB, 2.8 hours at 10 windows a second. 0: none kept."""


class TaskSettings(BaseModel):
    """Limits on the coordinator's tasks: what an agent accepts, queues and keeps."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_queued: Positive = 16
    """Task frames waiting for the worker; one more is answered ``task_failed`` at once."""
    max_epochs: Positive = 50
    """Most local epochs a fit task may ask for; more is refused as ``task_failed``."""
    max_classes: Annotated[int, Field(ge=2)] = 256
    """Most output classes a task's model may have."""
    max_cached_models: Positive = 4
    """Architectures kept built between tasks (least recently used dropped first)."""
    answers_kept: Annotated[int, Field(ge=0)] = 4
    """Latest answers kept in memory, sent again when the coordinator repeats their task (it
    does after a broker restart); a repeated task whose answer is gone is run again. Each
    costs the size of an update (17.6 MB for the paper model, 0.24 MB for the compact one)."""
    clock_skew_warn_s: Annotated[float, Field(gt=0)] = 30.0
    """A task issued this many seconds or more away from the agent's clock logs a warning
    (the skew is always on ``faultfleet_clock_skew_seconds``)."""


class LabelsSettings(BaseModel):
    """Labelling live windows after the fact, and how often new labels are looked for.

    See :mod:`edge_agent.labelled_data` and docs/runtime.md, "New labels".
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: Path | None = None
    """The labels file (time ranges and their label, ``faultfleet label`` appends to it);
    unset: ``state_dir/labels.csv``."""
    keep_windows_bytes: Annotated[int, Field(ge=0)] = 100_000_000
    """Disk kept for the diagnosed live windows, bytes (``state_dir/windows/``; about 24,000
    windows of 1024 samples per 100 MB, the newest kept); 0 keeps none, and then the labels
    file labels nothing."""
    rescan_s: Annotated[float, Field(gt=0)] = 60.0
    """Seconds between two looks at the labels file and the manifest (rows appended)."""
    split_seed: int = 0
    """Seeds the train/validation/test split of labelled live windows."""


class SigningSettings(BaseModel):
    """The coordinator keys whose signed models and assignments the agent accepts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trusted_keys: tuple[str, ...] = ()
    """Base64 Ed25519 public keys, as ``faultfleet keys show`` prints them. Several during a
    key rotation (docs/deploy.md). Required: without one the agent would refuse every model."""

    @field_validator("trusted_keys")
    @classmethod
    def _public_keys(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for text in value:
            parse_public_key(text)
        return value


class AgentSettings(FileSettings):
    """Everything ``faultfleet agent`` reads at start."""

    model_config = SettingsConfigDict(
        extra="forbid", frozen=True, env_nested_delimiter="__", env_prefix="FAULTFLEET_AGENT_"
    )

    agent_id: Name
    device: Literal["auto", "cpu", "cuda"] = "auto"
    state_dir: Path = Path("/var/lib/faultfleet/agent")
    broker: BrokerSettings = BrokerSettings()
    metrics: MetricsSettings = MetricsSettings(port=9401)
    source: SourceSettings = SourceSettings()
    diagnosis: DiagnosisSettings = DiagnosisSettings()
    tasks: TaskSettings = TaskSettings()
    labels: LabelsSettings = LabelsSettings()
    signing: SigningSettings = SigningSettings()

    @property
    def labels_file(self) -> Path:
        """``labels.file``, else ``state_dir/labels.csv``."""
        return self.labels.file if self.labels.file is not None else self.state_dir / "labels.csv"

    @model_validator(mode="after")
    def _trusts_a_key(self) -> AgentSettings:
        if not self.signing.trusted_keys:
            raise ValueError(
                "signing.trusted_keys is empty: add the coordinator's public key "
                "(`faultfleet keys show --key <the coordinator's signing key>` prints it); "
                "without one the agent would refuse every model"
            )
        return self
