"""Fleets built from groups of condition labels: the ``label-groups`` scenario.

A fleet is written as groups separated by ``;``, each group its condition labels separated
by ``,`` and ``*N`` for its N machines::

    0,1*8;2,3*8;4,8*6;12,17*2

Labels are the simulator's 20 conditions (:mod:`signal_pipeline.conditions`: 0-11 FLACC
Table II, 12-15 healthy bearing, 16-19 inner race). Groups may differ in size and a label
may appear in several groups; within one group a label appears once, and no two groups
hold the same set of labels (they would be one group the ground truth splits in two).

Every machine is a ``mixed-fault`` machine (:func:`signal_pipeline.scenarios.simulate_groups`:
its own :class:`~signal_pipeline.machine.MachineProfile`, train/test windows cut in time
per condition plus the extra validation slice). The classes of the federation are the
labels the fleet uses, in label order, numbered 0, 1, ... (class ``k`` is the ``k``-th
smallest label used) and named after their conditions; a machine's ground-truth group is
the index of its group. With the six groups of FLACC §VI and equal sizes the federation is
``mixed_fault``'s, client for client.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from faultfleet.errors import UsageError
from faultfleet.types import IntArray
from signal_pipeline.conditions import N_LABELS, label_names
from signal_pipeline.federation import ClientData, Dataset, Federation
from signal_pipeline.scenarios import ProgressCallback, VibrationSettings, simulate_groups

SYNTAX = "write groups as LABELS*N separated by ';', e.g. 0,1*8;2,3*8;4,8*6"
"""The reminder every parse error ends with."""

_NUMBER = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class LabelGroup:
    """One group of a fleet: the condition labels its machines hold and how many machines.

    Parameters
    ----------
    labels : tuple of int
        Condition labels in 0..19, distinct, in the order written.
    machines : int
        Number of machines in the group, >= 1.
    """

    labels: tuple[int, ...]
    machines: int


LabelGroups = tuple[LabelGroup, ...]
"""A fleet: its groups in ground-truth order."""


def _whole(text: str, what: str, where: str) -> int:
    stripped = text.strip()
    if not _NUMBER.fullmatch(stripped):
        raise UsageError(f"{where}: {what} {text.strip()!r} is not a whole number; {SYNTAX}")
    return int(stripped)


def _parse_group(text: str, index: int) -> LabelGroup:
    where = f"group {index} ({text.strip()!r})"
    if not text.strip():
        raise UsageError(f"group {index} is empty (two ';' in a row or one at an end); {SYNTAX}")
    labels_text, star, count_text = text.partition("*")
    if not star:
        raise UsageError(f"{where} has no machine count: end it with *N; {SYNTAX}")
    if "*" in count_text:
        raise UsageError(f"{where} has more than one '*'; {SYNTAX}")
    if not labels_text.strip():
        raise UsageError(f"{where} names no labels before '*'; {SYNTAX}")
    labels = tuple(_whole(label, "label", where) for label in labels_text.split(","))
    machines = _whole(count_text, "machine count", where)
    return LabelGroup(labels, machines)


def parse_label_groups(text: str) -> LabelGroups:
    """Read a fleet written ``LABELS*N;LABELS*N;...`` (spaces around items are allowed).

    Raises
    ------
    UsageError
        One line naming the group and what is wrong: an empty group, a label that is not
        a whole number or is outside 0..19, a label repeated within a group, a machine
        count below 1, a missing or doubled ``*``, two groups with the same labels.
    """
    if not text.strip():
        raise UsageError(f"the groups are empty; {SYNTAX}")
    return check_label_groups(
        tuple(_parse_group(part, index) for index, part in enumerate(text.split(";")))
    )


def check_label_groups(groups: Sequence[LabelGroup]) -> LabelGroups:
    """``groups`` as a tuple, checked as :func:`parse_label_groups` checks what it reads."""
    checked = tuple(groups)
    if not checked:
        raise UsageError(f"a fleet needs at least one group; {SYNTAX}")
    seen: dict[frozenset[int], int] = {}
    for index, group in enumerate(checked):
        where = f"group {index} ({format_label_groups([group])!r})"
        if not group.labels:
            raise UsageError(f"{where} names no labels; {SYNTAX}")
        outside = [label for label in group.labels if not 0 <= label < N_LABELS]
        if outside:
            raise UsageError(
                f"{where} names label {outside[0]}: labels are 0-{N_LABELS - 1} (0-11 FLACC "
                "Table II, 12-15 healthy bearing, 16-19 inner race)"
            )
        repeated = sorted({label for label in group.labels if group.labels.count(label) > 1})
        if repeated:
            raise UsageError(f"{where} repeats label {repeated[0]}: name each label once")
        if group.machines < 1:
            raise UsageError(f"{where} has {group.machines} machines: give *N with N >= 1")
        same = seen.setdefault(frozenset(group.labels), index)
        if same != index:
            raise UsageError(
                f"groups {same} and {index} hold the same labels: make them one group with "
                "the machines of both"
            )
    return checked


def format_label_groups(groups: Sequence[LabelGroup]) -> str:
    """The text :func:`parse_label_groups` reads back as ``groups`` (no spaces)."""
    return ";".join(
        ",".join(str(label) for label in group.labels) + f"*{group.machines}" for group in groups
    )


def class_labels(groups: Sequence[LabelGroup]) -> tuple[int, ...]:
    """The condition labels a fleet uses, in label order: class ``k`` is the ``k``-th."""
    return tuple(sorted({label for group in groups for label in group.labels}))


def _to_classes(client: ClientData, lookup: IntArray) -> ClientData:
    return client.map_splits(lambda _, data: Dataset(data.x, lookup[data.y]))


def label_groups(
    seed: int = 0,
    *,
    groups: Sequence[LabelGroup],
    windows_per_client: tuple[int, int] = (200, 600),
    settings: VibrationSettings | None = None,
    progress: ProgressCallback | None = None,
) -> Federation:
    """The fleet ``groups`` (see the module docstring), simulated from ``seed``.

    Parameters
    ----------
    seed : int
        The same seed gives the same machines, window counts and signals.
    groups : sequence of LabelGroup
        The fleet, e.g. ``parse_label_groups("0,1*8;2,3*8")``.
    windows_per_client : (low, high)
        Train+test windows per machine, drawn uniformly, split at random among its group's
        labels (at least 2 each); validation windows come on top (``settings``).
    settings : VibrationSettings
    progress : callable, optional
        ``progress(done, total)`` after each machine.

    Returns
    -------
    Federation
        ``name="label-groups"``, clients ``m00``, ``m01``, ... in group order, ``group`` =
        index of the machine's group; ``n_classes`` = number of labels used, class ``k``
        named after the ``k``-th smallest. ``metadata["groups"]`` is the fleet's text and
        ``metadata["class_labels"]`` the condition label of each class.
    """
    checked = check_label_groups(groups)
    settings = settings or VibrationSettings()
    clients = simulate_groups(
        seed,
        [group.labels for group in checked],
        [group.machines for group in checked],
        windows_per_client,
        settings,
        progress,
    )
    used = class_labels(checked)
    lookup = np.full(N_LABELS, -1, dtype=np.int64)
    lookup[list(used)] = np.arange(len(used), dtype=np.int64)
    return Federation(
        name="label-groups",
        clients=tuple(_to_classes(client, lookup) for client in clients),
        n_classes=len(used),
        class_names=label_names(used),
        metadata={
            "seed": seed,
            "groups": format_label_groups(checked),
            "class_labels": list(used),
            **asdict(settings),
        },
    )
