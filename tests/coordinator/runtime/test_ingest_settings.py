"""Settings of ``faultfleet ingest-worker``."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.runtime.ingest_settings import IngestWorkerSettings
from faultfleet.wire.settings import SettingsError, load_settings


def test_a_file_and_an_override_give_the_worker_its_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "ingest.toml"
    config.write_text('worker_id = "w1"\nstate_dir = "/srv/ingest"\n[broker]\nhost = "mq1"\n')
    monkeypatch.setenv("FAULTFLEET_INGEST_CHECK_THREADS", "4")

    settings = load_settings(IngestWorkerSettings, config)

    assert settings.worker_id == "w1"
    assert settings.state_dir == Path("/srv/ingest")
    assert settings.broker.host == "mq1"
    assert settings.check_threads == 4
    assert settings.share_group == "faultfleet-ingest"


def test_a_worker_id_that_cannot_be_a_topic_level_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "ingest.toml"
    config.write_text('worker_id = "w/1"\n')

    with pytest.raises(SettingsError, match="worker_id"):
        load_settings(IngestWorkerSettings, config)
