"""Numeric argument types of the ``faultfleet`` subcommands, checked when the line is parsed.

Each is an argparse ``type=``: a value out of range raises
:class:`argparse.ArgumentTypeError`, which argparse prints as one usage line naming the
option and exit status 2. Kept apart from :mod:`faultfleet_apps.cli.arguments` (which
re-exports them) because they need nothing else: ``faultfleet agent`` registers its options
without importing the strategies or the simulator.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def whole(minimum: int) -> Callable[[str], int]:
    """Type of a whole number >= ``minimum`` (a seed, a count, rounds)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be a whole number >= {minimum}, got {text!r}"
            ) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {value}")
        return value

    parse.__name__ = f"whole number >= {minimum}"
    return parse


def number(
    *, above: float | None = None, at_least: float | None = None, at_most: float | None = None
) -> Callable[[str], float]:
    """Type of a finite number in a range: ``> above``, ``>= at_least``, ``<= at_most``."""
    bounds = [f"> {above:g}"] if above is not None else []
    bounds += [f">= {at_least:g}"] if at_least is not None else []
    bounds += [f"<= {at_most:g}"] if at_most is not None else []
    wanted = "a finite number" + (f" {' and '.join(bounds)}" if bounds else "")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}") from None
        inside = (
            math.isfinite(value)
            and (above is None or value > above)
            and (at_least is None or value >= at_least)
            and (at_most is None or value <= at_most)
        )
        if not inside:
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text}")
        return value

    parse.__name__ = wanted
    return parse


SEED = whole(0)
"""A random seed: numpy's generators take whole numbers >= 0."""
POSITIVE = whole(1)
"""A count of one or more: rounds, epochs, machines, threads, processes."""
POSITIVE_NUMBER = number(above=0)
"""A duration, a rate, a speed: a finite number > 0."""
NON_NEGATIVE_NUMBER = number(at_least=0)
"""A scale or a spread: a finite number >= 0."""
FINITE_NUMBER = number()
"""A finite number of either sign (a signal-to-noise ratio in dB)."""
