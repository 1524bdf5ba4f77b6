"""The strategy registry: command-line names to strategy classes.

:data:`STRATEGIES` maps the command-line name of each to its class; :func:`make_strategy`
builds one from a name and a mapping of hyper-parameters, rejecting unknown ones and checking
the others against the strategy's parameter table (:mod:`coordinator.strategies.parameters`)
before anything runs; :func:`strategy_parameters` gives that table and :func:`parse_options`
reads ``KEY=VALUE`` text by it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from coordinator.strategies.base import Strategy
from coordinator.strategies.cfl import CFL
from coordinator.strategies.faacl import FAACL
from coordinator.strategies.fedac import FedAC
from coordinator.strategies.fedavg import FedAvg
from coordinator.strategies.fixed import FixedClusters
from coordinator.strategies.flacc import FLACC
from coordinator.strategies.flhc import FLHC
from coordinator.strategies.ifca import IFCA
from coordinator.strategies.jgl import JointGradientLoss
from coordinator.strategies.local import Local
from coordinator.strategies.parameters import Param, parse_text
from faultfleet.errors import UsageError

STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls
    for cls in (
        FedAvg,
        Local,
        FLACC,
        IFCA,
        CFL,
        FLHC,
        JointGradientLoss,
        FedAC,
        FAACL,
        FixedClusters,
    )
}


def strategy_parameters(name: str) -> dict[str, Param]:
    """The parameter table of strategy ``name``: every hyper-parameter by name, in the order
    of its ``__init__``, with type, range, default, meaning and paper."""
    return _strategy_class(name).parameter_table()


def parse_options(name: str, texts: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` texts (``--option``) read by the types strategy ``name`` declares.

    ``["n_clusters=6", "memory=none"]`` gives ``{"n_clusters": 6, "memory": None}``; an
    unknown key, a value of the wrong type or out of range is a UsageError naming it.
    """
    table = strategy_parameters(name)
    options: dict[str, Any] = {}
    for text in texts:
        key, sep, raw = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--option {text!r}: expected KEY=VALUE, e.g. n_clusters=6")
        if key not in table:
            raise _unknown(name, [key], table)
        options[key] = parse_text(table[key], raw, name)
    return options


def make_strategy(
    name: str, *, fraction: float | None = None, options: Mapping[str, Any] | None = None
) -> Strategy:
    """Build strategy ``name``.

    Parameters
    ----------
    fraction : float, optional
        Client fraction c; ``None`` keeps the strategy's default. Strategies that need every
        client every round (``full_participation``, e.g. CFL) ignore it.
    options : mapping, optional
        Other hyper-parameters by name (e.g. ``{"n_clusters": 6}`` for IFCA).

    Raises
    ------
    UsageError
        For an option the strategy does not take, or a value its table refuses (naming the
        option, the value and the range), before the strategy is used.
    """
    cls = _strategy_class(name)
    valid = strategy_parameters(name)
    given = dict(options or {})
    unknown = sorted(set(given) - set(valid))
    if unknown:
        raise _unknown(name, unknown, valid)
    if fraction is not None and not cls.full_participation and "fraction" not in given:
        given["fraction"] = fraction
    strategy = cls(**given)
    strategy.check_parameters()
    return strategy


def _unknown(name: str, keys: list[str], valid: Mapping[str, Param]) -> UsageError:
    return UsageError(
        f"strategy {name!r} has no option {', '.join(keys)}; its options are "
        f"{', '.join(sorted(valid))} (faultfleet sim --list-options {name})"
    )


def _strategy_class(name: str) -> type[Strategy]:
    if name not in STRATEGIES:
        raise UsageError(
            f"unknown strategy {name!r}; choose one of {', '.join(sorted(STRATEGIES))}"
        )
    return STRATEGIES[name]


__all__ = ["STRATEGIES", "Strategy", "make_strategy", "parse_options", "strategy_parameters"]
