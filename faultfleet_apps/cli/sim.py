"""``faultfleet sim``: run one strategy on a simulated federation and write its results.

Writes ``OUT/results.json`` (settings, final accuracy, clusters found, ARI, purity, the
cluster-quality figures that need no ground truth, and a per-round history),
``OUT/accuracy.png`` and ``OUT/clusters.png`` (the FLACC paper's Fig. 6 pair), and prints
the final numbers with the cluster-quality table. With ``--compare fedavg`` (the default
for clustered strategies) FedAvg runs on the same federation and seed and its curve is
drawn beside; its results go to ``OUT/compare-fedavg/results.json``.

This module builds the command line and the run's settings; ``--option KEY=VALUE`` is read
by the type the strategy declares (:func:`coordinator.strategies.registry.parse_options`)
and ``--list-options STRATEGY`` prints the declarations. The run itself is in
:mod:`faultfleet_apps.cli.sim_run`, imported only when ``sim`` runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from coordinator.strategies.parameters import describe
from coordinator.strategies.registry import STRATEGIES, parse_options, strategy_parameters
from coordinator.strategies.robust import DEFAULT_POLICY, AggregationPolicy
from faultfleet.errors import UsageError
from faultfleet.models.zoo import MODEL_NAMES
from faultfleet_apps.cli.arguments import (
    FINITE_NUMBER,
    FRACTION,
    GROUPS_HELP,
    MACHINE_SPREAD_HELP,
    NON_NEGATIVE_NUMBER,
    POSITIVE,
    POSITIVE_NUMBER,
    SEED,
    check_fleet_options,
    label_groups_option,
)
from faultfleet_apps.cli.lazy import lazy_handler
from faultfleet_apps.simulation.config import PROFILES, SCENARIOS, SimConfig, profile
from faultfleet_apps.simulation.training_path import TRAINING_PATHS


class ListOptions(argparse.Action):
    """``--list-options STRATEGY``: print the strategy's parameter table and exit, like
    ``--help`` (no other option is needed)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        name = str(values)
        lines = [
            f"options of {name} (--option KEY=VALUE; declared in its parameter table):",
            *describe(strategy_parameters(name)),
        ]
        print("\n".join(lines))
        parser.exit(0)


def add_sim_command(commands: Any) -> None:
    """Register ``sim``."""
    sim = commands.add_parser(
        "sim",
        help="run a federated strategy on a simulated federation",
        description=(
            "Simulate a federation of machines, train it with a federated strategy, and "
            "write results.json plus accuracy and cluster plots. Settings start from a "
            "profile; the options below override single values."
        ),
    )
    sim.add_argument(
        "--scenario",
        choices=SCENARIOS,
        default="mixed-fault",
        help="simulated federation of machines (default %(default)s; docs/simulator.md)",
    )
    sim.add_argument(
        "--strategy",
        choices=sorted(STRATEGIES),
        default="flacc",
        help="federated strategy to run (default %(default)s; docs/federated.md)",
    )
    sim.add_argument(
        "--seed",
        type=SEED,
        default=0,
        help="seed of the federation, the models and the sampling (default 0)",
    )
    sim.add_argument("--out", type=Path, required=True, help="output folder")
    sim.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="paper",
        help="paper: FLACC §VI settings (48 machines, 100 rounds); quick: a small run",
    )
    sim.add_argument("--rounds", type=POSITIVE, help="communication rounds")
    sim.add_argument(
        "--fraction", type=FRACTION, help="client fraction c sampled per round, in (0, 1]"
    )
    sim.add_argument("--epochs", type=POSITIVE, help="local epochs E")
    sim.add_argument("--batch-size", type=POSITIVE, help="local batch size B")
    sim.add_argument("--lr", type=POSITIVE_NUMBER, help="local learning rate")
    sim.add_argument("--optimizer", choices=("adam", "sgd"), help="local optimizer")
    sim.add_argument("--model", choices=MODEL_NAMES, help="model from the zoo")
    sim.add_argument(
        "--clients-per-group", type=POSITIVE, help="machines per fault group (not label-groups)"
    )
    sim.add_argument("--groups", type=label_groups_option, help=f"{GROUPS_HELP} (label-groups)")
    sim.add_argument("--snr-db", type=FINITE_NUMBER, help="sensor signal-to-noise ratio, dB")
    sim.add_argument("--machine-spread", type=NON_NEGATIVE_NUMBER, help=MACHINE_SPREAD_HELP)
    sim.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="strategy hyper-parameter, e.g. n_clusters=6 for ifca (repeatable); "
        "--list-options STRATEGY shows them",
    )
    sim.add_argument(
        "--list-options",
        action=ListOptions,
        choices=sorted(STRATEGIES),
        metavar="STRATEGY",
        help="print every option of STRATEGY (type and range, default, meaning and paper) and exit",
    )
    sim.add_argument(
        "--aggregation",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="how updates are averaged, e.g. trim_fraction=0 or noise_multiplier=1 "
        "(repeatable; 'off' first switches every robust rule off; docs/federated.md)",
    )
    sim.add_argument(
        "--compare",
        choices=("none", *sorted(STRATEGIES)),
        default=None,
        help="also run this strategy for the accuracy plot ('none' to skip; "
        "default fedavg for clustered strategies)",
    )
    sim.add_argument("--eval-every", type=POSITIVE, help="evaluate every N rounds (default 1)")
    sim.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        help="where to train: auto (default: a GPU when torch sees one), cpu or cuda",
    )
    sim.add_argument(
        "--training-path",
        choices=TRAINING_PATHS,
        help="how the simulated clients train: batched (vectorised), sequential, or auto "
        "(default: the faster for the model and device; docs/federated.md)",
    )
    sim.add_argument(
        "--threads",
        type=POSITIVE,
        help="CPU threads (default: OMP_NUM_THREADS, else the cores this process may use); "
        "on the CPU the clients train in this many lanes of one torch thread each "
        "(docs/federated.md, Threads)",
    )
    sim.add_argument(
        "--join",
        nargs="+",
        action="extend",
        default=[],
        metavar="ID@ROUND",
        help="machine ID joins before round ROUND and is no member before, e.g. m05@10 "
        "(faacl and fedavg only)",
    )
    sim.add_argument(
        "--leave",
        nargs="+",
        action="extend",
        default=[],
        metavar="ID@ROUND",
        help="machine ID leaves for good before round ROUND, e.g. m02@20 (faacl and fedavg only)",
    )
    sim.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run from OUT/checkpoint (same options)",
    )
    sim.set_defaults(handler=lazy_handler("faultfleet_apps.cli.sim_run", "run_sim"))


def parse_member_round(text: str, option: str = "--join") -> tuple[str, int]:
    """``"m05@10"`` → ``("m05", 10)``: a machine and the round before which it joins or
    leaves (``option`` names the flag in errors)."""
    client, sep, raw = text.rpartition("@")
    if not sep or not client.strip() or not raw.strip():
        raise UsageError(f"{option} {text!r}: expected ID@ROUND, e.g. m05@10")
    try:
        server_round = int(raw)
    except ValueError:
        raise UsageError(
            f"{option} {text!r}: ROUND must be a whole number, expected ID@ROUND, e.g. m05@10"
        ) from None
    return client.strip(), server_round


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """The run's settings: the profile, then every option given."""
    check_fleet_options(args.scenario, args.groups, args.clients_per_group)
    base = PROFILES[args.profile]
    train = base.train
    overrides = {
        "optimizer": args.optimizer,
        "learning_rate": args.lr,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
    }
    train = replace(train, **{k: v for k, v in overrides.items() if v is not None})
    return profile(
        args.profile,
        scenario=args.scenario,
        strategy=args.strategy,
        seed=args.seed,
        rounds=args.rounds,
        fraction=args.fraction,
        model=args.model,
        clients_per_group=args.clients_per_group,
        groups=args.groups,
        snr_db=args.snr_db,
        machine_spread=args.machine_spread,
        eval_every=args.eval_every,
        device=args.device,
        training_path=args.training_path,
        train=train,
        strategy_options=parse_options(args.strategy, args.option),
        joins=tuple(parse_member_round(j, "--join") for j in args.join) or None,
        leaves=tuple(parse_member_round(e, "--leave") for e in args.leave) or None,
        aggregation=parse_aggregation(args.aggregation),
    )


def parse_aggregation(items: list[str]) -> AggregationPolicy:
    """``--aggregation`` items on top of the default policy; ``off`` starts from no rule.

    ``["off", "noise_multiplier=1", "clip_norm=0.5"]`` → differential privacy alone.
    """
    values = asdict(DEFAULT_POLICY)
    keys = ", ".join(values)
    for item in items:
        if item.strip().lower() == "off":
            values = asdict(AggregationPolicy())
            continue
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--aggregation {item!r}: expected KEY=VALUE, e.g. trim_fraction=0")
        if key not in values:
            raise UsageError(f"--aggregation {item!r}: unknown key {key!r}; the keys are {keys}")
        try:
            values[key] = float(raw)
        except ValueError:
            raise UsageError(
                f"--aggregation {item!r}: {key} takes a number, e.g. {key}=0"
            ) from None
    return AggregationPolicy(**values)
