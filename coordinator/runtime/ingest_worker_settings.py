"""Settings of ``faultfleet ingest-worker``: a TOML file plus ``FAULTFLEET_INGEST_*``
overrides, nested keys with a double underscore (``FAULTFLEET_INGEST_BROKER__HOST=mq1``).

Kept apart from the coordinator's ``[ingest]`` section
(:mod:`coordinator.runtime.ingest_settings`), which loads the strategies to check a run
against them: a worker never needs them, nor scikit-learn, SciPy or torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from coordinator.adapters.ingest_worker import SHARE_GROUP
from faultfleet.wire.settings import BrokerSettings, FileSettings, MetricsSettings

Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]


class IngestWorkerSettings(FileSettings):
    """Everything ``faultfleet ingest-worker`` reads at start."""

    model_config = SettingsConfigDict(
        extra="forbid", frozen=True, env_nested_delimiter="__", env_prefix="FAULTFLEET_INGEST_"
    )

    worker_id: Name
    """Unique among the coordinator's workers (its summaries topic and MQTT client id)."""
    state_dir: Path = Path("/var/lib/faultfleet/ingest")
    """The worker's round journal lives in ``state_dir/worker_id``."""
    check_threads: Annotated[int, Field(ge=1, le=64)] = 2
    """Threads checking and decoding updates off the network thread."""
    share_group: Name = SHARE_GROUP
    """The shared subscription's group: the same for every worker of one coordinator."""
    broker: BrokerSettings = BrokerSettings()
    metrics: MetricsSettings = MetricsSettings(port=9402)
    """The worker's ``/metrics`` endpoint; give each worker of one host its own port (0: off)."""
