"""Every strategy's parameter table: declared once, agreeing with ``__init__``, checked alike.

Run against every registered strategy (and every declared parameter), like the contract
suite: the defaults satisfy the table, an ill-typed or out-of-range value of each parameter
is refused by name before anything runs, numpy scalars are accepted everywhere, and
``--option`` text is read by the declared type.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import numpy as np
import pytest

from coordinator.strategies.parameters import Param, check_value, describe, parse_text
from coordinator.strategies.registry import (
    STRATEGIES,
    make_strategy,
    parse_options,
    strategy_parameters,
)
from faultfleet.errors import UsageError

DECLARED = [(name, param) for name in sorted(STRATEGIES) for param in strategy_parameters(name)]
NUMBERS = [
    (name, key)
    for name, key in DECLARED
    if strategy_parameters(name)[key].kind in ("int", "float", "bool")
]


def keyword_defaults(name: str) -> dict[str, Any]:
    signature = inspect.signature(STRATEGIES[name].__init__)
    return {
        p.name: p.default
        for p in signature.parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def bad_values(param: Param) -> list[object]:
    """Values of the wrong type or outside the declared range (each one refused)."""
    wrong_type: dict[str, list[object]] = {
        "int": [1.5, True, "3"],
        "float": [math.nan, math.inf, True, "0.5"],
        "bool": [1, "yes"],
        "str": [3],
        "mapping": [5, "a=1"],
    }
    values = list(wrong_type[param.kind])
    if param.choices:
        values.append("no-such-choice" if param.kind == "str" else 99)
    if param.low is not None:
        step = 1 if param.kind == "int" else 0.5
        values.append(param.low if param.low_open else param.low - step)
    if param.high is not None:
        step = 1 if param.kind == "int" else 0.5
        values.append(param.high if param.high_open else param.high + step)
    if not param.optional:
        values.append(None)
    return values


def good_value(param: Param) -> Any:
    """A value inside the table: the default, or the lower bound where the default is None."""
    if param.default is not None:
        return param.default
    if param.kind == "mapping":
        return {}
    assert param.low is not None
    return param.low + (1 if param.kind == "int" else 0.5)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_the_table_names_every_keyword_of_init_with_its_default(name: str) -> None:
    table = strategy_parameters(name)

    assert list(table) == list(keyword_defaults(name))
    assert {k: p.default for k, p in table.items()} == keyword_defaults(name)
    for key, param in table.items():
        assert param.name == key
        assert param.description
        assert not (param.choices and (param.low is not None or param.high is not None))


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_the_defaults_satisfy_the_table(name: str) -> None:
    strategy = STRATEGIES[name]()

    strategy.check_parameters()
    for param in strategy_parameters(name).values():
        assert getattr(strategy, param.name) == param.default


@pytest.mark.parametrize(
    ("name", "param", "value"),
    [
        pytest.param(name, param, value, id=f"{name}-{param.name}-{value!r}")
        for name, key in DECLARED
        for param in [strategy_parameters(name)[key]]
        for value in bad_values(param)
    ],
)
def test_a_bad_value_is_refused_by_name_when_the_strategy_is_built(
    name: str, param: Param, value: object
) -> None:
    with pytest.raises(UsageError) as refused:
        make_strategy(name, options={param.name: value})

    message = str(refused.value)
    assert message.startswith(f"{name}: {param.name} must be {param.allowed()}, got {value!r}")
    assert "\n" not in message
    assert "e.g. the default" in message


@pytest.mark.parametrize(("name", "key"), NUMBERS, ids=[f"{n}-{k}" for n, k in NUMBERS])
def test_numpy_scalars_are_accepted_for_every_number(name: str, key: str) -> None:
    param = strategy_parameters(name)[key]
    value = good_value(param)
    scalar = {"int": np.int64, "float": np.float64, "bool": np.bool_}[param.kind](value)

    strategy = make_strategy(name, options={key: scalar})

    assert getattr(strategy, key) == value


@pytest.mark.parametrize("value", [np.int32(3), np.int64(3), np.uint8(3), 3])
def test_every_integer_type_builds_and_runs_ifca(value: object) -> None:
    strategy = make_strategy("ifca", options={"n_clusters": value})

    strategy.initialize(["a", "b"], lambda i: np.full(2, i, dtype=np.float32))

    assert sorted(strategy.models) == ["cluster-0", "cluster-1", "cluster-2"]


def test_make_strategy_refuses_before_anything_runs() -> None:
    with pytest.raises(UsageError, match=r"ifca: n_clusters must be an integer >= 1, got 0"):
        make_strategy("ifca", options={"n_clusters": 0})


def test_a_value_changed_after_building_is_checked_again_on_initialize() -> None:
    strategy = make_strategy("flacc")
    strategy.n_sep = 0  # type: ignore[attr-defined]

    with pytest.raises(UsageError, match="flacc: n_sep must be an integer >= 1, got 0"):
        strategy.initialize(["a", "b"], lambda i: np.zeros(2, dtype=np.float32))


@pytest.mark.parametrize(
    ("name", "texts", "expected"),
    [
        ("ifca", ["n_clusters=6"], {"n_clusters": 6}),
        ("flacc", ["memory=none", "alpha0=0.1"], {"memory": None, "alpha0": 0.1}),
        ("flacc", ["next_pair=true", "n_sep=3"], {"next_pair": True, "n_sep": 3}),
        ("flacc", ["next_pair=False"], {"next_pair": False}),
        ("faacl", ["version=2", "patience=None"], {"version": 2, "patience": None}),
        (
            "flhc",
            ["linkage=average", "distance_threshold=1.5"],
            {"linkage": "average", "distance_threshold": 1.5},
        ),
        ("cfl", ["criterion=similarity", "eps1=1"], {"criterion": "similarity", "eps1": 1.0}),
        ("fedavg", ["fraction=0.5"], {"fraction": 0.5}),
    ],
)
def test_options_are_read_by_their_declared_type(
    name: str, texts: list[str], expected: dict[str, object]
) -> None:
    options = parse_options(name, texts)

    assert options == expected
    assert [type(v) for v in options.values()] == [type(v) for v in expected.values()]
    make_strategy(name, options=options)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("ifca", "n_clusters=six", "ifca: n_clusters must be an integer >= 1, got 'six'"),
        ("ifca", "n_clusters=2.0", "n_clusters must be an integer >= 1, got '2.0'"),
        ("flacc", "n_sep=none", "n_sep must be an integer >= 1, got 'none'"),
        ("flacc", "next_pair=yes", "next_pair must be true or false, got 'yes'"),
        (
            "flhc",
            "linkage=median",
            "linkage must be one of 'average', 'complete', 'single', 'ward', got 'median'",
        ),
        ("faacl", "version=3", "version must be one of 1, 2, got 3"),
        ("flacc", "alpha0=nan", r"alpha0 must be a finite number in \(-1, 1\], got nan"),
        ("ifca", "k=3", "strategy 'ifca' has no option k; its options are fraction, n_clusters"),
        ("ifca", "n_clusters", "expected KEY=VALUE"),
        ("fixed", "assignment=a:1", "assignment is .* cannot be given as --option"),
    ],
)
def test_ill_typed_option_text_is_refused_naming_it(name: str, text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_options(name, [text])


def test_ranges_read_as_they_are_declared() -> None:
    assert Param("x", "float", 0.5, "d", low=0.0, low_open=True, high=1.0).allowed() == (
        "a finite number in (0, 1]"
    )
    assert Param("x", "int", 1, "d", low=1).allowed() == "an integer >= 1"
    assert Param("x", "float", 1.0, "d", low=1.0, high=1.0).allowed() == (
        "a finite number equal to 1"
    )
    memory = Param("memory", "int", 10, "d", low=0, optional=True, none="T = ∞")
    assert memory.allowed() == "an integer >= 0 or none (T = ∞)"
    assert Param("x", "float", 0.0, "d", high=1.0, high_open=True).allowed() == (
        "a finite number < 1"
    )


def test_bounds_are_inclusive_or_exclusive_as_declared() -> None:
    half_open = Param("x", "float", 0.5, "d", low=0.0, low_open=True, high=1.0)

    assert [half_open.admits(v) for v in (0.0, 1e-9, 1.0, 1.0 + 1e-9)] == [
        False,
        True,
        True,
        False,
    ]
    check_value(half_open, np.float32(1.0), "owner")


def test_parse_text_checks_what_it_read() -> None:
    param = Param("n", "int", 1, "d", low=1)

    assert parse_text(param, " 4 ", "owner") == 4
    with pytest.raises(UsageError, match="owner: n must be an integer >= 1, got 0"):
        parse_text(param, "0", "owner")


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_the_listing_shows_every_option_with_its_source(name: str) -> None:
    lines = describe(strategy_parameters(name))

    assert lines[0].split() == ["option", "allowed", "default", "meaning", "(source)"]
    for line, param in zip(lines[1:], strategy_parameters(name).values(), strict=True):
        assert line.startswith(param.name)
        assert param.description in line
        assert param.reference in line
