"""Label-groups fleets: the ``LABELS*N;...`` text, its errors, and the federation it builds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from faultfleet.errors import UsageError
from signal_pipeline.conditions import N_LABELS, Condition
from signal_pipeline.label_groups import (
    LabelGroup,
    class_labels,
    format_label_groups,
    label_groups,
    parse_label_groups,
)
from signal_pipeline.scenarios import MIXED_FAULT_GROUPS, mixed_fault

WINDOWS = (20, 30)


def test_the_issue_example_reads_group_by_group() -> None:
    groups = parse_label_groups("0,1*8;2,3*8;4,8*6")

    assert groups == (
        LabelGroup((0, 1), 8),
        LabelGroup((2, 3), 8),
        LabelGroup((4, 8), 6),
    )


def test_spaces_around_items_are_allowed_and_formatting_drops_them() -> None:
    groups = parse_label_groups(" 0, 19 * 2 ; 12,3*1 ")

    assert groups == (LabelGroup((0, 19), 2), LabelGroup((12, 3), 1))
    assert format_label_groups(groups) == "0,19*2;12,3*1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the groups are empty"),
        ("  ", "the groups are empty"),
        ("0,1*8;;2,3*8", "group 1 is empty"),
        ("0,1*8;", "group 1 is empty"),
        (";0,1*8", "group 0 is empty"),
        ("0,1", r"group 0 \('0,1'\) has no machine count: end it with \*N"),
        ("0,1*", r"machine count '' is not a whole number"),
        ("0,1*2*3", r"more than one '\*'"),
        ("*3", "names no labels before"),
        ("0,,1*3", "label '' is not a whole number"),
        ("a,1*3", "label 'a' is not a whole number"),
        ("-1,1*3", "label '-1' is not a whole number"),
        ("0,1*-2", "machine count '-2' is not a whole number"),
        ("0,1*1.5", "machine count '1.5' is not a whole number"),
        ("0,20*3", "names label 20: labels are 0-19"),
        ("0,1*0", r"has 0 machines: give \*N with N >= 1"),
        ("3,1,3*2", "repeats label 3: name each label once"),
        ("0,1*2;2*2;1,0*4", "groups 0 and 2 hold the same labels"),
        ("\u0663*2", "is not a whole number"),  # an Arabic-Indic digit is not 0-9
    ],
)
def test_malformed_groups_are_one_line_errors_naming_the_group(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        parse_label_groups(text)
    assert "\n" not in str(caught.value)


groups_strategy = st.lists(
    st.tuples(
        st.lists(st.integers(0, N_LABELS - 1), min_size=1, max_size=6, unique=True),
        st.integers(1, 64),
    ),
    min_size=1,
    max_size=12,
    unique_by=lambda group: frozenset(group[0]),
).map(lambda groups: tuple(LabelGroup(tuple(labels), n) for labels, n in groups))


@given(groups_strategy)
def test_formatted_groups_read_back_as_themselves(groups: tuple[LabelGroup, ...]) -> None:
    text = format_label_groups(groups)

    assert parse_label_groups(text) == groups
    assert format_label_groups(parse_label_groups(text)) == text


@given(st.text(alphabet="0123456789,*; a-", max_size=30))
def test_any_text_is_read_or_refused_with_a_usage_error(text: str) -> None:
    message = ""
    try:
        groups = parse_label_groups(text)
    except UsageError as error:
        message = str(error)
    else:
        assert parse_label_groups(format_label_groups(groups)) == groups
    assert "\n" not in message


def test_the_six_flacc_groups_give_mixed_fault_client_for_client() -> None:
    # Prepare: the mixed-fault fleet written as label groups of two machines
    text = ";".join(",".join(map(str, group)) + "*2" for group in MIXED_FAULT_GROUPS)

    # Execute
    fleet = label_groups(5, groups=parse_label_groups(text), windows_per_client=WINDOWS)
    reference = mixed_fault(5, clients_per_group=2, windows_per_client=WINDOWS)

    # Assert: the same machines, windows and labels; the same 12 classes
    assert fleet.class_names == reference.class_names
    for ours, theirs in zip(fleet.clients, reference.clients, strict=True):
        assert (ours.client_id, ours.group) == (theirs.client_id, theirs.group)
        for name, data in ours.splits().items():
            np.testing.assert_array_equal(data.x, theirs.splits()[name].x)
            np.testing.assert_array_equal(data.y, theirs.splits()[name].y)


def test_unequal_groups_sharing_a_label_use_only_their_classes() -> None:
    # Prepare: 1, 3 and 2 machines; label 12 in two groups; labels 4-11 unused
    groups = parse_label_groups("0,12*1;12,19*3;3,16*2")

    # Execute
    fleet = label_groups(1, groups=groups, windows_per_client=WINDOWS)

    # Assert: classes are the used labels in label order, named after their conditions
    assert class_labels(groups) == (0, 3, 12, 16, 19)
    assert fleet.n_classes == 5
    assert fleet.class_names == tuple(Condition.from_label(x).name for x in (0, 3, 12, 16, 19))
    assert fleet.groups.tolist() == [0, 1, 1, 1, 2, 2]
    assert [c.client_id for c in fleet.clients] == ["m00", "m01", "m02", "m03", "m04", "m05"]
    expected_classes = {0: {0, 2}, 1: {2, 4}, 2: {1, 3}}
    for client in fleet.clients:
        for data in client.splits().values():
            assert set(np.unique(data.y).tolist()) == expected_classes[client.group]
    assert fleet.metadata["groups"] == "0,12*1;12,19*3;3,16*2"
    assert fleet.metadata["class_labels"] == [0, 3, 12, 16, 19]


def test_groups_given_in_code_are_checked_too() -> None:
    with pytest.raises(UsageError, match="group 0 \\('0,0\\*1'\\) repeats label 0"):
        label_groups(0, groups=[LabelGroup((0, 0), 1)], windows_per_client=WINDOWS)
    with pytest.raises(UsageError, match="a fleet needs at least one group"):
        label_groups(0, groups=[], windows_per_client=WINDOWS)
