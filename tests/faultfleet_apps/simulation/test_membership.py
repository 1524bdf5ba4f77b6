"""Membership schedules of simulated runs: checks on the settings and on the federation."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from faultfleet_apps.simulation.config import SimConfig
from faultfleet_apps.simulation.membership import MembershipSchedule
from faultfleet_apps.simulation.runner import RoundRecord

CLIENTS = ["m00", "m01", "m02", "m03", "m04", "m05"]
BASE = SimConfig(rounds=5, device="cpu")


@pytest.mark.parametrize(
    ("joins", "leaves", "message"),
    [
        ((("m05", 1),), (), r"joins: 'm05' at round 1 is out of range.*\[2, 5\]"),
        ((), (("m01", 6),), r"leaves: 'm01' at round 6 is out of range.*\[2, 5\]"),
        ((("m05", 3), ("m05", 4)), (), "joins names 'm05' twice; a machine joins at most once"),
        ((), (("m01", 3), ("m01", 4)), "leaves names 'm01' twice; a machine leaves at most once"),
        ((("m05", 4),), (("m05", 3),), "'m05' leaves before round 3 but joins before round 4"),
        ((("m05", 3),), (("m05", 3),), "must leave after it joins"),
        ((("m05",),), (), r"joins\[0\] must be a \(client id, round\) pair"),
        ((), (("m01", "3"),), r"leaves\[0\] must be a \(client id, round\) pair"),
        ((("", 3),), (), r"joins\[0\] must be a \(client id, round\) pair"),
    ],
)
def test_bad_schedules_say_what_is_wrong(joins: Any, leaves: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replace(BASE, joins=joins, leaves=leaves)


def test_fewer_rounds_than_the_schedule_needs_is_an_error() -> None:
    config = replace(BASE, joins=(("m05", 5),))

    with pytest.raises(ValueError, match=r"round 5 is out of range.*\[2, 4\]"):
        replace(config, rounds=4)


def test_settings_round_trip_through_json() -> None:
    config = replace(BASE, joins=(("m05", 3),), leaves=(("m01", 4), ("m02", 5)))

    document = config.to_json()

    assert document["joins"] == [["m05", 3]]
    assert document["leaves"] == [["m01", 4], ["m02", 5]]
    assert SimConfig.from_json(document) == config
    # without a schedule the document is the one written before schedules existed
    assert "joins" not in BASE.to_json()
    assert "leaves" not in BASE.to_json()
    assert SimConfig.from_json(BASE.to_json()) == BASE


def test_a_history_written_before_members_were_counted_still_loads() -> None:
    old: dict[str, Any] = {
        "round": 1,
        "accuracy": 0.5,
        "num_clusters": 2,
        "ari": 1.0,
        "purity": 1.0,
        "bytes_up": 10,
        "bytes_down": 20,
        "seconds": 0.1,
        "train_loss": 0.7,
        "answered": 3,
        "failures": 0,
        "strategy_metrics": {},
    }

    assert RoundRecord(**old).members == 0
    assert RoundRecord(**old).evaluated == 0


def test_one_schedule_given_in_any_order_is_one_setting() -> None:
    given = replace(BASE, joins=(("m05", 4), ("m04", 3), ("m03", 4)), leaves=(("m01", 5),))
    reordered = replace(BASE, joins=(("m03", 4), ("m05", 4), ("m04", 3)), leaves=(("m01", 5),))

    assert given.joins == (("m04", 3), ("m03", 4), ("m05", 4))
    assert given.to_json() == reordered.to_json()  # so a resumed run accepts either


def test_schedule_gives_members_per_round_in_the_federations_order() -> None:
    schedule = MembershipSchedule.plan(CLIENTS, (("m05", 3), ("m00", 3)), (("m01", 4),))

    assert schedule.members(0) == schedule.members(1) == ["m01", "m02", "m03", "m04"]
    assert schedule.members(3) == CLIENTS
    assert schedule.members(4) == ["m00", "m02", "m03", "m04", "m05"]
    assert schedule.joining(3) == ["m00", "m05"]
    assert schedule.leaving(4) == ["m01"]
    assert schedule.joining(4) == schedule.leaving(3) == []


def test_unknown_ids_are_named_with_a_few_known_ones() -> None:
    with pytest.raises(
        ValueError,
        match=r"joins names 'm99', not a client.*m00, m01, m02, m03, m04, … \(6 in all\)",
    ):
        MembershipSchedule.plan(CLIENTS, (("m99", 2),), ())
    with pytest.raises(ValueError, match="leaves names 'x'"):
        MembershipSchedule.plan(CLIENTS, (), (("x", 2),))


def test_a_run_is_never_left_without_members() -> None:
    late = tuple((c, 2) for c in CLIENTS)
    with pytest.raises(ValueError, match="every machine of the federation joins late"):
        MembershipSchedule.plan(CLIENTS, late, ())
    # m05 joins before round 3, but the leaves before it come first
    leaves = tuple((c, 3) for c in CLIENTS[:5])
    with pytest.raises(ValueError, match=r"before round 3 the last members \(m00, .*m04\)"):
        MembershipSchedule.plan(CLIENTS, (("m05", 3),), leaves)
    MembershipSchedule.plan(CLIENTS, (("m05", 2),), leaves)
