"""Argument types every ``faultfleet`` subcommand shares, checked when the line is parsed.

Each helper is an argparse ``type=``: a value out of range raises
:class:`argparse.ArgumentTypeError`, which argparse prints as one usage line naming the
option (``faultfleet sim: error: argument --rounds: must be a whole number >= 1, got -1``)
and exit status 2, before anything runs.

:func:`output_folder` and :func:`output_file_folder` create the folder an option names,
turning an operating-system error into a :class:`~faultfleet.errors.UsageError` that names
the option and the path.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coordinator.strategies.parameters import FRACTION as STRATEGY_FRACTION
from coordinator.strategies.parameters import Param, parse_text
from faultfleet.errors import UsageError
from faultfleet_apps.cli.numbers import (
    FINITE_NUMBER,
    NON_NEGATIVE_NUMBER,
    POSITIVE,
    POSITIVE_NUMBER,
    SEED,
    number,
    whole,
)
from signal_pipeline.label_groups import LabelGroups, parse_label_groups

__all__ = [
    "FINITE_NUMBER",
    "NON_NEGATIVE_NUMBER",
    "POSITIVE",
    "POSITIVE_NUMBER",
    "SEED",
    "declared",
    "number",
    "output_file_folder",
    "output_folder",
    "whole",
]


def declared(param: Param) -> Callable[[str], Any]:
    """Type of an option that sets a strategy parameter, checked by its declaration
    (:mod:`coordinator.strategies.parameters`): ``--fraction`` is the strategies' fraction."""
    wanted = param.allowed()

    def parse(text: str) -> Any:
        try:
            return parse_text(param, text, param.name)
        except UsageError:
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text}") from None

    parse.__name__ = wanted
    return parse


FRACTION = declared(STRATEGY_FRACTION)
"""The client fraction c, as every strategy declares it: in (0, 1]."""
MACHINE_SPREAD_HELP = "how much machines differ (default 0.25: nominally identical machines)"
"""Help of ``--machine-spread``, whose type is :data:`NON_NEGATIVE_NUMBER`."""
GROUPS_HELP = (
    "the label-groups fleet: groups separated by ';', each its condition labels (0-19) "
    "separated by ',' and *N machines, e.g. '0,1*8;2,3*8;4,8*6'"
)
"""Help of ``--groups``, whose type is :func:`label_groups_option`."""


def label_groups_option(text: str) -> LabelGroups:
    """Type of ``--groups``: a fleet of label groups (:mod:`signal_pipeline.label_groups`)."""
    try:
        return parse_label_groups(text)
    except UsageError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def check_fleet_options(scenario: str, groups: object, clients_per_group: int | None) -> None:
    """``--groups`` goes with ``--scenario label-groups`` only, ``--clients-per-group``
    with every other scenario."""
    if scenario == "label-groups":
        if groups is None:
            raise UsageError(
                "--scenario label-groups needs --groups, e.g. --groups '0,1*8;2,3*8;4,8*6'"
            )
        if clients_per_group is not None:
            raise UsageError(
                "--clients-per-group does not apply to label-groups: give each group's "
                "machines as *N in --groups"
            )
    elif groups is not None:
        raise UsageError(f"--groups needs --scenario label-groups (got --scenario {scenario})")


def output_folder(path: Path, option: str = "--out") -> Path:
    """Create the folder ``option`` names (and its parents); returns ``path``.

    Raises
    ------
    UsageError
        The folder cannot be created or a file is in its place.
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UsageError(
            f"{option} {path}: a file is in the way of that folder; choose another path"
        ) from None
    except OSError as error:
        raise UsageError(
            f"{option} {path}: cannot create the folder ({error.strerror}); choose a folder "
            "you can write to"
        ) from error
    return path


def output_file_folder(path: Path, option: str = "--out") -> Path | None:
    """Create the folder of output file ``path``; returns the folder if it was created.

    Raises
    ------
    UsageError
        As :func:`output_folder`.
    """
    folder = path.parent
    if folder.is_dir():
        return None
    output_folder(folder, option)
    return folder
