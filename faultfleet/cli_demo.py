"""``faultfleet demo``: a small fleet of machines, from vibration signals to clustered models.

It builds a reduced mixed-fault federation (FLACC §VI groups, fewer machines), writes one
example recording per rotor/bearing condition of one machine, inspects one of them as an
engineer would, then trains the fleet with FLACC (the ``quick`` profile of
``faultfleet sim``) and reports the clusters of machines it found and their accuracy.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from faultfleet.cli_signals import build_mixed_fault, format_inspection
from faultfleet.cli_sim import run_with_progress
from faultfleet.simulation.config import PROFILES, profile
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
    demo.add_argument(
        "--rounds",
        type=int,
        default=PROFILES["quick"].rounds,
        help="federated rounds of the FLACC run (default %(default)s; 0 skips it)",
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
    if args.rounds > 0:
        run_flacc(args.seed, args.rounds, args.out / "flacc")
    print(
        "\nnext: `faultfleet signals inspect FILE` on your own recordings, "
        "`faultfleet signals federation --manifest FILE` to window a folder of them, "
        "`faultfleet sim --strategy flacc --out DIR` for the full FLACC case study."
    )
    return 0


def run_flacc(seed: int, rounds: int, out: Path) -> None:
    """Train a small fleet with FLACC and report what it found."""
    config = profile("quick", strategy="flacc", seed=seed, rounds=rounds)
    print(
        f"\nFLACC on {config.clients_per_group * 6} simulated machines in 6 hidden groups "
        f"({rounds} rounds, {config.fraction:.0%} of the machines per round):"
    )
    result = run_with_progress(config, out, label="FLACC", checkpoint=False)
    final = result.final()
    found: dict[int, list[str]] = {}
    for client, cluster in sorted(result.clusters.items()):
        found.setdefault(cluster, []).append(client)
    truth = result.true_groups
    for cluster, members in sorted(found.items()):
        groups = sorted({truth[c] for c in members})
        print(f"  cluster {cluster}: {' '.join(members)}  (true groups {groups})")
    print(
        f"  {final['num_clusters']} clusters, adjusted Rand index {final['ari']:.2f} against "
        f"the true groups, mean test accuracy {final['accuracy']:.1%}; results in "
        f"{out / 'results.json'}"
    )
