"""A strategy's server step at 1,000 to 20,000 agents: sketches against exact comparisons.

Usage: python benchmarks/bench_server_scale.py --agents 1000 2000 5000 10000 20000
       [--strategy flacc|flhc|cfl|fedavg|ifca|jgl] [--reference update|gradient]
       [--rounds 8] [--json FILE]
       [--exact-up-to 20000] [--partners 32] [--epsilon 0.25] [--quality] [--checkpoint]

``--strategy flhc`` and ``--strategy cfl`` time FL+HC's and CFL's server steps instead
(``pairwise = "sketch"`` against ``"exact"``): both take every agent's update in a round —
FL+HC in its clustering round (round 1 here, no warm-up; round 2 is FedAvg per cluster),
CFL every round (``criterion = "similarity"``, splits from round 1). Both stream under
sketches (each update folded into its model's sum as it arrives, as the coordinator does;
their exact paths take the list: N × 60,432 × 4 bytes, 2.4 GB at 10,000), and hold the
N²/2 distances of their linkage (FL+HC's dendrogram, CFL's bipartition; once, in float32,
linked in place from 2,048 agents by ``coordinator/strategies/nn_chain.py``);
sketches remove the n of the N²·n, not the N². CFL splits one cluster in two per test, so
after a few rounds the sketch and exact paths can be at different stages of the same
hierarchy (a low ARI between them that later rounds close): give it rounds enough to stop
splitting. Pick the
fleet sizes accordingly (``docs/federated.md`` gives how far they reached here);
``--rounds`` is capped at 2 for FL+HC. ``--strategy jgl`` (K = 6, c = 0.25) includes its
gradient probe: every sampled agent answers with a loss of 1 and minus its own update as
the gradient of each model (K arrays, as the coordinator receives them; their making is not
timed), each answer handed to the probe's stream as it is made on the sketch path, as the
coordinator does, and held as a list on the exact one. ``--reference gradient`` runs it with
the gradient reference direction, under which the probe also keeps gradients for Δw.

The server step is everything the coordinator does with a round's updates once they are
decoded: sample the round (c = 0.25), fold every update into the running sum of its model
as it arrives (clip and weight cap from the previous round's medians, the default robust
policy), sketch it, and at the round's end take the sampled pairs' cosines, forget stale
pairs (T = 10), merge entities (FLACC's default cohesion rule, α0 = 0, ``n_merge``
unbounded so that a fleet this size clusters in a few rounds) and average. The updates are
real (``server_scale_updates.py``: the 48 updates of a mixed-fault FedAvg round, 8 per fault
group, perturbed per agent); their generation is not timed.

Time is the process's CPU time (``time.process_time``), the generation of the updates taken
out: on a shared machine the wall time of a step also counts the time the process waited for
a core (printed too, as ``wall``, the generation included). Each N runs in a fresh process
(one BLAS thread: one core), so its peak RSS (``VmHWM``,
:func:`process_memory.own_peak_rss_bytes`) is its own: the interpreter, the 48 recorded
updates, the perturbation pool and the modules imported included, the coordinator's
checkpoint and settings with torch among them, as the coordinator service loads them
(about 370 MB before the first round; about 150 MB before those imports were added).
The *exact* path, run in another process for the ARI, is the same server step with every
pair of every round and the exact cosines of the full updates (the sketch switched off by an
ε whose dimension exceeds the model); on fleets it can handle, the merging there takes the
decisions of FLACC's dense implementation (``tests/coordinator/strategies/
test_sparse_agglomeration.py``), whose α and τ alone would take 1.6 GB at 10,000 agents and
whose merges cost O(m²) each. It computes a k × k Gram matrix of the full updates per round
(≈ 11 s per round at 2,500 updates on this machine with 2 threads) and holds every pair of
the last T rounds grouped by entity (3 million at 10,000 agents); it is not timed against
anything. ``--exact-up-to`` skips it above a fleet size; ``--exact-pairs sampled`` makes it
compare only the sketch path's sampled pairs, with exact cosines, which isolates the
sketch's error from the pair sampling's and fits larger fleets.

Prints, per N: updates per round, mean and worst seconds per step over the rounds, peak
RSS, the ARI of the sketch path's clusters against the exact path's and against the true
groups, and the growth of the mean step time from the smallest N against n·log n.
``--quality`` also times, once after the last round, what the coordinator's quality
watch runs after every round (``assess(strategy.cluster_evidence())``: the remembered pairs
as a list, cluster cohesion, margins, weakest links and the round's merges), and the peak
RSS it reaches. ``--checkpoint`` times, once after the last round, what the
coordinator writes after every round (the strategy's state through
:func:`~coordinator.engine.state.save_state` with the run summary, fsync included, and
``summary.json``; wall seconds) and reading the state back, and prints the files' sizes.
``--json`` writes one object per N with ``agents``, ``seconds_per_step``, ``peak_rss_mb``
and ``ari_vs_exact`` (and the other columns). Numbers only, no pass/fail.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from process_memory import own_peak_rss_bytes, run_json_worker
from server_scale_updates import SyntheticFleet, recorded_updates

from coordinator.engine.state import ARRAYS_FILE, META_FILE, EngineState, load_state, save_state
from coordinator.runtime.checkpoint import ServiceCheckpoint
from coordinator.runtime.quality_watch import MERGE_CLIENTS_LISTED
from coordinator.runtime.run_summary import RunSummary
from coordinator.runtime.settings import RunSettings
from coordinator.strategies.base import Strategy, StrategyState
from coordinator.strategies.flacc import FLACC
from coordinator.strategies.jgl import JointGradientLoss
from coordinator.strategies.quality import assess
from coordinator.strategies.registry import make_strategy
from coordinator.strategies.robust import DEFAULT_POLICY, Averaging
from coordinator.strategies.streaming import StreamingStrategy
from faultfleet.scoring import adjusted_rand_index
from faultfleet.tasks import FitResult, GradientResult

MB = 1024 * 1024
CACHE = Path(tempfile.gettempdir()) / "faultfleet-bench" / "server-scale-updates.npz"
EXACT_EPSILON = 0.001
"""An ε whose JL dimension exceeds any model here: the sketch is the update itself."""


def batch_worker(args: argparse.Namespace) -> None:
    """As :func:`worker`, for the other strategies: FL+HC and CFL (every agent answers),
    FedAvg (``streaming`` on for the sketch path, off for the exact one: the fold against
    the list) and IFCA (every agent takes the first of its k models)."""
    recorded = recorded_updates(args.cache)
    n = args.worker_agents
    fleet = SyntheticFleet(recorded, n, seed=args.seed)
    ids = [f"a{i:05d}" for i in range(n)]
    options: dict[str, object] = {"pairwise": args.worker, "sketch_epsilon": args.epsilon}
    options["sketch_seed"] = args.seed
    fraction = 1.0
    if args.strategy == "flhc":
        options["n_warmup"] = 0
    elif args.strategy == "cfl":
        options.update(criterion="similarity", min_rounds=1)
    elif args.strategy == "fedavg":
        options, fraction = {"streaming": "on" if args.worker == "sketch" else "off"}, 0.25
    elif args.strategy == "jgl":
        options.update(n_clusters=len(fleet.members), reference=args.reference)
        fraction = 0.25
    else:
        fraction = 0.25
    strategy: Strategy = make_strategy(args.strategy, fraction=fraction, options=options)
    strategy.averaging = Averaging(DEFAULT_POLICY)
    strategy.initialize(ids, lambda _: recorded.base.copy())
    rng = np.random.default_rng(args.seed)
    steps, walls, updates = [], [], 0
    rounds = min(args.rounds, 2) if args.strategy == "flhc" else args.rounds
    for server_round in range(1, rounds + 1):
        started, generating = time.process_time(), 0.0
        wall = time.perf_counter()
        generating += probe(strategy, server_round, ids, rng, fleet)
        instructions = strategy.configure_round(server_round, ids, rng)
        stream = (
            strategy.open_stream(server_round) if isinstance(strategy, StreamingStrategy) else None
        )
        results = []
        for instruction in instructions:
            made = time.process_time()
            agent, key = int(instruction.client_id[1:]), instruction.model_keys[0]
            model = strategy.models[key]
            weights = model + fleet.delta(agent)
            samples = 100 + agent % 50
            result = FitResult(instruction.client_id, key, weights, None, samples, 0.5, base=model)
            generating += time.process_time() - made
            if stream is None:
                results.append(result)
            else:  # folded as it arrives, as the coordinator does
                stream.add(result)
        if stream is None:
            strategy.aggregate_round(server_round, results, ())
        else:
            assert isinstance(strategy, StreamingStrategy)
            strategy.aggregate_stream(server_round, stream, ())
        steps.append(time.process_time() - started - generating)
        walls.append(time.perf_counter() - wall)
        updates = len(instructions)
        del results, stream
    labels = strategy.cluster_labels()
    comparer = getattr(strategy, "comparer_", None)
    sketcher = None if comparer is None else comparer.sketcher
    line = {
        "path": args.worker,
        "agents": n,
        "updates": updates,
        "steps": steps,
        "walls": walls,
        "peak_rss_mb": own_peak_rss_bytes() / MB,
        "labels": [labels[c] for c in ids],
        "pairs": 0 if args.strategy == "fedavg" else updates * (updates - 1) // 2,
        "sketch_dim": 0 if sketcher is None else sketcher.dim,
    }
    finish(strategy, args, rounds, line)


def finish(strategy: Strategy, args: argparse.Namespace, rounds: int, line: dict[str, Any]) -> None:
    """Add the quality watch's and the checkpoint's timings if asked for; print ``line``."""
    if args.quality:
        # what the coordinator's quality watch does after every round, timed once
        started = time.process_time()
        assess(strategy.cluster_evidence(), rounds)
        line["quality_seconds"] = time.process_time() - started
        line["quality_peak_rss_mb"] = own_peak_rss_bytes() / MB
    if args.checkpoint:
        line.update(time_checkpoint(strategy, rounds))
    print(json.dumps(line))


def probe(
    strategy: Strategy,
    server_round: int,
    ids: list[str],
    rng: np.random.Generator,
    fleet: SyntheticFleet,
) -> float:
    """JGL's probe (every other strategy has none): each sampled agent answers with a loss
    of 1 for every model and minus its own update as the gradient of each (it asks every
    model to move the way its group moves), as the coordinator receives them: handed to the
    probe's stream as each arrives on the sketch path (the coordinator's), held as a list
    on the exact one. Returns the CPU seconds spent making the answers, which are not the
    server's."""
    if not strategy.probes:
        return 0.0
    assert isinstance(strategy, JointGradientLoss)
    generating = 0.0
    request = strategy.configure_probe(server_round, 0, ids, rng)
    stream = strategy.open_probe_stream(server_round, 0)
    answers = []
    for instruction in request or ():
        made = time.process_time()
        agent = int(instruction.client_id[1:])
        gradient = -fleet.delta(agent)
        keys = instruction.model_keys
        gradients = {key: gradient.copy() for key in keys}  # K arrays, as received
        answer = GradientResult(instruction.client_id, dict.fromkeys(keys, 1.0), gradients, 32)
        generating += time.process_time() - made
        if stream is None:
            answers.append(answer)
        else:
            stream.add(answer)
        del answer, gradients
    if stream is None:
        strategy.aggregate_probe(server_round, 0, answers, ())
    else:
        strategy.aggregate_probe_stream(server_round, 0, stream, ())
    return generating


def worker(args: argparse.Namespace) -> None:
    """One path at one fleet size: print a JSON line with its timings, RSS and labels."""
    if args.strategy != "flacc":
        batch_worker(args)
        return
    recorded = recorded_updates(args.cache)
    n = args.worker_agents
    fleet = SyntheticFleet(recorded, n, seed=args.seed)
    ids = [f"a{i:05d}" for i in range(n)]
    exact = args.worker == "exact"
    strategy = FLACC(
        fraction=0.25,
        n_merge=n,
        n_sep=10**6,
        pairwise="sketch",
        partners=n if exact and args.exact_pairs == "all" else args.partners,
        sketch_epsilon=EXACT_EPSILON if exact else args.epsilon,
        sketch_seed=args.seed,
    )
    strategy.averaging = Averaging(DEFAULT_POLICY)
    strategy.initialize(ids, lambda _: recorded.base.copy())
    rng = np.random.default_rng(args.seed)
    steps, walls, updates = [], [], 0
    for server_round in range(1, args.rounds + 1):
        started, generating = time.process_time(), 0.0
        wall = time.perf_counter()
        generating += probe(strategy, server_round, ids, rng, fleet)
        instructions = strategy.configure_round(server_round, ids, rng)
        stream = strategy.open_stream(server_round)
        assert stream is not None
        model = strategy.models["global"]
        for instruction in instructions:
            agent = int(instruction.client_id[1:])
            made = time.process_time()
            weights = model + fleet.delta(agent)
            generating += time.process_time() - made
            samples = 100 + agent % 50
            stream.add(
                FitResult(instruction.client_id, "global", weights, None, samples, 0.5, base=model)
            )
        strategy.aggregate_stream(server_round, stream, ())
        steps.append(time.process_time() - started - generating)
        walls.append(time.perf_counter() - wall)
        updates = len(instructions)
    labels = strategy.cluster_labels()
    line = {
        "path": args.worker,
        "agents": n,
        "updates": updates,
        "steps": steps,
        "walls": walls,
        "peak_rss_mb": own_peak_rss_bytes() / MB,
        "labels": [labels[c] for c in ids],
        "pairs": len(strategy.sketched_.memory) if strategy.sketched_ else 0,
        "sketch_dim": strategy.sketched_.sketcher.dim if strategy.sketched_ else 0,
    }
    finish(strategy, args, args.rounds, line)


def time_checkpoint(strategy: Strategy, server_round: int) -> dict[str, float]:
    """Seconds to write what the coordinator saves after every round into a temporary
    folder — the strategy's state through :func:`~coordinator.engine.state.save_state`
    (fsync included) with the run summary in its service section, and ``summary.json`` —
    seconds to read the state back into the strategy, and the files' sizes. The summary
    holds the agents and the quality watch's figures as the watch writes them (assessed
    beforehand, untimed)."""
    summary = RunSummary("bench", strategy.name, server_round=server_round)
    summary.agents = list(strategy.client_ids_)
    quality = assess(strategy.cluster_evidence(), server_round)
    summary.cluster_quality = quality.to_json(listed=MERGE_CLIENTS_LISTED)
    with tempfile.TemporaryDirectory(prefix="faultfleet-checkpoint-") as folder:
        started = time.perf_counter()
        taken = strategy.state_dict()
        meta = {"server_round": server_round, "strategy": taken.meta}
        meta["service"] = {"summary": summary.to_json()}
        written = save_state(Path(folder) / "engine", EngineState(meta, dict(taken.arrays)))
        ServiceCheckpoint(Path(folder), RunSettings()).write_summary(summary)
        seconds = time.perf_counter() - started
        started = time.perf_counter()
        loaded = load_state(Path(folder) / "engine")
        strategy.load_state_dict(StrategyState(dict(loaded.arrays), loaded.meta["strategy"]))
        load_seconds = time.perf_counter() - started
        sizes = {p.name: p.stat().st_size / MB for p in written.iterdir()}
        summary_mb = (Path(folder) / "summary.json").stat().st_size / MB
    return {
        "checkpoint_seconds": seconds,
        "checkpoint_load_seconds": load_seconds,
        "checkpoint_meta_mb": sizes[META_FILE],
        "checkpoint_arrays_mb": sizes[ARRAYS_FILE],
        "checkpoint_summary_mb": summary_mb,
    }


def run_worker(args: argparse.Namespace, path: str, agents: int) -> dict[str, object]:
    """Run ``path`` at ``agents`` in a fresh process and return its JSON line."""
    threads = 1 if path == "sketch" else os.cpu_count() or 1
    arguments = ["--worker", path, "--worker-agents", str(agents)]
    arguments += ["--rounds", str(args.rounds), "--seed", str(args.seed)]
    arguments += ["--partners", str(args.partners), "--epsilon", str(args.epsilon)]
    arguments += ["--cache", str(args.cache), "--exact-pairs", args.exact_pairs]
    arguments += ["--strategy", args.strategy, "--reference", args.reference]
    if args.quality and path == "sketch":
        arguments.append("--quality")
    if args.checkpoint and path == "sketch":
        arguments.append("--checkpoint")
    return run_json_worker(__file__, arguments, threads, f"{path} worker at {agents} agents")


def main() -> None:
    """Parse the command line; run every fleet size; print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[1000, 2000, 5000, 10000, 20000])
    parser.add_argument(
        "--strategy",
        choices=["flacc", "flhc", "cfl", "fedavg", "ifca", "jgl"],
        default="flacc",
        help="whose server step is timed (flhc, cfl: every agent answers each round; "
        "fedavg: streamed against listed; jgl: its gradient probe included)",
    )
    parser.add_argument(
        "--reference",
        choices=["update", "gradient"],
        default="update",
        help="jgl's reference direction Δw (its option 'reference')",
    )
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--exact-up-to", type=int, default=20_000)
    parser.add_argument(
        "--exact-pairs",
        choices=["all", "sampled"],
        default="all",
        help="the exact path compares every pair, or the sketch path's sampled pairs",
    )
    parser.add_argument("--partners", type=int, default=32)
    parser.add_argument("--epsilon", type=float, default=0.25)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--quality",
        action="store_true",
        help="also time the cluster-quality assessment after the last round",
    )
    parser.add_argument(
        "--checkpoint",
        action="store_true",
        help="also time the checkpoint the coordinator writes after every round",
    )
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--worker", choices=["sketch", "exact"], help=argparse.SUPPRESS)
    parser.add_argument("--worker-agents", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    print("command: python " + shlex.join(sys.argv))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} cpus, load average {load}; {args.rounds} rounds per fleet size")
    print(f"strategy: {args.strategy}")
    recorded = recorded_updates(args.cache)
    print(f"recorded updates: {recorded.deltas.shape[0]} of {recorded.deltas.shape[1]} parameters")
    header = f"{'agents':>7}{'updates':>8}{'s/step':>8}{'worst':>8}{'wall':>8}{'RSS MB':>8}"
    print(header + f"{'pairs':>9}{'d':>6}{'ARI exact':>10}{'ARI true':>9}{'growth':>8}{'nlogn':>7}")
    rows, first = [], None
    for agents in sorted(args.agents):
        sketch = run_worker(args, "sketch", agents)
        steps = list(sketch["steps"])  # type: ignore[call-overload]
        truth = SyntheticFleet(recorded, agents, seed=args.seed).groups()
        labels: list[int] = sketch["labels"]  # type: ignore[assignment]
        ari_exact = float("nan")
        exact: dict[str, Any] = {}
        if agents <= args.exact_up_to:
            exact = dict(run_worker(args, "exact", agents))
            ari_exact = adjusted_rand_index(exact["labels"], labels)
        seconds = float(np.mean(steps))
        first = first or (agents, seconds)
        growth = seconds / first[1]
        nlogn = agents * math.log(agents) / (first[0] * math.log(first[0]))
        row = {
            "agents": agents,
            "updates_per_step": sketch["updates"],
            "seconds_per_step": seconds,
            "worst_seconds_per_step": float(np.max(steps)),
            "wall_seconds_per_step": float(np.mean(sketch["walls"])),  # type: ignore[call-overload]
            "peak_rss_mb": sketch["peak_rss_mb"],
            "ari_vs_exact": ari_exact,
            "exact_pairs": args.exact_pairs if agents <= args.exact_up_to else None,
            "ari_vs_truth": adjusted_rand_index(truth, labels),
            "pairs_remembered": sketch["pairs"],
            "sketch_dim": sketch["sketch_dim"],
            "growth": growth,
            "nlogn_growth": nlogn,
            "quality_seconds": sketch.get("quality_seconds"),
            "quality_peak_rss_mb": sketch.get("quality_peak_rss_mb"),
            **{k: v for k, v in sketch.items() if k.startswith("checkpoint_")},
            "exact_seconds_per_step": float(np.mean(exact["steps"])) if exact else None,
            "exact_peak_rss_mb": exact.get("peak_rss_mb"),
        }
        rows.append(row)
        print(
            f"{agents:>7}{row['updates_per_step']:>8}{seconds:>8.3f}"
            f"{row['worst_seconds_per_step']:>8.3f}{row['wall_seconds_per_step']:>8.3f}"
            f"{row['peak_rss_mb']:>8.0f}{row['pairs_remembered']:>9}{row['sketch_dim']:>6}"
            f"{ari_exact:>10.3f}{row['ari_vs_truth']:>9.3f}{growth:>8.1f}{nlogn:>7.1f}",
            flush=True,
        )
        if exact:
            print(
                f"{'':>7} exact path ({len(exact['steps'])} rounds, all cores): "
                f"{row['exact_seconds_per_step']:.3f} s/step, peak RSS "
                f"{row['exact_peak_rss_mb']:.0f} MB",
                flush=True,
            )
        if args.quality:
            print(
                f"{'':>7} quality assessment after round {args.rounds}: "
                f"{row['quality_seconds']:.2f} s, peak RSS {row['quality_peak_rss_mb']:.0f} MB",
                flush=True,
            )
        if args.checkpoint:
            print(
                f"{'':>7} checkpoint after round {args.rounds}: written in "
                f"{row['checkpoint_seconds']:.3f} s, read back in "
                f"{row['checkpoint_load_seconds']:.3f} s; state.json "
                f"{row['checkpoint_meta_mb']:.1f} MB, arrays.npz "
                f"{row['checkpoint_arrays_mb']:.1f} MB, summary.json "
                f"{row['checkpoint_summary_mb']:.1f} MB",
                flush=True,
            )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
