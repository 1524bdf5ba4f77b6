"""Who joins and who leaves a running federation (pure logic; the broker test is in
tests/integration/test_membership.py)."""

from __future__ import annotations

from coordinator.membership import MembershipChange, plan_membership


def test_newcomers_join_and_retired_members_leave() -> None:
    change = plan_membership(
        members=["m00", "m01", "m02"], online_trainers=["m00", "m05", "m04"], retired=["m01"]
    )

    assert change == MembershipChange(joining=("m05", "m04"), leaving=("m01",))


def test_an_offline_member_keeps_its_place_and_a_retired_stranger_is_ignored() -> None:
    change = plan_membership(members=["m00", "m01"], online_trainers=["m00"], retired=["m09"])

    assert not change


def test_the_last_members_stay_unless_someone_joins() -> None:
    alone = plan_membership(members=["m00", "m01"], online_trainers=[], retired=["m00", "m01"])
    replaced = plan_membership(
        members=["m00", "m01"], online_trainers=["m02"], retired=["m00", "m01"]
    )

    assert not alone
    assert replaced == MembershipChange(joining=("m02",), leaving=("m00", "m01"))
