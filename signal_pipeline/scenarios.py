"""Simulated vibration federations: the FLACC mixed-fault case study and its machines.

``mixed-fault`` follows Mehta & Shao (FLACC, IEEE TII 2023, §VI): 48 machines in 6 groups of
8; groups hold labels (0,1), (2,3), (4,8), (5,6), (7,11), (9,10) of Table II; each machine
has 200–600 windows, split 85/15 into train/test. Unlike the paper's single rig, every
machine here is its own :class:`MachineProfile` (``machine_spread`` sets how much they
differ). The validation slice asked for by some methods is simulated *in addition* to the
paper's 85/15 data, so methods that do not use it see exactly the paper's amounts.

Every window of a machine comes from one continuous recording per label, cut in time into
``train | val | test`` segments before windowing, so no test window overlaps a training one.

One edge agent needs only its own machine: :func:`mixed_fault_client` builds machine
``index`` alone, bit-identical to ``mixed_fault(...).clients[index]``, and
:func:`mixed_fault_machine` gives its :class:`MachinePlan` (profile and labels) for a live
stream. All three replay one planning function, so they cannot drift apart; so does
:func:`simulate_groups`, which builds groups of any size (the ``label-groups`` fleets of
:mod:`signal_pipeline.label_groups`). A plant's own recordings make a federation in
:mod:`signal_pipeline.plant_federation`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from faultfleet.errors import UsageError
from faultfleet.types import IntArray
from signal_pipeline.conditions import Condition, label_names
from signal_pipeline.federation import ClientData, Dataset, Federation
from signal_pipeline.machine import MachineProfile
from signal_pipeline.recording import Recording
from signal_pipeline.simulator import DEFAULT_FS_HZ, DEFAULT_SNR_DB, simulate
from signal_pipeline.splitting import (
    SPLIT_NAMES,
    SplitFractions,
    WindowedSplit,
    concatenate_splits,
    split_windows_by_time,
)

MIXED_FAULT_GROUPS: tuple[tuple[int, ...], ...] = ((0, 1), (2, 3), (4, 8), (5, 6), (7, 11), (9, 10))
"""Labels held by each of the six groups of FLACC §VI."""

MIXED_FAULT_CLASS_NAMES: tuple[str, ...] = label_names(tuple(range(12)))
"""The 12 conditions of FLACC Table II, in label order: the mixed-fault classes."""

ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(done, total)`` after each client is built."""


@dataclass(frozen=True)
class VibrationSettings:
    """How client windows are simulated; defaults are documented in docs/simulator.md."""

    window_length: int = 1024
    """Samples per window (85 ms at 12 kHz: about 2.5 shaft turns, 9 outer-race impacts)."""
    fs_hz: float = DEFAULT_FS_HZ
    rpm: float = 1800.0
    """Nominal speed around which each machine's speed is drawn."""
    snr_db: float = DEFAULT_SNR_DB
    machine_spread: float = 0.25
    """How much machines differ (see :meth:`MachineProfile.sample`). 0.25 models nominally
    identical machines, like the single test rig of FLACC §VI; 1.0 a plant of dissimilar
    machines, where pooling a group's data helps little (docs/simulator.md, *Difficulty*)."""
    severity: float = 1.0
    test_fraction: float = 0.15
    val_fraction: float = 0.15
    """Extra validation windows, as a fraction of each client's train+test windows."""

    def __post_init__(self) -> None:
        if self.window_length < 16:
            raise UsageError(f"window_length must be >= 16 samples, got {self.window_length}")
        if not 0.0 < self.test_fraction < 1.0:
            raise UsageError(f"test_fraction must be in (0, 1), got {self.test_fraction}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise UsageError(f"val_fraction must be in [0, 1), got {self.val_fraction}")


def split_datasets(splits: Mapping[str, WindowedSplit], labels: IntArray) -> list[Dataset]:
    return [
        Dataset(
            np.ascontiguousarray(splits[name].windows[:, np.newaxis, :]),
            labels[splits[name].recording_index],
        )
        for name in SPLIT_NAMES
    ]


def simulate_client(
    client_id: str,
    group: int,
    machine: MachineProfile,
    label_counts: Mapping[int, int],
    settings: VibrationSettings,
    rng: np.random.Generator,
) -> ClientData:
    """Simulate one machine's windows: ``label_counts[label]`` train+test windows per label.

    Each label gets one continuous recording holding its train, validation and test windows
    in time order (non-overlapping windows, stride = window length).
    """
    recordings: list[Recording] = []
    fractions: list[SplitFractions] = []
    for label, count in sorted(label_counts.items()):
        if count < 2:
            raise UsageError(f"client {client_id}: label {label} needs >= 2 windows, got {count}")
        n_test = max(1, round(settings.test_fraction * count))
        n_train = count - n_test
        n_val = round(settings.val_fraction * count)
        total = n_train + n_val + n_test
        sim = simulate(
            Condition.from_label(label),
            machine,
            total * settings.window_length / settings.fs_hz,
            rng,
            fs_hz=settings.fs_hz,
            snr_db=settings.snr_db,
            severity=settings.severity,
        )
        recordings.append(sim.to_recording(source=f"{client_id} label {label}"))
        fractions.append(SplitFractions(n_train / total, n_val / total, n_test / total))
    per_recording = [
        split_windows_by_time([recording], settings.window_length, settings.window_length, f)
        for recording, f in zip(recordings, fractions, strict=True)
    ]
    merged = {
        name: concatenate_splits([splits[name] for splits in per_recording], settings.window_length)
        for name in SPLIT_NAMES
    }
    labels = np.array([r.label for r in recordings], dtype=np.int64)
    return ClientData(client_id, group, *split_datasets(merged, labels))


@dataclass(frozen=True)
class MachinePlan:
    """One machine of the mixed-fault federation, as planned before any signal is simulated.

    What a live stream of that machine needs: its physics and the labels it holds.

    Parameters
    ----------
    client_id : str
        ``"m00"``, ``"m01"``, ... in federation order.
    group : int
        Ground-truth group (index into the ``groups`` argument).
    labels : tuple of int
        The group's labels, in group order.
    machine : MachineProfile
        The machine's physical properties (the same object its federation data came from).
    settings : VibrationSettings
        Window length, sampling rate, SNR and severity of its simulated windows.
    label_counts : mapping of label to int
        Train+test windows per label in the federation.
    """

    client_id: str
    group: int
    labels: tuple[int, ...]
    machine: MachineProfile
    settings: VibrationSettings
    label_counts: Mapping[int, int]


@dataclass(frozen=True)
class _ClientPlan:
    """The planned draws of one client: everything but its machine and signals."""

    index: int
    group: int
    labels: tuple[int, ...]
    label_counts: dict[int, int]
    seed: np.random.SeedSequence

    @property
    def client_id(self) -> str:
        return f"m{self.index:02d}"


def _plan_mixed_fault(
    seed: int,
    group_sizes: Sequence[int],
    windows_per_client: tuple[int, int],
    groups: Sequence[Sequence[int]],
) -> list[_ClientPlan]:
    """Every client's group, label counts and seed, in federation order (cheap: no signals).

    Group ``g`` gets ``group_sizes[g]`` clients. The one place the plan random stream is
    drawn, so :func:`mixed_fault`, :func:`simulate_groups` and the single-machine builders
    replay exactly the same draws.
    """
    low, high = windows_per_client
    if not 2 <= low <= high:
        raise UsageError(f"windows_per_client must be 2 <= low <= high, got {windows_per_client}")
    if len(group_sizes) != len(groups) or min(group_sizes, default=0) < 1:
        raise UsageError(
            f"every group needs >= 1 machine (clients_per_group), got sizes {list(group_sizes)} "
            f"for {len(groups)} group(s)"
        )
    total = sum(group_sizes)
    root = np.random.SeedSequence(seed)
    plan_rng = np.random.default_rng(root.spawn(1)[0])
    client_seeds = root.spawn(total)
    plans: list[_ClientPlan] = []
    for group, (group_labels, size) in enumerate(zip(groups, group_sizes, strict=True)):
        labels = tuple(int(label) for label in group_labels)
        for _ in range(size):
            index = len(plans)
            count = int(plan_rng.integers(low, high + 1))
            split = plan_rng.multinomial(
                count - 2 * len(labels), np.full(len(labels), 1 / len(labels))
            )
            label_counts = {label: int(n) + 2 for label, n in zip(labels, split, strict=True)}
            plans.append(_ClientPlan(index, group, labels, label_counts, client_seeds[index]))
    return plans


def _select(plans: Sequence[_ClientPlan], index: int) -> _ClientPlan:
    if isinstance(index, bool) or not isinstance(index, int | np.integer):
        raise TypeError(f"index must be an int machine index, got {index!r}")
    if not 0 <= index < len(plans):
        raise IndexError(
            f"machine index {index} is out of range: this mixed-fault federation has "
            f"{len(plans)} machines (0 to {len(plans) - 1}); pick an index in that range or "
            "raise clients_per_group"
        )
    return plans[int(index)]


def _machine(
    plan: _ClientPlan, settings: VibrationSettings
) -> tuple[MachineProfile, np.random.Generator]:
    """The client's machine and the generator, positioned where its signals are drawn."""
    rng = np.random.default_rng(plan.seed)
    machine = MachineProfile.sample(rng, settings.machine_spread, rpm=settings.rpm)
    return machine, rng


def _build_client(plan: _ClientPlan, settings: VibrationSettings) -> ClientData:
    machine, rng = _machine(plan, settings)
    return simulate_client(plan.client_id, plan.group, machine, plan.label_counts, settings, rng)


def simulate_groups(
    seed: int,
    groups: Sequence[Sequence[int]],
    group_sizes: Sequence[int],
    windows_per_client: tuple[int, int],
    settings: VibrationSettings,
    progress: ProgressCallback | None = None,
) -> tuple[ClientData, ...]:
    """Simulate ``group_sizes[g]`` machines holding the condition labels ``groups[g]``.

    Clients ``m00``, ``m01``, ... in group order, ``group`` = index into ``groups``, labels
    as given (condition labels 0-19, not renumbered). With equal sizes these are exactly
    the clients of :func:`mixed_fault` with those groups.

    Parameters
    ----------
    seed : int
        The same seed gives the same machines, label counts and signals.
    groups : sequence of label sequences
    group_sizes : sequence of int
        Machines per group, each >= 1.
    windows_per_client : (low, high)
        Train+test windows per client, drawn uniformly; split at random among the group's
        labels (at least 2 each).
    settings : VibrationSettings
    progress : callable, optional
        ``progress(done, total)`` after each client.
    """
    plans = _plan_mixed_fault(seed, group_sizes, windows_per_client, groups)
    clients: list[ClientData] = []
    for plan in plans:
        clients.append(_build_client(plan, settings))
        if progress is not None:
            progress(plan.index + 1, len(plans))
    return tuple(clients)


def mixed_fault(
    seed: int = 0,
    *,
    clients_per_group: int = 8,
    windows_per_client: tuple[int, int] = (200, 600),
    groups: Sequence[Sequence[int]] = MIXED_FAULT_GROUPS,
    settings: VibrationSettings | None = None,
    progress: ProgressCallback | None = None,
) -> Federation:
    """The FLACC mixed-fault federation (48 machines in 6 groups by default).

    Parameters
    ----------
    seed : int
        The same seed gives the same machines, label counts and signals.
    clients_per_group : int
    windows_per_client : (low, high)
        Train+test windows per client, drawn uniformly; split at random among the group's
        labels.
    groups : label groups (FLACC §VI by default)
    settings : VibrationSettings
    progress : callable, optional
        ``progress(done, total)`` after each client.

    See Also
    --------
    mixed_fault_client : one machine of this federation, without simulating the others.
    """
    settings = settings or VibrationSettings()
    sizes = [clients_per_group] * len(groups)
    clients = simulate_groups(seed, groups, sizes, windows_per_client, settings, progress)
    return Federation(
        name="mixed-fault",
        clients=clients,
        n_classes=len(MIXED_FAULT_CLASS_NAMES),
        class_names=MIXED_FAULT_CLASS_NAMES,
        metadata={"seed": seed, "groups": [list(g) for g in groups], **asdict(settings)},
    )


def mixed_fault_machine(
    seed: int,
    index: int,
    *,
    clients_per_group: int = 8,
    windows_per_client: tuple[int, int] = (200, 600),
    groups: Sequence[Sequence[int]] = MIXED_FAULT_GROUPS,
    settings: VibrationSettings | None = None,
) -> MachinePlan:
    """Machine ``index`` of ``mixed_fault(seed, ...)``: its profile and labels, no signals.

    Takes the same arguments as :func:`mixed_fault`; the profile equals the one that
    machine's federation windows were simulated from.

    Raises
    ------
    IndexError
        If ``index`` is not in ``[0, clients_per_group * len(groups))``.
    """
    settings = settings or VibrationSettings()
    plans = _plan_mixed_fault(seed, [clients_per_group] * len(groups), windows_per_client, groups)
    plan = _select(plans, index)
    machine, _ = _machine(plan, settings)
    return MachinePlan(
        plan.client_id, plan.group, plan.labels, machine, settings, dict(plan.label_counts)
    )


def mixed_fault_client(
    seed: int,
    index: int,
    *,
    clients_per_group: int = 8,
    windows_per_client: tuple[int, int] = (200, 600),
    groups: Sequence[Sequence[int]] = MIXED_FAULT_GROUPS,
    settings: VibrationSettings | None = None,
) -> ClientData:
    """``mixed_fault(seed, ...).clients[index]``, bit for bit, simulating only that machine.

    What one edge agent trains on: the plan draws of the earlier machines are replayed
    (cheap), their signals are never simulated.

    Raises
    ------
    IndexError
        If ``index`` is not in ``[0, clients_per_group * len(groups))``.
    """
    settings = settings or VibrationSettings()
    plans = _plan_mixed_fault(seed, [clients_per_group] * len(groups), windows_per_client, groups)
    return _build_client(_select(plans, index), settings)
