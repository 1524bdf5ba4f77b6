"""A federation of a plant's own labelled recordings: one client per machine of a manifest.

The ground-truth group of a machine is the set of condition labels it holds, so machines
with the same conditions share a group (:func:`manifest_federation`).
"""

from __future__ import annotations

import numpy as np

from faultfleet.errors import UsageError
from signal_pipeline.federation import ClientData, Federation
from signal_pipeline.readers import read_manifest
from signal_pipeline.recording import Recording
from signal_pipeline.scenarios import split_datasets
from signal_pipeline.splitting import (
    SplitFractions,
    split_windows_by_recording,
    split_windows_by_time,
)


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
        clients.append(ClientData(machine_id, group, *split_datasets(splits, labels)))
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
