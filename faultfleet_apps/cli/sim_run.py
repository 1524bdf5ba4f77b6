"""The run of ``faultfleet sim`` (:mod:`faultfleet_apps.cli.sim`): simulate, train, write.

Imported only when ``sim`` runs: it loads the simulator, torch's training loop, matplotlib
for the figures and tqdm for the progress bar.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from coordinator.engine.state import has_state
from faultfleet.errors import UsageError
from faultfleet.files import atomic_write
from faultfleet_apps.cli.arguments import output_folder
from faultfleet_apps.cli.signals import machine_progress
from faultfleet_apps.cli.sim import config_from_args
from faultfleet_apps.plotting import require_pyplot
from faultfleet_apps.progress import Progress
from faultfleet_apps.quality_table import format_quality
from faultfleet_apps.simulation.config import SimConfig
from faultfleet_apps.simulation.plots import plot_accuracy, plot_clusters
from faultfleet_apps.simulation.runner import (
    RoundRecord,
    SimResult,
    build_federation,
    machine_count,
    run_simulation,
)
from faultfleet_apps.thread_policy import apply_thread_policy
from signal_pipeline.federation import Federation


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
    with Progress(config.rounds, desc=label, unit="round") as bar:

        def show(record: RoundRecord) -> None:
            bar.advance_to(record.round)
            change = membership_change(config, record.round)
            if change:
                bar.write(
                    f"{label}: before round {record.round}: {change} ({record.members} members)"
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
    if args.resume and not has_state(args.out / "checkpoint"):
        raise UsageError(
            f"--resume: {args.out / 'checkpoint'} holds no checkpoint to resume from; check "
            "--out, or run without --resume to start a new run"
        )
    with machine_progress(machine_count(config)) as advance:
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
    if result.privacy is not None:
        privacy = result.privacy
        print(
            f"differential privacy: epsilon {privacy.epsilon:.3g} at delta {privacy.delta:g} "
            f"(noise multiplier {privacy.noise_multiplier:g}, clip norm {privacy.clip_norm:g}, "
            f"sampling rate {privacy.sampling_rate:.3g}, {privacy.rounds} rounds)"
        )
    print(f"results in {args.out}/results.json, plots accuracy.png and clusters.png")
    return 0


def _curve(result: SimResult) -> tuple[list[int], list[float | None]]:
    return [r.round for r in result.history], [r.accuracy for r in result.history]
