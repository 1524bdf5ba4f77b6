"""faultfleet's simulator against a Flower simulation and a bare PyTorch loop, same work.

Usage: python benchmarks/bench_peers.py [--repeats 3] [--rounds 20] [--model compact|paper]
       [--runners faultfleet flower bare] [--flower-python PATH] [--threads N]
       [--clients-per-group 8] [--windows-per-client 200 600] [--epochs 5] [--seed 0]
       [--json FILE]

The workload is FLACC §VI's mixed-fault FedAvg run: 48 machines (8 per fault group), c =
0.25 (12 clients a round), E = 5, B = 32, Adam 5e-4, the ``compact`` (or ``paper``) zoo
model. The federation is built once, here, with faultfleet's scenario builder and written
to a temporary folder with the initial weights and the clients (and training seeds) every
round samples, so that the three runners train the same clients on the same windows from
the same weights (:mod:`peers_workload`):

* ``faultfleet``: ``run_simulation`` with FedAvg, as ``faultfleet sim`` runs it (thread
  policy, automatic training path);
* ``flower``: a Flower simulation on Ray (:mod:`peers_flower`), one actor per core;
* ``bare``: a plain PyTorch loop, one client after the other, with torch's own thread
  count and OpenMP's default waiting (what a plain script gets).

Each run is a fresh process; runs are interleaved (faultfleet, flower, bare, faultfleet,
...) so that a busy machine slows them alike. Per run: start-up (process start to the
first round: imports, data loading, Ray and its actors for Flower), the median and mean
seconds of a round, the final evaluation's seconds (faultfleet's is inside its last
round), the whole process's wall time, the peak resident memory of the process and all
its children (Ray's processes included; sampled every 0.2 s) and the final accuracy, the
mean over the 48 clients of each one's test accuracy with the final global model. Then
the medians per runner and faultfleet's speed-up over each peer (the peer's seconds over
faultfleet's, above 1 when faultfleet is faster). Numbers only, no pass/fail.

Flower is an optional dependency (``pip install "faultfleet[peers]"``); without it (in
``--flower-python``, by default this interpreter) the other two runners still run and the
output says Flower was left out.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from peers_workload import Record, Workload, run_bare, run_faultfleet, save_workload
from process_memory import PeakSampler

from faultfleet.models.zoo import MODEL_NAMES, model_factory
from faultfleet.tasks import client_seed
from faultfleet_apps.simulation.config import profile
from faultfleet_apps.simulation.runner import build_federation, make_engine
from faultfleet_apps.thread_policy import apply_thread_policy
from signal_pipeline.federation import Federation

RUNNERS = ("faultfleet", "flower", "bare")
ROOT = Path(__file__).resolve().parents[1]
MB = 1024 * 1024


def build_workload(args: argparse.Namespace) -> tuple[Federation, Workload, Any]:
    """The federation (faultfleet's builder), the workload and the initial weights."""
    low, high = args.windows_per_client
    config = profile(
        "paper",
        strategy="fedavg",
        seed=args.seed,
        rounds=args.rounds,
        model=args.model,
        clients_per_group=args.clients_per_group,
        windows_per_client=(low, high),
        device="cpu",
    )
    config = replace(config, train=replace(config.train, epochs=args.epochs))
    federation = build_federation(config)
    # The clients faultfleet's FedAvg samples for this seed: its engine's own draws.
    engine = make_engine(config, federation)
    index = {c.client_id: i for i, c in enumerate(federation.clients)}
    schedule = []
    for server_round in range(1, config.rounds + 1):
        sampled = engine.strategy.configure_round(
            server_round, engine.fleet.available(), engine.rng
        )
        schedule.append(
            tuple(
                (index[i.client_id], client_seed(config.seed, server_round, i.client_id))
                for i in sampled
            )
        )
    workload = Workload(
        model=config.model,
        rounds=config.rounds,
        fraction=config.fraction,
        epochs=config.train.epochs,
        batch_size=config.train.batch_size,
        learning_rate=config.train.learning_rate,
        seed=config.seed,
        sample_shape=federation.sample_shape,
        n_classes=federation.n_classes,
        class_names=federation.class_names,
        clients=tuple((c.client_id, c.group) for c in federation.clients),
        schedule=tuple(schedule),
    )
    init = model_factory(config.model, federation.sample_shape, federation.n_classes, config.seed)
    return federation, workload, init(0)


def flower_missing(python: str) -> str | None:
    """Why ``python`` cannot run the Flower simulation, or None when it can."""
    try:
        probe = subprocess.run(
            [python, "-c", "import flwr, ray; print(flwr.__version__, ray.__version__)"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as error:
        return f"{python} does not run ({error})"
    if probe.returncode == 0:
        return None
    last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
    return f"{python} cannot import flwr and ray ({last})"


def run_child(name: str, python: str, data: Path, threads: int | None, log: Path) -> Record:
    """One run of runner ``name`` in a fresh process; its record, wall time and peak RSS."""
    result = data.parent / f"{name}-result.json"
    result.unlink(missing_ok=True)
    command = [python, __file__, "--run", name, "--data", str(data), "--result", str(result)]
    command += ["--started", repr(time.time())]
    if threads is not None:
        command += ["--threads", str(threads)]
    # The checkout first (the Flower interpreter may see faultfleet installed elsewhere).
    # faultfleet and Flower wait passively, as the faultfleet command line sets it
    # (faultfleet_apps/cli/__init__.py); the bare loop keeps the environment's OpenMP
    # defaults, as a plain script would.
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    if name != "bare":
        env["OMP_WAIT_POLICY"] = os.environ.get("OMP_WAIT_POLICY", "PASSIVE")
    began = time.perf_counter()
    with log.open("ab") as output:
        child = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
        with PeakSampler(child.pid) as sampler:
            status = child.wait()
    if status != 0 or not result.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise RuntimeError(f"the {name} run failed with status {status}; its output ends:\n{tail}")
    record: Record = json.loads(result.read_text(encoding="utf-8"))
    record.update(
        runner=name, wall_s=time.perf_counter() - began, peak_rss_mb=sampler.peak_bytes / MB
    )
    record["seconds_per_round"] = statistics.median(record["round_s"])
    return record


def summarise(runs: list[Record]) -> tuple[dict[str, Record], dict[str, float]]:
    """Medians per runner over the repeats, and faultfleet's speed-ups over the peers."""
    keys = ("startup_s", "seconds_per_round", "eval_s", "wall_s", "peak_rss_mb", "final_accuracy")
    summary = {}
    for name in dict.fromkeys(r["runner"] for r in runs):
        mine = [r for r in runs if r["runner"] == name]
        summary[name] = {k: statistics.median(r[k] for r in mine) for k in keys}
        summary[name]["mean_round_s"] = statistics.median(
            statistics.fmean(r["round_s"]) for r in mine
        )
    ratios = {}
    if "faultfleet" in summary:
        ours = summary["faultfleet"]
        for peer in ("flower", "bare"):
            if peer in summary:
                ratios[f"faultfleet/{peer}"] = (
                    summary[peer]["seconds_per_round"] / ours["seconds_per_round"]
                )
                ratios[f"faultfleet/{peer} wall"] = summary[peer]["wall_s"] / ours["wall_s"]
    return summary, ratios


def child_main(args: argparse.Namespace) -> None:
    """``--run NAME``: one runner in this process, its record written to ``--result``."""
    if args.run == "flower":
        from peers_flower import run_flower  # noqa: PLC0415 — needs Flower installed

        record = run_flower(args.data, args.started)
    elif args.run == "faultfleet":
        apply_thread_policy(args.threads)
        record = run_faultfleet(args.data, args.started)
    else:  # a plain script: torch's own thread count unless --threads says otherwise
        if args.threads is not None:
            import torch  # noqa: PLC0415 — the parent process does not need it

            torch.set_num_threads(args.threads)
        record = run_bare(args.data, args.started)
    args.result.write_text(json.dumps(record), encoding="utf-8")


def main() -> None:
    """Run the benchmark and print its table (and write ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--model", choices=MODEL_NAMES, default="compact")
    parser.add_argument("--runners", nargs="+", choices=RUNNERS, default=list(RUNNERS))
    parser.add_argument("--flower-python", default=sys.executable, help="interpreter with flwr")
    parser.add_argument(
        "--threads", type=int, help="torch threads of faultfleet (its lanes on the CPU) and of bare"
    )
    parser.add_argument("--clients-per-group", type=int, default=8)
    parser.add_argument("--windows-per-client", type=int, nargs=2, default=[200, 600])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write every run and the summary here")
    parser.add_argument("--run", choices=RUNNERS, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--started", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        child_main(args)
        return
    print("command: python " + shlex.join(sys.argv), flush=True)
    runners = list(dict.fromkeys(args.runners))
    missing = flower_missing(args.flower_python) if "flower" in runners else None
    if missing:
        print(f"Flower left out: {missing}; pip install 'faultfleet[peers]' to include it")
        runners.remove("flower")
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as name:
        folder = Path(name)
        federation, workload, init = build_workload(args)
        save_workload(folder / "data", federation, workload, init)
        print(
            f"{len(workload.clients)} clients, {args.rounds} rounds, model {args.model}, "
            f"E={workload.epochs}, B={workload.batch_size}, Adam {workload.learning_rate:g}; "
            f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}",
            flush=True,
        )
        runs = []
        print(
            f"{'runner':<12}{'startup_s':>10}{'round_s':>9}{'eval_s':>8}{'wall_s':>8}{'rss_mb':>8}{'accuracy':>10}"
        )
        for _ in range(args.repeats):
            for runner in runners:
                python = args.flower_python if runner == "flower" else sys.executable
                record = run_child(
                    runner, python, folder / "data", args.threads, folder / f"{runner}.log"
                )
                runs.append(record)
                print(
                    f"{runner:<12}{record['startup_s']:>10.2f}{record['seconds_per_round']:>9.2f}"
                    f"{record['eval_s']:>8.2f}{record['wall_s']:>8.1f}{record['peak_rss_mb']:>8.0f}"
                    f"{record['final_accuracy']:>10.4f}",
                    flush=True,
                )
    summary, ratios = summarise(runs)
    print(f"\nmedians of {args.repeats} interleaved runs")
    for runner, values in summary.items():
        print(f"{runner:<12}" + "  ".join(f"{k} {v:.3f}" for k, v in values.items()))
    for label, value in ratios.items():
        print(f"speed-up {label}: {value:.2f}x")
    if args.json is not None:
        document = {
            "command": shlex.join(sys.argv),
            "workload": {k: v for k, v in asdict(workload).items() if k != "schedule"},
            "flower": missing or "included",
            "runs": runs,
            "summary": summary,
            "ratios": ratios,
        }
        args.json.write_text(json.dumps(document, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
