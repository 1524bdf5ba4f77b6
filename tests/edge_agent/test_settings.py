"""Tests of the agent's settings and of the example deploy/config/agent.toml."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from edge_agent.settings import (
    AgentSettings,
    DiagnosisSettings,
    LabelsSettings,
    SigningSettings,
    SourceSettings,
)
from faultfleet.wire.settings import BrokerSettings, SettingsError, load_settings
from faultfleet.wire.signing import SigningKey

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "config" / "agent.toml"
SIGNING = SigningSettings(trusted_keys=(SigningKey.generate().public_text,))


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No FAULTFLEET_* variable of the developer's shell leaks into a test."""
    for name in os.environ:
        if name.startswith("FAULTFLEET_"):
            monkeypatch.delenv(name)


def test_defaults_follow_the_design() -> None:
    settings = AgentSettings(agent_id="m07", signing=SIGNING)

    assert settings.agent_id == "m07"
    assert settings.device == "auto"
    assert settings.state_dir == Path("/var/lib/faultfleet/agent")
    assert settings.broker == BrokerSettings()
    assert (settings.metrics.host, settings.metrics.port) == ("0.0.0.0", 9401)
    source = settings.source
    assert (source.kind, source.scenario, source.seed, source.machine_index) == (
        "simulated",
        "mixed-fault",
        0,
        0,
    )
    assert (source.path, source.window_length) == (None, 1024)
    diagnosis = settings.diagnosis
    assert (diagnosis.interval_s, diagnosis.log_max_bytes, diagnosis.log_backups) == (
        0.1,
        10_000_000,
        3,
    )


def test_the_agent_id_is_required(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text("device = 'cpu'\n", encoding="utf-8")

    with pytest.raises(SettingsError, match=r"\n  agent_id: Field required$"):
        load_settings(AgentSettings, path)


@pytest.mark.parametrize("agent_id", ["m07", "gw-2.line_3", "A" * 64])
def test_topic_safe_agent_ids_are_accepted(agent_id: str) -> None:
    assert AgentSettings(agent_id=agent_id, signing=SIGNING).agent_id == agent_id


@pytest.mark.parametrize("agent_id", ["", "m/07", "m+", "#", "m 07", "m07\n", "A" * 65])
def test_agent_ids_that_cannot_be_a_topic_level_are_rejected(agent_id: str) -> None:
    with pytest.raises(ValidationError, match="agent_id\n  String should match pattern"):
        AgentSettings(agent_id=agent_id, signing=SIGNING)


def test_the_agent_id_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULTFLEET_AGENT_AGENT_ID", "m11")
    monkeypatch.setenv("FAULTFLEET_AGENT_SOURCE__MACHINE_INDEX", "11")
    monkeypatch.setenv("FAULTFLEET_AGENT_SIGNING__TRUSTED_KEYS", f'["{SIGNING.trusted_keys[0]}"]')

    settings = load_settings(AgentSettings, None)

    assert (settings.agent_id, settings.source.machine_index) == ("m11", 11)


def test_a_recordings_source_needs_a_path() -> None:
    with pytest.raises(ValidationError, match=r"source\.path must name the recordings folder"):
        SourceSettings(kind="recordings")


def test_a_recordings_source_without_path_in_the_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text("agent_id = 'm07'\n[source]\nkind = 'recordings'\n", encoding="utf-8")

    with pytest.raises(SettingsError, match=r"  source: Value error, source\.path must name"):
        load_settings(AgentSettings, path)


def test_a_recordings_source_with_a_path(tmp_path: Path) -> None:
    source = SourceSettings(kind="recordings", path=tmp_path)

    assert source.path == tmp_path


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"kind": "camera"}, "kind"),
        ({"scenario": "single-fault"}, "scenario"),
        ({"machine_index": -1}, "machine_index"),
        ({"window_length": 8}, "window_length"),
        ({"windows_per_client": [0, 5]}, "windows_per_client"),
        ({"fs_hz": 0}, "fs_hz"),
    ],
)
def test_source_values_are_checked(values: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        SourceSettings.model_validate(values)


@pytest.mark.parametrize(
    ("values", "field"),
    [({"interval_s": -1}, "interval_s"), ({"log_max_bytes": 10}, "log_max_bytes")],
)
def test_diagnosis_values_are_checked(values: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        DiagnosisSettings.model_validate(values)


def test_an_unknown_key_in_a_section_is_named(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text("agent_id = 'm07'\n[diagnosis]\ninterval = 1\n", encoding="utf-8")

    with pytest.raises(SettingsError, match=r"diagnosis\.interval: unknown setting"):
        load_settings(AgentSettings, path)


def test_the_example_file_loads_and_shows_the_defaults() -> None:
    settings = load_settings(AgentSettings, EXAMPLE)

    # Everything but agent_id and the keys the file marks "example" is the default.
    expected = AgentSettings(
        agent_id="m07",
        state_dir=Path("/var/lib/faultfleet/agent-m07"),
        broker=BrokerSettings(
            host="coordinator.plant.example",
            username="m07",
            password_file=Path("/etc/faultfleet/m07.password"),
        ),
        source=SourceSettings(kind="recordings", path=Path("/srv/recordings/m07"), machine_index=7),
        labels=LabelsSettings(file=Path("/var/lib/faultfleet/agent-m07/labels.csv")),
        signing=SigningSettings(trusted_keys=("XEK6MWlCHOENFY5uE4WT76MWAq0XzEG7vNOviqGI8wQ=",)),
    )
    assert settings.model_dump() == expected.model_dump()
    assert settings.labels_file == settings.state_dir / "labels.csv"


def test_the_example_file_takes_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULTFLEET_AGENT_DIAGNOSIS__INTERVAL_S", "0.5")

    settings = load_settings(AgentSettings, EXAMPLE)

    assert settings.diagnosis.interval_s == 0.5
    assert settings.agent_id == "m07"


def test_an_agent_without_a_trusted_key_is_refused_with_the_remedy(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text("agent_id = 'm07'\n", encoding="utf-8")

    with pytest.raises(
        SettingsError, match=r"signing\.trusted_keys is empty.*faultfleet keys show"
    ):
        load_settings(AgentSettings, path)


@pytest.mark.parametrize("key", ["not base64!", "AAAA", "A" * 88])
def test_a_trusted_key_that_is_no_public_key_is_named(key: str) -> None:
    with pytest.raises(ValidationError, match=r"trusted_keys\n.*public key"):
        SigningSettings(trusted_keys=(key,))


def test_agent_id_stands_in_for_username_and_password_file() -> None:
    broker = BrokerSettings(username="{agent_id}", password_file=Path("/etc/ff/{agent_id}.pw"))

    mine = broker.for_agent("m07")

    assert (mine.username, mine.password_file) == ("m07", Path("/etc/ff/m07.pw"))
    assert BrokerSettings().for_agent("m07") == BrokerSettings()
