from __future__ import annotations

import pytest

from signal_pipeline.conditions import (
    N_LABELS,
    BearingCondition,
    Condition,
    RotorCondition,
    label_names,
)

# FLACC Table II, written out by hand: rows are bearing conditions, columns rotor conditions.
TABLE_II = {
    ("A1B1O", "slight-ball-wear"): 0,
    ("A1B1A", "slight-ball-wear"): 1,
    ("A2O", "slight-ball-wear"): 2,
    ("A3A", "slight-ball-wear"): 3,
    ("A1B1O", "severe-ball-wear"): 4,
    ("A1B1A", "severe-ball-wear"): 5,
    ("A2O", "severe-ball-wear"): 6,
    ("A3A", "severe-ball-wear"): 7,
    ("A1B1O", "outer-race"): 8,
    ("A1B1A", "outer-race"): 9,
    ("A2O", "outer-race"): 10,
    ("A3A", "outer-race"): 11,
}


@pytest.mark.parametrize(("names", "label"), TABLE_II.items())
def test_labels_follow_flacc_table_ii(names: tuple[str, str], label: int) -> None:
    condition = Condition(RotorCondition(names[0]), BearingCondition(names[1]))

    assert condition.label == label
    assert Condition.from_label(label) == condition


def test_every_label_round_trips_through_its_name() -> None:
    names = label_names()

    assert len(names) == N_LABELS == 20
    for label, name in enumerate(names):
        assert Condition.parse(name).label == label
        assert Condition.parse(str(label)).label == label
    assert Condition.from_label(12).bearing is BearingCondition.HEALTHY
    assert Condition.from_label(16).bearing is BearingCondition.INNER_RACE


@pytest.mark.parametrize("text", ["20", "A4/outer-race", "A1B1O", "A1B1O/cracked"])
def test_parse_rejects_unknown_conditions(text: str) -> None:
    with pytest.raises(ValueError, match=r"cannot read condition|label must be"):
        Condition.parse(text)
