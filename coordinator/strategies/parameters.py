"""Strategy hyper-parameters, declared once per class and checked in one place.

The idea is scikit-learn's ``_parameter_constraints``: every strategy lists its
hyper-parameters in a table (:attr:`~coordinator.strategies.base.Strategy.parameters`), one
:class:`Param` each — name, type, range, default, a one-line meaning and the paper it comes
from. The base class checks a strategy's values against its table
(:func:`check_value`); the registry lists the table (``faultfleet sim --list-options``) and
the command line parses ``--option KEY=VALUE`` by the declared type (:func:`parse_text`).
Rules that tie two parameters together (``gc_low < gc_high``) stay hand-written in the
strategy that has them.

Types accepted, uniformly for every strategy:

- ``int``: a Python or numpy integer, never a bool;
- ``float``: any finite real number (int, float, numpy scalars), never a bool;
- ``bool``: ``True``/``False`` (or numpy's ``bool_``); on the command line ``true``/``false``;
- ``str`` with ``choices``: one of the listed values (choices may also be numbers);
- ``mapping``: a mapping, given from code or a settings file, not on the command line;
- ``optional=True`` adds ``None`` (``none`` on the command line), whose meaning ``none``
  says.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, SupportsFloat, cast

import numpy as np

from faultfleet.errors import UsageError

Kind = Literal["int", "float", "bool", "str", "mapping"]

NONE_WORDS = ("none", "null")
"""What ``--option KEY=none`` may say for ``None``."""


@dataclass(frozen=True)
class Param:
    """One hyper-parameter of a strategy.

    Attributes
    ----------
    name : str
        The keyword of ``__init__`` and the attribute it is stored under.
    kind : {"int", "float", "bool", "str", "mapping"}
    default : object
        Equal to the default of ``__init__`` (``tests/coordinator/strategies/
        test_parameters.py`` checks every registered strategy).
    description : str
        One line: what it is, with its unit.
    reference : str
        Where it comes from, e.g. ``"FLACC eq. 16; 0 in §VI"``; empty for our own options.
    low, high : float or None
        Bounds of the range; None is unbounded.
    low_open, high_open : bool
        Whether the bound is excluded (``(0, 1]`` is ``low=0, low_open=True, high=1``).
    choices : tuple
        The only values allowed, when not empty.
    optional : bool
        Whether ``None`` is allowed too.
    none : str
        What ``None`` means, e.g. ``"T = ∞, never forget"``.
    """

    name: str
    kind: Kind
    default: Any
    description: str
    reference: str = ""
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[Any, ...] = ()
    optional: bool = False
    none: str = ""

    def allowed(self) -> str:
        """What the value must be, in words: ``"an integer >= 1 or none (T = ∞)"``."""
        if self.choices:
            text = "one of " + ", ".join(_show(c) for c in self.choices)
        elif self.kind == "bool":
            text = "true or false"
        elif self.kind == "mapping":
            text = "a mapping"
        elif self.kind == "str":
            text = "text"
        else:
            noun = "an integer" if self.kind == "int" else "a finite number"
            text = f"{noun}{self._range()}"
        if self.optional:
            text += " or none" + (f" ({self.none})" if self.none else "")
        return text

    def _range(self) -> str:
        low, high = self.low, self.high
        if low is not None and low == high:
            return f" equal to {low:g}"
        if low is not None and high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f" in {left}{low:g}, {high:g}{right}"
        if low is not None:
            return f" {'>' if self.low_open else '>='} {low:g}"
        if high is not None:
            return f" {'<' if self.high_open else '<='} {high:g}"
        return ""

    def admits(self, value: object) -> bool:
        """Whether ``value`` has the declared type and lies in the declared range."""
        if value is None:
            return self.optional
        if not _has_kind(self.kind, value):
            return False
        if self.choices:
            return value in self.choices
        if self.kind in ("int", "float"):
            number = float(cast(SupportsFloat, value))
            return math.isfinite(number) and self._inside(number)
        return True

    def _inside(self, number: float) -> bool:
        low, high = self.low, self.high
        above = low is None or (number > low if self.low_open else number >= low)
        below = high is None or (number < high if self.high_open else number <= high)
        return above and below

    def refusal(self, value: object, owner: str) -> str:
        """The one-line message for a ``value`` of this parameter that is not admitted."""
        where = f" ({self.reference})" if self.reference else ""
        return (
            f"{owner}: {self.name} must be {self.allowed()}, got {value!r}; {self.name} is "
            f"{self.description}{where}; use an allowed value, e.g. the default "
            f"{_show(self.default)}"
        )


FRACTION = Param(
    "fraction",
    "float",
    0.25,
    "the client fraction c: max(1, round(c · m)) of the m clients are sampled per round",
    "FLACC §VI: 0.25",
    low=0.0,
    low_open=True,
    high=1.0,
)
"""The client fraction every strategy takes (declared by the base class); a strategy may
redeclare it (CFL: only 1)."""


def declared_in(cls: type) -> dict[str, Param]:
    """The hyper-parameters of class ``cls`` by name, in the order of its ``__init__``.

    Each class of the hierarchy lists its own in a ``parameters`` tuple; a class lower in
    the hierarchy overrides a declaration of the same name. Keyword-only names of
    ``__init__`` are kept, in order; a declared name ``__init__`` does not take (a subclass
    that fixes it) is left out.
    """
    declared: dict[str, Param] = {}
    for klass in reversed(cls.__mro__):
        for param in vars(klass).get("parameters", ()):
            declared[param.name] = param
    taken = [
        p.name
        for p in inspect.signature(cls.__init__).parameters.values()  # type: ignore[misc]
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    return {name: declared[name] for name in taken if name in declared}


def check_value(param: Param, value: object, owner: str) -> None:
    """Raise a :class:`UsageError` naming ``param``, ``value`` and the range if not admitted.

    ``owner`` names the strategy in the message (``"flacc"``).
    """
    if not param.admits(value):
        raise UsageError(param.refusal(value, owner))


def parse_text(param: Param, text: str, owner: str) -> Any:
    """``--option NAME=TEXT`` read by the declared type, then checked.

    ``none``/``null`` give None where the parameter is optional; a bool takes ``true`` or
    ``false``; a number is read as its kind, also when it is a choice (``version=2`` gives
    the int 2); text is taken as it is.
    """
    raw = text.strip()
    lowered = raw.lower()
    value: Any = raw
    if param.optional and lowered in NONE_WORDS:
        return None
    if param.kind == "mapping":
        raise UsageError(
            f"{owner}: {param.name} is {param.description} and cannot be given as "
            f"--option {param.name}=...; set it from code or a settings file"
        )
    if param.kind == "bool":
        value = {"true": True, "false": False}.get(lowered, raw)
    elif param.kind in ("int", "float"):
        value = _number(raw, int if param.kind == "int" else float)
    check_value(param, value, owner)
    return value


def _number(raw: str, kind: type[int] | type[float]) -> object:
    """``raw`` as a number of ``kind``, or ``raw`` itself where it is none (refused next)."""
    try:
        return kind(raw)
    except ValueError:
        return raw


def describe(params: Mapping[str, Param]) -> list[str]:
    """One line per parameter, for ``faultfleet sim --list-options``.

    ``name  type and range  default  description (reference)``, columns aligned.
    """
    rows = [
        (p.name, p.allowed(), _show(p.default), p.description + _paren(p.reference))
        for p in params.values()
    ]
    width = [max(len(row[i]) for row in rows) for i in range(3)] if rows else [0, 0, 0]
    header = ("option", "allowed", "default", "meaning (source)")
    width = [max(w, len(h)) for w, h in zip(width, header, strict=False)]
    lines = [
        f"{header[0]:<{width[0]}}  {header[1]:<{width[1]}}  {header[2]:<{width[2]}}  {header[3]}"
    ]
    lines += [
        f"{name:<{width[0]}}  {allowed:<{width[1]}}  {default:<{width[2]}}  {meaning}"
        for name, allowed, default, meaning in rows
    ]
    return lines


def _paren(text: str) -> str:
    return f" ({text})" if text else ""


def _show(value: object) -> str:
    """A value as the command line writes it: ``none``, ``true``, ``'ward'``, ``0.25``."""
    if value is None:
        return "none"
    if _is_bool(value):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _has_kind(kind: Kind, value: object) -> bool:
    if kind == "int":
        return isinstance(value, int | np.integer) and not _is_bool(value)
    if kind == "float":
        return _is_number(value)
    if kind == "bool":
        return _is_bool(value)
    if kind == "str":
        return isinstance(value, str)
    return isinstance(value, Mapping)


def _is_bool(value: object) -> bool:
    return isinstance(value, bool | np.bool_)


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real | np.integer | np.floating) and not _is_bool(value)
