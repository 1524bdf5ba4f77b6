"""``faultfleet demo``: simulate a small fleet of machines through the signal pipeline.

It builds a reduced mixed-fault federation (FLACC §VI groups, fewer machines), writes one
example recording per rotor/bearing condition of the first machine group, inspects one of
them as an engineer would, and prints what it produced.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from faultfleet.cli_signals import build_mixed_fault, format_inspection
from signal_pipeline.bearing import SKF_6205
from signal_pipeline.conditions import Condition
from signal_pipeline.inspection import inspect_recording
from signal_pipeline.machine import MachineProfile
from signal_pipeline.readers import read_recording, write_recording
from signal_pipeline.scenarios import VibrationSettings
from signal_pipeline.simulator import simulate


def add_demo_command(commands: Any) -> None:
    """Register ``demo``."""
    demo = commands.add_parser(
        "demo",
        help="simulate a small fleet through the signal pipeline and report what it produced",
        description=(
            "Simulate a small fleet of machines with mixed rotor and bearing faults, window "
            "their signals into per-machine train/validation/test sets, write example "
            "recordings and inspect one."
        ),
    )
    demo.add_argument(
        "--out",
        type=Path,
        default=Path("demo-output"),
        help="folder for example recordings (default demo-output)",
    )
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument(
        "--clients-per-group",
        type=int,
        default=2,
        help="machines per fault group (default 2; the paper uses 8)",
    )
    demo.set_defaults(handler=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    """Handler of ``demo``."""
    federation = build_mixed_fault(args.seed, args.clients_per_group, VibrationSettings())
    print(federation.summary())
    total = sum(len(c.train) + len(c.val) + len(c.test) for c in federation.clients)
    print(f"\n{total} windows of {federation.sample_shape[-1]} samples in all.\n")

    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    machine = MachineProfile.sample(rng)
    written = []
    for label in (0, 4, 8, 16):
        condition = Condition.from_label(label)
        sim = simulate(condition, machine, 5.0, rng)
        path = args.out / f"label{label:02d}-{condition.name.replace('/', '-')}.npz"
        written.append(write_recording(sim.to_recording(source=str(path)), path))
    print("example recordings (5 s each, one machine):")
    for path in written:
        print(f"  {path}")
    print(f"\ninspection of {written[2].name} (outer-race damage):")
    report = inspect_recording(read_recording(written[2]), bearing=SKF_6205)
    print(format_inspection(report))
    print(
        "\nnext: `faultfleet signals inspect FILE` on your own recordings, "
        "`faultfleet signals federation --manifest FILE` to window a folder of them."
    )
    return 0
