"""The overlapping-labels federation: four machine groups sharing most of their conditions.

The vibration analogue of the data splits of Lin, Chen et al., "A joint gradient and loss
based clustered federated learning design" (§III-A, Fig. 2). There, 80 devices form four
clusters A–D of 20; each cluster holds 8 of the 10 classes, so any two clusters share at
least 6, and the models have 8 outputs: each cluster's classes are numbered 0..7 in class
order, so one output index means different classes in different clusters. Clustering has to
find the groups from the label *meaning*, not from disjoint label sets.

Here the classes are machine conditions (:mod:`signal_pipeline.conditions`). The default
groups take the label sets of the paper's FashionMNIST table verbatim as condition labels:

* A (group 0): 0, 1, 2, 3, 4, 6, 8, 9 — lacks A1B1A and A3A with severe ball wear;
* B (group 1): 0, 1, 2, 4, 5, 6, 7, 8 — lacks A3A/slight ball wear and A1B1A/outer race;
* C (group 2): 0, 1, 2, 3, 4, 6, 7, 8 — lacks A1B1A/severe ball wear and A1B1A/outer race;
* D (group 3): 0, 1, 2, 3, 4, 5, 6, 9 — lacks A3A/severe ball wear and A1B1O/outer race.

Conditions 0, 1, 2, 4 and 6 are common to all groups; 10 and 11, and the simulator's extra
conditions 12–19, are unused. Slot ``j`` of a group is its ``j``-th condition, so slots
0–2 mean the same condition everywhere and slots 3–7 differ between at least two groups.

Each machine is a ``mixed-fault`` machine (:func:`signal_pipeline.scenarios.mixed_fault`)
simulated with its group's conditions — its own :class:`~signal_pipeline.machine.
MachineProfile`, 85/15 train/test windows cut in time per condition plus the extra
validation slice — whose labels are then renumbered to the group's slots. The paper's table
gives each cluster somewhat different amounts per class; here a machine's windows are split
at random evenly among its conditions, as in ``mixed-fault``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace

import numpy as np

from faultfleet.types import IntArray
from signal_pipeline.conditions import N_LABELS, label_names
from signal_pipeline.federation import ClientData, Dataset, Federation
from signal_pipeline.scenarios import ProgressCallback, VibrationSettings, mixed_fault

OVERLAP_GROUPS: tuple[tuple[int, ...], ...] = (
    (0, 1, 2, 3, 4, 6, 8, 9),
    (0, 1, 2, 4, 5, 6, 7, 8),
    (0, 1, 2, 3, 4, 6, 7, 8),
    (0, 1, 2, 3, 4, 5, 6, 9),
)
"""Conditions of groups A–D: the class sets of the paper's FashionMNIST split (Fig. 2)."""


def slot_names(n_slots: int) -> tuple[str, ...]:
    """Class names of the federation: ``"slot 0"`` … (their meaning depends on the group)."""
    return tuple(f"slot {j}" for j in range(n_slots))


def _check_groups(groups: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    """Groups as tuples of int, checked: at least two, equal sizes >= 2, distinct labels."""
    checked = tuple(tuple(int(label) for label in group) for group in groups)
    if len(checked) < 2:
        raise ValueError(f"groups must list at least two label groups, got {len(checked)}")
    sizes = {len(group) for group in checked}
    if len(sizes) != 1 or min(sizes) < 2:
        raise ValueError(
            f"every group must hold the same number (>= 2) of conditions, since they share "
            f"one output layer; got sizes {[len(g) for g in checked]}"
        )
    for index, group in enumerate(checked):
        if len(set(group)) != len(group):
            raise ValueError(f"group {index} repeats a condition: {list(group)}")
        outside = [label for label in group if not 0 <= label < N_LABELS]
        if outside:
            raise ValueError(f"group {index} names conditions {outside} outside 0..{N_LABELS - 1}")
    return checked


def slot_lookup(group: Sequence[int]) -> IntArray:
    """Condition label → slot for one group, shape (N_LABELS,); −1 for foreign conditions."""
    lookup = np.full(N_LABELS, -1, dtype=np.int64)
    lookup[np.asarray(group, dtype=np.int64)] = np.arange(len(group), dtype=np.int64)
    return lookup


def _relabel(client: ClientData, lookup: IntArray) -> ClientData:
    def to_slots(_: str, data: Dataset) -> Dataset:
        slots = lookup[data.y]
        if np.any(slots < 0):
            raise ValueError(f"client {client.client_id} holds a condition outside its group")
        return Dataset(data.x, slots)

    return client.map_splits(to_slots)


def overlapping_labels(
    seed: int = 0,
    *,
    clients_per_group: int = 20,
    windows_per_client: tuple[int, int] = (200, 600),
    groups: Sequence[Sequence[int]] = OVERLAP_GROUPS,
    settings: VibrationSettings | None = None,
    progress: ProgressCallback | None = None,
) -> Federation:
    """Four groups of machines holding 8 of the conditions each, labelled by slot 0..7.

    Parameters
    ----------
    seed : int
        The same seed gives the same machines, window counts and signals.
    clients_per_group : int
        Machines per group (the paper has 20 devices per cluster).
    windows_per_client : (low, high)
        Train+test windows per machine, drawn uniformly, split at random among its
        conditions (at least 2 each); validation windows come on top (``settings``).
    groups : sequence of condition-label sequences
        The conditions of each group, all of one size n; slot j of a group is its j-th
        condition. Default :data:`OVERLAP_GROUPS`.
    settings : VibrationSettings
    progress : callable, optional
        ``progress(done, total)`` after each machine.

    Returns
    -------
    Federation
        ``name="overlapping-labels"``, clients ``m00``, ``m01``, … in group order,
        ``group`` = index of the machine's group, ``n_classes`` = n with class names
        ``"slot j"``. ``metadata["groups"]`` lists each group's conditions and
        ``metadata["slot_conditions"]`` their names, per group in slot order.
    """
    checked = _check_groups(groups)
    settings = settings or VibrationSettings()
    base = mixed_fault(
        seed,
        clients_per_group=clients_per_group,
        windows_per_client=windows_per_client,
        groups=checked,
        settings=settings,
        progress=progress,
    )
    lookups = [slot_lookup(group) for group in checked]
    clients = tuple(_relabel(c, lookups[c.group]) for c in base.clients)
    n_slots = len(checked[0])
    metadata: dict[str, object] = {
        "seed": seed,
        "scenario": "overlapping-labels",
        "groups": [list(g) for g in checked],
        "slot_conditions": [list(label_names(g)) for g in checked],
        **asdict(settings),
    }
    return replace(
        base,
        name="overlapping-labels",
        clients=clients,
        n_classes=n_slots,
        class_names=slot_names(n_slots),
        metadata=metadata,
    )
