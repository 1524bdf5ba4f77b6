"""Settings of ``faultfleet ingest-worker`` and the coordinator's ``[ingest]`` section."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from coordinator.runtime.ingest_settings import IngestSettings
from coordinator.runtime.ingest_worker_settings import IngestWorkerSettings
from coordinator.runtime.settings import CoordinatorSettings
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


# -- the coordinator's [ingest] section -----------------------------------------------------


def coordinator_file(tmp_path: Path, run: str, extra: str = "") -> Path:
    config = tmp_path / "coordinator.toml"
    config.write_text(f'[run]\n{run}\n[ingest]\nworkers = ["ingest-1", "ingest-2"]\n{extra}')
    return config


@pytest.mark.parametrize(
    ("strategy", "option"),
    [
        *(
            (name, 'pairwise = "sketch"')
            for name in ("flacc", "flhc", "cfl", "faacl", "ifca", "jgl")
        ),
        ("fedavg", 'streaming = "on"'),
        ("fixed", 'streaming = "on"'),
    ],
)
def test_a_streaming_run_takes_ingest_workers(tmp_path: Path, strategy: str, option: str) -> None:
    run = f'strategy = "{strategy}"\nstrategy_options = {{ {option} }}'

    settings = load_settings(CoordinatorSettings, coordinator_file(tmp_path, run))

    assert settings.ingest == IngestSettings(workers=("ingest-1", "ingest-2"))
    assert settings.ingest.ready_timeout_s == 10.0
    assert settings.ingest.close_timeout_s == 30.0


def test_without_workers_the_coordinator_ingests_itself() -> None:
    assert CoordinatorSettings().ingest.workers == ()


@pytest.mark.parametrize(
    ("run", "extra", "message"),
    [
        ('strategy = "fedavg"', "", "got fedavg with streaming = 'auto'"),
        ('strategy = "flacc"', "", "got flacc with pairwise = 'auto'"),
        ('strategy = "flacc"\nstrategy_options = { pairwise = "exact" }', "", "'exact'"),
        (
            'strategy = "flacc"\nstrategy_options = { pairwise = "sketch" }',
            "[aggregation]\nnoise_multiplier = 1.0\nclip_norm = 1.0\n",
            "cannot serve differential privacy",
        ),
        (
            'strategy = "flhc"\nstrategy_options = { pairwise = "sketch" }',
            "[aggregation]\ntrim_fraction = 0.1\n",
            "cannot serve a trimmed mean",
        ),
        ('strategy = "fedac"', "", "got fedac"),
    ],
)
def test_ingest_workers_are_refused_where_they_cannot_serve(
    tmp_path: Path, run: str, extra: str, message: str
) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings(CoordinatorSettings, coordinator_file(tmp_path, run, extra))


def test_a_worker_listed_twice_is_named() -> None:
    with pytest.raises(ValidationError, match="listed more than once: w1"):
        IngestSettings(workers=("w1", "w2", "w1"))
