"""Wrong merges read from a results document: which merges joined true groups."""

from __future__ import annotations

from typing import Any

import pytest

from faultfleet_apps.simulation.merge_audit import (
    audit_merges,
    merge_kind,
    recorded_merges,
    wrong_merge_rounds,
)

# three true groups; groups 0 and 1 may share condition labels: the truth is still by machine
TRUTH = {"m0": 0, "m1": 0, "m2": 1, "m3": 1, "m4": 2, "m5": 2}


def merge(server_round: int, first: list[str], second: list[str]) -> dict[str, Any]:
    return {
        "round": server_round,
        "first": first,
        "second": second,
        "similarity": 0.5,
        "threshold": 0.0,
        "score": None,
        "borderline": False,
    }


def document(merges: list[dict[str, Any]]) -> dict[str, Any]:
    return {"true_groups": TRUTH, "cluster_quality": {"merges": merges}, "history": []}


@pytest.mark.parametrize(
    ("first", "second", "kind"),
    [
        (["m0"], ["m1"], "pure"),
        (["m0", "m1"], ["m2"], "joins"),
        (["m0", "m2"], ["m4"], "joins"),  # a mixed cluster meets a third group
        (["m0", "m2"], ["m1", "m4"], "joins"),  # each side holds a group the other lacks
        (["m0", "m2"], ["m1"], "grows-mixed"),  # groups 0 and 1 were mixed already
        (["m3"], ["m0", "m2"], "grows-mixed"),
        (["m0", "m2"], ["m1", "m3"], "grows-mixed"),
    ],
)
def test_merge_kinds(first: list[str], second: list[str], kind: str) -> None:
    assert merge_kind(first, second, TRUTH) == kind


def test_the_rounds_of_the_merges_that_joined_groups_are_listed() -> None:
    # Prepare: a run that builds groups 0 and 2, wrongly joins 0 with 1 in round 7, then
    # adds the rest of group 1 to that mixed cluster in round 9
    merges = [
        merge(9, ["m0", "m1", "m2"], ["m3"]),
        merge(3, ["m0"], ["m1"]),
        merge(4, ["m4"], ["m5"]),
        merge(7, ["m0", "m1"], ["m2"]),
    ]

    # Execute
    verdicts = audit_merges(document(merges))

    # Assert: in round order
    assert [v.round for v in verdicts] == [3, 4, 7, 9]
    assert [v.kind for v in verdicts] == ["pure", "pure", "joins", "grows-mixed"]
    assert verdicts[2].first_groups == (0,)
    assert verdicts[2].second_groups == (1,)
    assert wrong_merge_rounds(verdicts) == (7,)


def test_a_run_of_pure_merges_has_no_wrong_merge() -> None:
    merges = [merge(2, ["m0"], ["m1"]), merge(2, ["m2"], ["m3"]), merge(5, ["m4"], ["m5"])]

    assert wrong_merge_rounds(audit_merges(document(merges))) == ()


def test_without_cluster_quality_the_history_merges_are_read() -> None:
    old = {
        "true_groups": TRUTH,
        "cluster_quality": None,
        "history": [
            {"round": 1, "quality": {}},
            {"round": 2, "quality": {"merges": [merge(2, ["m0"], ["m4"])]}},
        ],
    }

    assert [m["round"] for m in recorded_merges(old)] == [2]
    assert wrong_merge_rounds(audit_merges(old)) == (2,)


def test_a_merge_naming_an_unknown_client_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"clients \['m9'\] that have no true group"):
        audit_merges(document([merge(1, ["m0"], ["m9"])]))
