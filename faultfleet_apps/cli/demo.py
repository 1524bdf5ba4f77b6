"""``faultfleet demo``: a fleet of machines, from vibration signals to live diagnosis.

It writes one example recording per rotor/bearing condition of one simulated machine and
inspects one of them as an engineer would; then it runs the product as a plant would — an
MQTT broker, ``faultfleet coordinator`` and ``faultfleet agent`` processes for the 48
machines of the mixed-fault federation (:mod:`faultfleet_apps.demo.fleet`) — trains them with
FLACC, starts the machine held back once the first campaign ended (the coordinator places it
on a cluster and serves it at once), and reports the clusters found, their accuracy, the
late machine's placement, the promotion gate's decisions and the agents' live diagnoses.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import torch

from faultfleet.errors import UsageError
from faultfleet_apps.cli.arguments import POSITIVE, POSITIVE_NUMBER, SEED, output_folder, whole
from faultfleet_apps.cli.runtime import stop_on_signals
from faultfleet_apps.cli.signals import format_inspection
from faultfleet_apps.demo.fleet import DemoPlan, run_fleet_demo
from faultfleet_apps.demo.report import format_outcome, write_report
from faultfleet_apps.plotting import require_pyplot
from faultfleet_apps.progress import Progress
from signal_pipeline.bearing import SKF_6205
from signal_pipeline.conditions import Condition
from signal_pipeline.inspection import inspect_recording
from signal_pipeline.machine import MachineProfile
from signal_pipeline.readers import read_recording, write_recording
from signal_pipeline.simulator import simulate


def add_demo_command(commands: Any) -> None:
    """Register ``demo``."""
    demo = commands.add_parser(
        "demo",
        help="run a simulated fleet end to end: broker, coordinator, agents, live diagnosis",
        description=(
            "Write and inspect example recordings of a simulated machine, then run a broker, "
            "the coordinator and one agent per simulated machine over MQTT: FLACC finds the "
            "groups of machines and every agent diagnoses live windows with its cluster's "
            "ONNX model."
        ),
    )
    demo.add_argument(
        "--out",
        type=Path,
        default=Path("demo-output"),
        help="folder for example recordings (default demo-output)",
    )
    demo.add_argument(
        "--seed",
        type=SEED,
        default=0,
        help="seed of the simulated machines, the federation and the training (default 0)",
    )
    demo.add_argument(
        "--clients-per-group",
        type=POSITIVE,
        default=DemoPlan.clients_per_group,
        help="simulated machines per hidden fault group (default %(default)s, as in the paper)",
    )
    demo.add_argument(
        "--rounds",
        type=whole(0),
        default=DemoPlan.rounds,
        help="federated rounds of the FLACC run over MQTT (default %(default)s; 0 skips it)",
    )
    demo.add_argument(
        "--live-seconds",
        type=POSITIVE_NUMBER,
        default=DemoPlan.live_seconds,
        help="how long diagnoses are counted once every agent has its final model "
        "(default %(default)s)",
    )
    demo.add_argument(
        "--late-machines",
        type=whole(0),
        default=DemoPlan.late_machines,
        help="machines held back until the first campaign ended, then started and served at "
        "once (default %(default)s; 0 starts them all together)",
    )
    demo.add_argument(
        "--broker",
        choices=("auto", "mosquitto", "amqtt"),
        default="auto",
        help="MQTT broker to start: mosquitto when installed (auto), else the embedded amqtt",
    )
    demo.add_argument(
        "--device",
        choices=("cpu", "auto", "cuda"),
        default=DemoPlan.device,
        help="where the agents train: cpu (default, the same numbers on every machine), auto "
        "(a GPU when torch sees one) or cuda",
    )
    demo.set_defaults(handler=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    """Handler of ``demo``."""
    if args.device == "cuda" and args.rounds > 0 and not torch.cuda.is_available():
        raise UsageError(
            "--device cuda: torch sees no CUDA device on this machine (CPU build of torch, or "
            "no GPU); use --device auto to train on a GPU only when there is one"
        )
    machines = args.clients_per_group * DemoPlan.groups
    if args.rounds > 0 and args.late_machines >= machines:
        raise UsageError(
            f"--late-machines {args.late_machines}: the federation needs a machine at the "
            f"start, and there are {machines}; hold fewer back"
        )
    if args.rounds > 0:
        require_pyplot()  # the fleet's report draws figures: no matplotlib, no run
    output_folder(args.out)
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
        run_fleet(args)
    print(
        "\nnext: `faultfleet signals inspect FILE` on your own recordings, "
        "`faultfleet signals federation --manifest FILE` to window a folder of them, "
        "`faultfleet sim --strategy flacc --out DIR` for the full FLACC case study."
    )
    return 0


def run_fleet(args: argparse.Namespace) -> None:
    """Broker, coordinator and simulated agents over MQTT; report clusters and diagnoses."""
    plan = DemoPlan(
        out=args.out / "fleet",
        seed=args.seed,
        rounds=args.rounds,
        clients_per_group=args.clients_per_group,
        live_seconds=args.live_seconds,
        late_machines=args.late_machines,
        broker=args.broker,
        device=args.device,
    )
    late = (
        f", {plan.late_machines} of them started once the first campaign ended"
        if plan.late_machines
        else ""
    )
    print(
        f"\nfleet over MQTT: a broker, the coordinator and {plan.machines} simulated agents "
        f"({plan.groups} hidden groups, training on {plan.device}{late}); FLACC with the "
        f"compact model, {plan.rounds} rounds; "
        f"logs in {plan.out / 'logs'}"
    )
    with (
        Progress(plan.rounds, desc="rounds", unit="round") as bar,
        stop_on_signals() as stop,
    ):

        def on_round(done: int, total: int) -> None:
            bar.advance_to(done)

        outcome = run_fleet_demo(plan, stop, on_round)
    if outcome is None:
        raise KeyboardInterrupt(
            "interrupted: the coordinator, the agents and the broker were stopped"
        )
    print(format_outcome(plan, outcome))
    report = write_report(plan, outcome)
    print(f"\nreport: {report}")
