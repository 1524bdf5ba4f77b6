"""Tests of the coordinator's settings and of the example deploy/config/coordinator.toml."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from coordinator.runtime.settings import (
    AggregationSettings,
    CampaignSettings,
    CoordinatorSettings,
    RunSettings,
    SigningSettings,
    TrainSettings,
    parse_duration,
)
from coordinator.strategies.registry import STRATEGIES
from coordinator.strategies.robust import DEFAULT_POLICY, AggregationPolicy
from faultfleet.models.zoo import MODEL_NAMES
from faultfleet.tasks import TrainConfig
from faultfleet.wire.messages import TensorEncoding
from faultfleet.wire.settings import BrokerSettings, SettingsError, load_settings
from signal_pipeline.scenarios import MIXED_FAULT_CLASS_NAMES

EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "config" / "coordinator.toml"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No FAULTFLEET_* variable of the developer's shell leaks into a test."""
    for name in os.environ:
        if name.startswith("FAULTFLEET_"):
            monkeypatch.delenv(name)


def test_defaults_follow_the_design() -> None:
    settings = CoordinatorSettings()

    assert settings.state_dir == Path("/var/lib/faultfleet/coordinator")
    assert settings.broker == BrokerSettings()
    assert (settings.metrics.host, settings.metrics.port) == ("0.0.0.0", 9400)
    run = settings.run
    assert (run.strategy, run.strategy_options, run.model) == ("flacc", {}, "compact")
    assert run.sample_shape == (1, 1024)
    assert run.class_names == MIXED_FAULT_CLASS_NAMES
    assert len(run.class_names) == 12
    assert (run.rounds, run.fraction, run.seed) == (100, 0.25, 0)
    assert (run.min_agents, run.min_quorum, run.round_deadline_s) == (2, 1, 120.0)
    assert (run.eval_every, run.publish_every, run.retry_wait_s) == (10, 10, 10.0)
    assert settings.train.config() == TrainConfig()
    assert settings.wire == TensorEncoding(dtype="float32", compression="none")
    assert settings.aggregation.max_samples_per_agent == 1_000_000
    assert settings.aggregation.policy() == DEFAULT_POLICY


def test_the_aggregation_section_describes_the_averaging_policy() -> None:
    settings = CoordinatorSettings.model_validate(
        {
            "aggregation": {
                "clip_factor": 0,
                "weight_cap": 0,
                "trim_fraction": 0,
                "noise_multiplier": 1.5,
                "clip_norm": 0.8,
            }
        }
    )

    assert settings.aggregation.policy() == AggregationPolicy(noise_multiplier=1.5, clip_norm=0.8)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"noise_multiplier": 1.0}, "needs clip_norm > 0"),
        ({"clip_factor": 0.5}, "clip_factor must be 0 \\(off\\) or >= 1"),
        ({"trim_fraction": 0.5}, "trim_fraction"),
        ({"max_samples_per_agent": 0}, "max_samples_per_agent"),
        ({"clip_norm": -1}, "clip_norm"),
        ({"clip": "adaptive"}, "clip"),
    ],
)
def test_the_aggregation_section_is_checked(values: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        AggregationSettings.model_validate(values)


def test_train_settings_become_a_train_config() -> None:
    train = TrainSettings(optimizer="sgd", learning_rate=0.01, epochs=2, batch_size=8, momentum=0.9)

    assert train.config() == TrainConfig("sgd", 0.01, 2, 8, 0.9)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_every_registered_strategy_is_accepted(strategy: str) -> None:
    assert RunSettings(strategy=strategy).strategy == strategy


def test_an_unknown_strategy_is_named_with_the_choices() -> None:
    with pytest.raises(ValidationError, match="unknown strategy 'fedprox'; choose one of") as e:
        RunSettings(strategy="fedprox")

    assert all(name in str(e.value) for name in ("fedavg", "local", "flacc", "ifca", "cfl"))


def test_an_unknown_model_is_named_with_the_choices() -> None:
    with pytest.raises(ValidationError, match="unknown model 'resnet'; choose one of") as e:
        RunSettings(model="resnet")

    assert all(name in str(e.value) for name in MODEL_NAMES)


def test_an_unknown_strategy_in_the_file_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "coordinator.toml"
    path.write_text("[run]\nstrategy = 'fedprox'\n", encoding="utf-8")

    with pytest.raises(SettingsError, match=r"run\.strategy: Value error, unknown strategy"):
        load_settings(CoordinatorSettings, path)


def test_a_misspelt_strategy_option_stops_the_coordinator_at_load(tmp_path: Path) -> None:
    path = tmp_path / "coordinator.toml"
    path.write_text("[run]\nstrategy = 'ifca'\nstrategy_options = { n_cluster = 3 }\n")

    with pytest.raises(
        SettingsError,
        match=r"run: Value error, strategy_options for 'ifca': strategy 'ifca' has no option "
        r"n_cluster; its options are fraction, n_clusters",
    ):
        load_settings(CoordinatorSettings, path)


def test_strategy_options_a_strategy_takes_are_accepted() -> None:
    run = RunSettings(strategy="ifca", strategy_options={"n_clusters": 3})

    assert run.strategy_options == {"n_clusters": 3}


def test_min_quorum_above_min_agents_is_rejected() -> None:
    with pytest.raises(ValidationError, match=r"run\.min_quorum \(3\) cannot exceed run\.min_a"):
        CoordinatorSettings(run=RunSettings(min_agents=2, min_quorum=3))


def test_min_quorum_equal_to_min_agents_is_fine() -> None:
    settings = CoordinatorSettings(run=RunSettings(min_agents=3, min_quorum=3))

    assert settings.run.min_quorum == 3


def test_min_quorum_from_the_environment_is_checked_against_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "coordinator.toml"
    path.write_text("[run]\nmin_agents = 4\n", encoding="utf-8")
    monkeypatch.setenv("FAULTFLEET_COORDINATOR_RUN__MIN_QUORUM", "5")

    with pytest.raises(SettingsError, match=r"\(top level\): Value error, run\.min_quorum \(5\)"):
        load_settings(CoordinatorSettings, path)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("fraction", 0.0),
        ("fraction", 1.5),
        ("rounds", 0),
        ("round_deadline_s", 0),
        ("sample_shape", (1, 0)),
        ("class_names", ("only-one",)),
        ("retry_wait_s", -1),
        ("eval_every", 0),
    ],
)
def test_run_values_are_checked(field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        RunSettings.model_validate({field: value})


@pytest.mark.parametrize(
    ("section", "values"),
    [
        ("train", {"optimizer": "rmsprop"}),
        ("train", {"momentum": 1.0}),
        ("wire", {"dtype": "bfloat16"}),
        ("wire", {"compression": "gzip"}),
        ("wire", {"level": 9}),
    ],
)
def test_train_and_wire_sections_are_checked(section: str, values: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match=section):
        CoordinatorSettings.model_validate({section: values})


def test_the_example_file_loads_and_shows_the_defaults() -> None:
    settings = load_settings(CoordinatorSettings, EXAMPLE)

    # Everything but the keys the file marks "example" is the default.
    expected = CoordinatorSettings(
        broker=BrokerSettings(
            username="coordinator", password_file=Path("/etc/faultfleet/coordinator.password")
        ),
        signing=SigningSettings(key_file=Path("/etc/faultfleet/signing.key")),
        campaigns=CampaignSettings(every="7d", rounds=20),
    )
    assert settings.model_dump() == expected.model_dump()
    assert settings.campaigns.every_s == 7 * 86_400


def test_the_example_file_takes_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULTFLEET_COORDINATOR_RUN__ROUNDS", "200")
    monkeypatch.setenv("FAULTFLEET_COORDINATOR_BROKER__HOST", "broker.plant.example")

    settings = load_settings(CoordinatorSettings, EXAMPLE)

    assert settings.run.rounds == 200
    assert settings.broker.host == "broker.plant.example"
    assert settings.broker.username == "coordinator"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("7d", 604_800.0), ("12h", 43_200.0), ("30min", 1_800.0), ("90s", 90.0), ("2w", 1_209_600.0)],
)
def test_campaign_schedules_are_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert CampaignSettings(every=text).every_s == seconds
    assert CampaignSettings(every=seconds).every_s == seconds


@pytest.mark.parametrize("every", ["fortnight", "0d", "-5", 0])
def test_a_schedule_that_is_not_a_duration_is_refused(every: str | float) -> None:
    with pytest.raises(ValueError, match="duration"):
        CampaignSettings(every=every)


def test_no_schedule_by_default_and_new_labels_start_campaigns() -> None:
    campaigns = CoordinatorSettings().campaigns
    assert (campaigns.every_s, campaigns.min_new_labelled_windows, campaigns.rounds) == (
        None,
        500,
        None,
    )
