"""``faultfleet sim``: run one strategy on a simulated federation and write its results.

Writes ``OUT/results.json`` (settings, final accuracy, clusters found, ARI, purity, the
cluster-quality figures that need no ground truth, and a per-round history),
``OUT/accuracy.png`` and ``OUT/clusters.png`` (the FLACC paper's Fig. 6 pair), and prints
the final numbers with the cluster-quality table. With ``--compare fedavg`` (the default
for clustered strategies) FedAvg runs on the same federation and seed and its curve is
drawn beside; its results go to ``OUT/compare-fedavg/results.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from coordinator.engine.state import has_state
from coordinator.strategies.registry import STRATEGIES
from faultfleet.errors import UsageError
from faultfleet.files import atomic_write
from faultfleet.models.zoo import MODEL_NAMES
from faultfleet_apps.cli.arguments import (
    FINITE_NUMBER,
    FRACTION,
    POSITIVE,
    POSITIVE_NUMBER,
    SEED,
    output_folder,
)
from faultfleet_apps.cli.signals import machine_progress
from faultfleet_apps.plotting import require_pyplot
from faultfleet_apps.quality_table import format_quality
from faultfleet_apps.simulation.config import PROFILES, SCENARIOS, SimConfig, profile
from faultfleet_apps.simulation.membership import refuse_fixed_membership
from faultfleet_apps.simulation.plots import plot_accuracy, plot_clusters
from faultfleet_apps.simulation.runner import (
    RoundRecord,
    SimResult,
    build_federation,
    run_simulation,
)
from faultfleet_apps.simulation.training_path import TRAINING_PATHS
from faultfleet_apps.thread_policy import apply_thread_policy
from signal_pipeline.federation import Federation


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
    sim.add_argument("--clients-per-group", type=POSITIVE, help="machines per fault group")
    sim.add_argument("--snr-db", type=FINITE_NUMBER, help="sensor signal-to-noise ratio, dB")
    sim.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="strategy hyper-parameter, e.g. n_clusters=6 for ifca (repeatable)",
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
        help="CPU threads for torch (default: OMP_NUM_THREADS, else the cores this process "
        "may use; docs/federated.md)",
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
    sim.set_defaults(handler=run_sim)


def parse_option(text: str) -> tuple[str, Any]:
    """``"n_clusters=6"`` → ``("n_clusters", 6)``; values are int, float, bool, none or text."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise UsageError(f"--option {text!r}: expected KEY=VALUE, e.g. n_clusters=6")
    lowered = raw.strip().lower()
    value: Any
    if lowered in ("none", "null", "inf"):
        value = None
    elif lowered in ("true", "false"):
        value = lowered == "true"
    else:
        try:
            value = int(raw)
        except ValueError:
            try:
                value = float(raw)
            except ValueError:
                value = raw
    return key.strip(), value


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
        snr_db=args.snr_db,
        eval_every=args.eval_every,
        device=args.device,
        training_path=args.training_path,
        train=train,
        strategy_options=dict(parse_option(o) for o in args.option),
        joins=tuple(parse_member_round(j, "--join") for j in args.join) or None,
        leaves=tuple(parse_member_round(e, "--leave") for e in args.leave) or None,
    )


def run_with_progress(
    config: SimConfig,
    out: Path,
    *,
    label: str,
    federation: Federation | None = None,
    resume: bool = False,
    checkpoint: bool = True,
) -> SimResult:
    """Run ``config`` with a progress bar on stderr and write ``out/results.json``.

    Checkpoints go to ``out/checkpoint`` unless ``checkpoint`` is false.
    """
    scheduled = bool(config.joins or config.leaves)
    with tqdm(total=config.rounds, desc=label, unit="round", file=sys.stderr, disable=None) as bar:

        def show(record: RoundRecord) -> None:
            bar.update(record.round - bar.n)
            change = membership_change(config, record.round)
            if change:
                bar.write(
                    f"{label}: before round {record.round}: {change} ({record.members} members)",
                    file=sys.stderr,
                )
            if record.accuracy is not None:
                postfix: dict[str, object] = {
                    "acc": f"{record.accuracy:.3f}",
                    "clusters": record.num_clusters,
                    "ari": f"{record.ari:.2f}",
                }
                if scheduled:
                    postfix["members"] = record.members
                bar.set_postfix(postfix)

        result = run_simulation(
            config,
            federation=federation,
            on_round=show,
            checkpoint_dir=out / "checkpoint" if checkpoint else None,
            resume=resume,
        )
    write_json(out / "results.json", result.to_json())
    return result


def membership_change(config: SimConfig, server_round: int) -> str:
    """Who joined and who left before ``server_round`` ("" if nobody), for the progress."""
    joined = [client for client, r in config.joins if r == server_round]
    left = [client for client, r in config.leaves if r == server_round]
    parts = [f"{', '.join(joined)} joined"] if joined else []
    parts += [f"{', '.join(left)} left"] if left else []
    return "; ".join(parts)


def write_json(path: Path, document: dict[str, Any]) -> None:
    """Write ``document`` to ``path`` atomically."""
    text = json.dumps(document, indent=1) + "\n"
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


def run_sim(args: argparse.Namespace) -> int:
    """Handler of ``sim``."""
    apply_thread_policy(args.threads)
    config = config_from_args(args)
    require_pyplot()  # the run ends in figures: no matplotlib, no run
    compare = args.compare or ("none" if config.strategy == "fedavg" else "fedavg")
    refuse_fixed_membership(config.strategy, config.joins, config.leaves)
    if compare != "none":
        refuse_fixed_membership(compare, config.joins, config.leaves)
    if args.resume and not has_state(args.out / "checkpoint"):
        raise UsageError(
            f"--resume: {args.out / 'checkpoint'} holds no checkpoint to resume from; check "
            "--out, or run without --resume to start a new run"
        )
    with machine_progress(config.clients_per_group * 6) as advance:
        federation = build_federation(config, progress=advance)
    output_folder(args.out)
    try:
        result = run_with_progress(
            config, args.out, label=config.strategy, federation=federation, resume=args.resume
        )
        curves = {config.strategy: _curve(result)}
        if compare != "none":
            other = replace(config, strategy=compare, strategy_options={})
            other_result = run_with_progress(
                other,
                args.out / f"compare-{compare}",
                label=compare,
                federation=federation,
                resume=args.resume,
            )
            curves[compare] = _curve(other_result)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(
            "interrupted; the same command with --resume continues from the last round "
            f"saved in {args.out}"
        ) from None
    final = result.final()
    plot_accuracy(curves, args.out / "accuracy.png", title=f"{config.scenario}, seed {config.seed}")
    plot_clusters(
        result.true_groups,
        result.clusters,
        {c.client_id: len(c.train) for c in federation.clients},
        args.out / "clusters.png",
        title=f"{config.strategy}: {final['num_clusters']} clusters, ARI {final['ari']:.2f}",
    )
    print(
        f"{config.strategy} on {config.scenario} (seed {config.seed}): accuracy "
        f"{final['accuracy']:.4f}, {final['num_clusters']} clusters, ARI {final['ari']:.3f}, "
        f"purity {final['purity']:.3f}, {result.wall_seconds:.0f} s"
    )
    print("\n".join(format_quality(result.quality_json())))
    print(f"results in {args.out}/results.json, plots accuracy.png and clusters.png")
    return 0


def _curve(result: SimResult) -> tuple[list[int], list[float | None]]:
    return [r.round for r in result.history], [r.accuracy for r in result.history]
