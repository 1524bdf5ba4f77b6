"""One machine of the mixed-fault federation, built alone (what one edge agent needs)."""

from __future__ import annotations

from typing import TypedDict

import numpy as np
import pytest

from signal_pipeline.federation import ClientData, Federation
from signal_pipeline.scenarios import (
    MIXED_FAULT_GROUPS,
    VibrationSettings,
    mixed_fault,
    mixed_fault_client,
    mixed_fault_machine,
)


class _Size(TypedDict):
    clients_per_group: int
    windows_per_client: tuple[int, int]


SMALL: _Size = {"clients_per_group": 2, "windows_per_client": (20, 30)}


@pytest.fixture(scope="module")
def federation() -> Federation:
    return mixed_fault(11, clients_per_group=2, windows_per_client=(20, 30))


def _assert_same_client(actual: ClientData, expected: ClientData) -> None:
    assert (actual.client_id, actual.group) == (expected.client_id, expected.group)
    for name, split in expected.splits().items():
        np.testing.assert_array_equal(actual.splits()[name].x, split.x)
        np.testing.assert_array_equal(actual.splits()[name].y, split.y)


@pytest.mark.parametrize("index", [0, 5, 11])
def test_single_client_is_bit_identical_to_the_federation_client(
    federation: Federation, index: int
) -> None:
    client = mixed_fault_client(11, index, clients_per_group=2, windows_per_client=(20, 30))

    _assert_same_client(client, federation.clients[index])


def test_single_client_honours_settings_and_groups() -> None:
    settings = VibrationSettings(window_length=128, machine_spread=1.0)
    groups = ((0, 1, 2), (9,))
    expected = mixed_fault(4, **SMALL, groups=groups, settings=settings).clients[3]

    client = mixed_fault_client(4, 3, **SMALL, groups=groups, settings=settings)

    _assert_same_client(client, expected)
    assert client.train.x.shape[1:] == (1, 128)


def test_machine_plan_describes_the_client(federation: Federation) -> None:
    plan = mixed_fault_machine(11, 7, **SMALL)
    client = federation.clients[7]

    assert plan.client_id == "m07" == client.client_id
    assert plan.group == client.group == 3
    assert plan.labels == MIXED_FAULT_GROUPS[3]
    per_label = {
        label: int(np.sum(client.train.y == label) + np.sum(client.test.y == label))
        for label in plan.labels
    }
    assert dict(plan.label_counts) == per_label
    assert plan.settings == VibrationSettings()


def test_machine_plan_is_deterministic_and_differs_between_machines() -> None:
    first = mixed_fault_machine(2, 4, **SMALL)
    again = mixed_fault_machine(2, 4, **SMALL)
    other = mixed_fault_machine(2, 5, **SMALL)

    assert first.machine == again.machine
    assert first.machine != other.machine
    assert first.labels == other.labels  # machines 4 and 5 share group 2


@pytest.mark.parametrize("index", [12, -1])
def test_index_out_of_range_is_named(index: int) -> None:
    with pytest.raises(IndexError, match=rf"machine index {index} is out of range.*12 machines"):
        mixed_fault_client(0, index, **SMALL)
    with pytest.raises(IndexError, match="0 to 11"):
        mixed_fault_machine(0, index, **SMALL)


def test_index_must_be_an_int() -> None:
    with pytest.raises(TypeError, match="index must be an int"):
        mixed_fault_machine(0, True, **SMALL)


def test_bad_plan_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="windows_per_client"):
        mixed_fault_client(0, 0, windows_per_client=(10, 5))
    with pytest.raises(ValueError, match="clients_per_group"):
        mixed_fault_machine(0, 0, clients_per_group=0)
