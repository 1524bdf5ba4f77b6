"""The device an agent trains on, named without loading torch where no GPU can be present.

An agent reports its training device in its status from the start, but loads torch only
for its first task (:mod:`edge_agent.task_compute`). :func:`device_name` answers
``"auto"`` with ``"cpu"`` without torch when the host has none of the device files a GPU
driver creates (:data:`GPU_DEVICE_FILES`: NVIDIA's ``/dev/nvidia*``, Jetson's
``/dev/nvhost-ctrl-gpu``, WSL 2's ``/dev/dxg``, ROCm's ``/dev/kfd``) — there torch could only
answer ``"cpu"`` too. Everywhere else it asks torch
(:func:`edge_agent.batching.select_device`), as before, at once: ``"cuda"`` on a host
without CUDA stops the agent at its start, and CUDA's deterministic settings are made
before any model is built.
"""

from __future__ import annotations

import sys
from pathlib import Path

GPU_DEVICE_FILES = ("nvidia*", "nvhost-ctrl-gpu", "dxg", "kfd")
"""Patterns, under ``/dev``, of the files whose presence means torch may see a GPU."""


def gpu_device_files(dev: Path = Path("/dev")) -> list[Path]:
    """The files under ``dev`` that a GPU driver creates (empty on a host without one)."""
    return sorted(path for pattern in GPU_DEVICE_FILES for path in dev.glob(pattern))


def device_name(preference: str, *, dev: Path = Path("/dev")) -> str:
    """The torch device ``preference`` resolves to, as text (``"cpu"``, ``"cuda"``, ``"cuda:1"``).

    Parameters
    ----------
    preference : {"auto", "cpu", "cuda", "cuda:<index>"}
    dev : Path
        Where device files are looked for (a fake folder in tests).

    Raises
    ------
    UsageError
        As :func:`~edge_agent.batching.select_device`: an unknown preference, ``"cuda"``
        where torch sees no CUDA device.
    """
    if preference == "cpu":
        return "cpu"
    if preference == "auto" and "torch" not in sys.modules and not gpu_device_files(dev):
        return "cpu"
    from edge_agent.batching import select_device  # noqa: PLC0415 (loads torch)

    return str(select_device(preference))
