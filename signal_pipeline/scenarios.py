"""Vibration federations: the FLACC mixed-fault case study and a plant's own recordings.

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
stream. All three replay one planning function, so they cannot drift apart.
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
from signal_pipeline.readers import read_manifest
from signal_pipeline.recording import Recording
from signal_pipeline.simulator import DEFAULT_FS_HZ, DEFAULT_SNR_DB, simulate
from signal_pipeline.splitting import (
    SPLIT_NAMES,
    SplitFractions,
    WindowedSplit,
    concatenate_splits,
    split_windows_by_recording,
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


def _datasets(splits: Mapping[str, WindowedSplit], labels: IntArray) -> list[Dataset]:
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
    return ClientData(client_id, group, *_datasets(merged, labels))


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
    clients_per_group: int,
    windows_per_client: tuple[int, int],
    groups: Sequence[Sequence[int]],
) -> list[_ClientPlan]:
    """Every client's group, label counts and seed, in federation order (cheap: no signals).

    The one place the plan random stream is drawn, so :func:`mixed_fault` and the
    single-machine builders replay exactly the same draws.
    """
    low, high = windows_per_client
    if not 2 <= low <= high:
        raise UsageError(f"windows_per_client must be 2 <= low <= high, got {windows_per_client}")
    if clients_per_group < 1:
        raise UsageError(f"clients_per_group must be >= 1, got {clients_per_group}")
    total = clients_per_group * len(groups)
    root = np.random.SeedSequence(seed)
    plan_rng = np.random.default_rng(root.spawn(1)[0])
    client_seeds = root.spawn(total)
    plans: list[_ClientPlan] = []
    for group, group_labels in enumerate(groups):
        labels = tuple(int(label) for label in group_labels)
        for _ in range(clients_per_group):
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
    plans = _plan_mixed_fault(seed, clients_per_group, windows_per_client, groups)
    clients: list[ClientData] = []
    for plan in plans:
        clients.append(_build_client(plan, settings))
        if progress is not None:
            progress(plan.index + 1, len(plans))
    return Federation(
        name="mixed-fault",
        clients=tuple(clients),
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
    plans = _plan_mixed_fault(seed, clients_per_group, windows_per_client, groups)
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
    plans = _plan_mixed_fault(seed, clients_per_group, windows_per_client, groups)
    return _build_client(_select(plans, index), settings)


def manifest_federation(
    manifest: str,
    *,
    window_length: int = 1024,
    stride: int | None = None,
    fractions: SplitFractions | None = None,
    split_by: str = "time",
    seed: int = 0,
    allow_outside_folder: bool = False,
) -> Federation:
    """A federation of a plant's own labelled recordings, one client per machine.

    Parameters
    ----------
    manifest : str
        Path of a CSV or TOML manifest (see :mod:`signal_pipeline.readers`).
    window_length, stride : int
        Window size and step in samples (stride defaults to the window length).
    fractions : SplitFractions
        Train/validation/test fractions (0.7/0.15/0.15 by default).
    split_by : "time" or "recording"
        Cut each recording in time, or assign whole recordings to splits.
    seed : int
        Seeds the assignment of recordings when ``split_by="recording"``.
    allow_outside_folder : bool
        Accept listed files outside the manifest's folder (see
        :func:`~signal_pipeline.readers.load_manifest`).

    The ground-truth group of a machine is the set of labels it holds: machines with the
    same set of conditions share a group.
    """
    if split_by not in ("time", "recording"):
        raise UsageError(f"split_by must be 'time' or 'recording', got {split_by!r}")
    fractions = fractions or SplitFractions()
    step = stride or window_length
    recordings = read_manifest(manifest, allow_outside_folder=allow_outside_folder)
    by_machine: dict[str, list[Recording]] = {}
    for recording in recordings:
        by_machine.setdefault(recording.machine_id or "unknown", []).append(recording)
    rng = np.random.default_rng(seed)
    label_sets: dict[tuple[int, ...], int] = {}
    clients = []
    for machine_id, own in sorted(by_machine.items()):
        labels = np.array([r.label for r in own], dtype=np.int64)
        if split_by == "time":
            splits = split_windows_by_time(own, window_length, step, fractions)
        else:
            splits = split_windows_by_recording(own, window_length, step, fractions, rng)
        key = tuple(sorted(set(labels.tolist())))
        group = label_sets.setdefault(key, len(label_sets))
        clients.append(ClientData(machine_id, group, *_datasets(splits, labels)))
    n_classes = max(int(r.label or 0) for r in recordings) + 1
    return Federation(
        name=f"manifest:{manifest}",
        clients=tuple(clients),
        n_classes=n_classes,
        class_names=tuple(f"label {i}" for i in range(n_classes)),
        metadata={
            "manifest": manifest,
            "window_length": window_length,
            "stride": step,
            "split_by": split_by,
            **fractions.as_dict(),
        },
    )
