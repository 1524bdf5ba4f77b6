"""Settings of ``faultfleet status``: a TOML file plus ``FAULTFLEET_STATUS_*`` overrides.

Only the broker: where it is and the read-only login (``deploy/config/status.toml``, the
``status`` account of ``deploy/mosquitto/faultfleet.acl``). Without ``--config`` the
defaults apply (an anonymous client on localhost:1883), overridden from the environment,
e.g. ``FAULTFLEET_STATUS_BROKER__HOST=broker.plant.example``.
"""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from faultfleet.wire.settings import BrokerSettings, FileSettings


class StatusSettings(FileSettings):
    """Everything ``faultfleet status`` reads at start."""

    model_config = SettingsConfigDict(
        extra="forbid", frozen=True, env_nested_delimiter="__", env_prefix="FAULTFLEET_STATUS_"
    )

    broker: BrokerSettings = BrokerSettings()
