"""Simulation settings of the label-groups scenario and the machine spread."""

from __future__ import annotations

from dataclasses import replace

import pytest

from faultfleet.errors import UsageError
from faultfleet_apps.simulation.config import PROFILES, SimConfig, profile
from faultfleet_apps.simulation.runner import build_federation, machine_count
from signal_pipeline.label_groups import parse_label_groups

FLEET = parse_label_groups("0,12*2;5,6*1")


def test_a_run_without_groups_or_spread_writes_the_document_it_wrote_before() -> None:
    document = SimConfig().to_json()

    assert "groups" not in document
    assert "machine_spread" not in document
    assert SimConfig.from_json(document) == SimConfig()


def test_groups_and_spread_are_written_and_read_back() -> None:
    config = SimConfig(scenario="label-groups", groups=FLEET, machine_spread=0.5)

    document = config.to_json()

    assert document["groups"] == "0,12*2;5,6*1"
    assert document["machine_spread"] == 0.5
    assert SimConfig.from_json(document) == config


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"scenario": "label-groups"}, "scenario label-groups needs its groups"),
        ({"groups": FLEET}, "groups are given only with scenario label-groups, not 'mixed-fault'"),
        ({"machine_spread": -0.1}, "machine_spread must be a finite number >= 0, got -0.1"),
        ({"machine_spread": float("nan")}, "machine_spread must be a finite number >= 0"),
    ],
)
def test_fleet_settings_that_do_not_fit_are_refused(
    values: dict[str, object], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        SimConfig(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_label_groups_take_the_profiles_windows_per_machine(name: str) -> None:
    # Prepare: the profile, with small windows so the test is quick
    config = profile(name, scenario="label-groups", groups=FLEET, machine_spread=0.0)
    low, high = config.windows_per_client
    small = replace(config, windows_per_client=(low // 10, high // 10))

    # Execute
    federation = build_federation(small)

    # Assert: the groups' sizes, not clients_per_group; windows as the profile scales them
    assert config.windows_per_client == PROFILES[name].windows_per_client
    assert machine_count(small) == len(federation.clients) == 3
    assert federation.groups.tolist() == [0, 0, 1]
    assert federation.metadata["machine_spread"] == 0.0
    for client in federation.clients:
        assert low // 10 <= len(client.train) + len(client.test) <= high // 10
