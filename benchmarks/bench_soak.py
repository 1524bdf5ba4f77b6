"""Soak: a fleet of simulated agents, campaigns and diagnoses for an hour; does memory grow?

Usage: python benchmarks/bench_soak.py [--agents 48] [--processes 2] [--minutes 60]
       [--warm-up-minutes 5] [--sample-s 30] [--interval-s 0.5] [--campaign-every-s 120]
       [--campaign-rounds 2] [--growing-mb-per-hour 5] [--seed 100] [--out DIR] [--json FILE]
       [--probe DIR [--tracemalloc]]

Runs the fleet of ``faultfleet demo`` as separate processes, exactly as a plant would run it
(:mod:`faultfleet_apps.demo.fleet` writes the files): a Mosquitto broker with per-agent
accounts and the ACL, ``faultfleet coordinator`` (FLACC, compact model, ``--agents``
simulated machines of the mixed-fault scenario in 6 groups) and ``--processes`` ``faultfleet
agent --machines`` processes sharing the agents. Every agent diagnoses a window every
``--interval-s`` seconds and publishes it; the coordinator trains a first campaign of 4
rounds, then a campaign of ``--campaign-rounds`` rounds every ``--campaign-every-s``
seconds (``[campaigns] every``), each ending with new cluster models published through the
promotion gate, which the agents load. Agents keep at most 4 MB of diagnosed windows, so
the window store prunes all along.

Every ``--sample-s`` seconds it reads the RSS of every process (``VmRSS`` in
``/proc/<pid>/status``: the coordinator, each agent process, the broker). After the run it
prints, per process, the RSS at the first sample after ``--warm-up-minutes`` (start), at the
end, the largest, the least-squares slope in MB per hour over the samples after the warm-up
and a verdict: ``growing`` when the slope reaches ``--growing-mb-per-hour``, else ``flat``
(:mod:`soak_memory`). It also prints the rounds, campaigns and diagnoses seen, so a run
where the fleet stalled shows. ``--json FILE`` writes the same with every sample. Numbers
only, no pass/fail. Keep the load modest to run it beside other work: the defaults use
about a third of a core for diagnoses plus the training rounds. ``--probe DIR`` runs each
agent process through ``agent_memory_probe.py``, which samples inside it what the memory is
(glibc's arenas, Python's heap, ONNX Runtime sessions) into ``DIR/agents-<i>.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import AbstractContextManager, ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

from soak_memory import RssSampler, RssTrend

from faultfleet_apps.brokers.accounts import HISTORIAN
from faultfleet_apps.brokers.launch import find_mosquitto, start_broker
from faultfleet_apps.demo.fleet import (
    DemoPlan,
    child_process,
    machine_slices,
    prepare_secrets,
    write_configs,
)
from faultfleet_apps.demo.monitor import FleetMonitor
from faultfleet_apps.thread_policy import torch_threads, usable_cores

GROUPS = 6
FIRST_CAMPAIGN_ROUNDS = 4
KEEP_WINDOWS_BYTES = 4_000_000


def child(command: list[str], log_path: Path) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """A child process in its own session, stopped with SIGTERM (then SIGKILL) on exit."""
    return child_process(command, log_path, stop_timeout_s=60.0)


def probe_command(args: argparse.Namespace, index: int) -> list[str]:
    """The agent process run through ``agent_memory_probe.py``, its samples in ``--probe``."""
    args.probe.mkdir(parents=True, exist_ok=True)
    script = Path(__file__).with_name("agent_memory_probe.py")
    out = args.probe / f"agents-{index}.jsonl"
    command = [sys.executable, str(script), "--probe-out", str(out.resolve())]
    command += ["--probe-s", f"{args.sample_s:g}"]
    flags = [f for f, on in (("--tracemalloc", args.tracemalloc), ("--trim", args.trim)) if on]
    if args.tracemalloc:
        flags += ["--baseline-s", f"{args.warm_up_minutes * 60:g}"]
    return [*command, *flags, "--"]


def soak_configs(plan: DemoPlan, args: argparse.Namespace, coordinator: Path, agents: Path) -> None:
    """Add the campaign schedule and the small window store to the demo's files."""
    with coordinator.open("a", encoding="utf-8") as file:
        file.write(
            f'\n[campaigns]\nevery = "{args.campaign_every_s:g}s"\n'
            f"rounds = {args.campaign_rounds}\n"
        )
    with agents.open("a", encoding="utf-8") as file:
        file.write(f"\n[labels]\nkeep_windows_bytes = {KEEP_WINDOWS_BYTES}\n")


def run_soak(args: argparse.Namespace, out: Path) -> tuple[dict[str, Any], list[RssTrend]]:
    """Run the fleet and sample it: the report (for JSON) and each process's trend."""
    if args.agents % GROUPS or args.agents < GROUPS:
        raise SystemExit(f"--agents must be a multiple of {GROUPS}, got {args.agents}")
    plan = DemoPlan(
        out=out,
        seed=args.seed,
        clients_per_group=args.agents // GROUPS,
        groups=GROUPS,
        rounds=FIRST_CAMPAIGN_ROUNDS,
        fraction=0.25,
        epochs=1,
        agent_processes=args.processes,
        interval_s=args.interval_s,
    )
    if find_mosquitto() is None:
        raise SystemExit("the soak needs Mosquitto (apt-get install mosquitto)")
    secrets = prepare_secrets(plan)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "faultfleet_apps.cli.main"]
    threads = str(torch_threads(cores=usable_cores(), workers=args.processes + 1))
    with ExitStack() as stack:
        broker = stack.enter_context(
            start_broker(
                prefer="mosquitto",
                workdir=out / "broker",
                extra_config=secrets.accounts.mosquitto_lines(),
            )
        )
        coordinator_toml, agents_toml = write_configs(plan, broker, secrets)
        soak_configs(plan, args, coordinator_toml, agents_toml)
        monitor = FleetMonitor(secrets.broker_settings(broker, HISTORIAN))
        monitor.start()
        stack.callback(monitor.stop)
        processes = {"broker": broker.pid}
        for index, machines in enumerate(machine_slices(plan.machines, plan.agent_processes)):
            agent = [*command, "agent", "--config", str(agents_toml), "--machines", machines]
            if args.probe is not None:
                agent = [*probe_command(args, index), *agent[3:]]
            started = stack.enter_context(
                child([*agent, "--threads", threads], logs / f"agents-{index}.log")
            )
            processes[f"agents-{index} ({machines})"] = started.pid
        coordinator = stack.enter_context(
            child(
                [*command, "coordinator", "--config", str(coordinator_toml)],
                logs / "coordinator.log",
            )
        )
        processes["coordinator"] = coordinator.pid
        sampler = RssSampler(processes)
        started_s = time.monotonic()
        duration_s = args.minutes * 60
        gone: list[str] = []
        while True:
            elapsed = time.monotonic() - started_s
            gone = sampler.sample(elapsed)
            if gone or elapsed >= duration_s:
                break
            rounds, diagnoses = monitor.server_round(), monitor.live.total
            print(f"{elapsed / 60:6.1f} min: round {rounds}, {diagnoses} diagnoses", flush=True)
            time.sleep(min(args.sample_s, max(0.0, duration_s - elapsed)))
        status = monitor.status
        hours = (time.monotonic() - started_s) / 3600
    trends = sampler.trends(
        warm_up_s=args.warm_up_minutes * 60, growing_mb_per_hour=args.growing_mb_per_hour
    )
    campaign = status.campaign if status is not None else None
    report = {
        "agents": plan.machines,
        "agent_processes": plan.agent_processes,
        "hours": hours,
        "warm_up_minutes": args.warm_up_minutes,
        "sample_s": args.sample_s,
        "growing_mb_per_hour": args.growing_mb_per_hour,
        "processes_gone": gone,
        "rounds": status.server_round if status is not None else 0,
        "campaigns": campaign.campaign_id if campaign is not None else None,
        "diagnoses_received": monitor.live.total,
        "processes": [
            {
                **_finite(asdict(trend)),
                "rss_samples": [
                    [t, r]
                    for t, r in zip(
                        sampler.series[trend.name].times_s,
                        sampler.series[trend.name].rss_mb,
                        strict=True,
                    )
                ],
            }
            for trend in trends
        ],
    }
    return report, trends


def _finite(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with NaN as None, for JSON."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in fields.items()}


def print_report(report: dict[str, Any], trends: list[RssTrend]) -> None:
    """The table of processes and the fleet's activity."""
    print(
        f"\n{report['agents']} agents in {report['agent_processes']} processes, "
        f"{report['hours']:.2f} h; rounds {report['rounds']}, last campaign "
        f"{report['campaigns']}, {report['diagnoses_received']} diagnoses received"
    )
    if report["processes_gone"]:
        print(f"stopped early: {', '.join(report['processes_gone'])} exited")
    print(
        f"{'process':<24}{'samples':>8}{'start_mb':>10}{'end_mb':>9}{'max_mb':>9}"
        f"{'mb_per_h':>10}  verdict"
    )
    for t in trends:
        print(
            f"{t.name:<24}{t.samples:>8}{t.start_mb:>10.1f}{t.end_mb:>9.1f}{t.max_mb:>9.1f}"
            f"{t.slope_mb_per_hour:>10.2f}  {t.verdict}"
        )


def main() -> None:
    """Run the soak and print (and optionally write) the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=48, help="simulated machines")
    parser.add_argument("--processes", type=int, default=2, help="agent processes")
    parser.add_argument("--minutes", type=float, default=60.0, help="length of the run")
    parser.add_argument(
        "--warm-up-minutes", type=float, default=5.0, help="samples left out of the slope"
    )
    parser.add_argument("--sample-s", type=float, default=30.0, help="seconds between RSS samples")
    parser.add_argument("--interval-s", type=float, default=0.5, help="seconds between windows")
    parser.add_argument(
        "--campaign-every-s", type=float, default=120.0, help="seconds between campaigns"
    )
    parser.add_argument("--campaign-rounds", type=int, default=2, help="rounds per campaign")
    parser.add_argument(
        "--growing-mb-per-hour",
        type=float,
        default=5.0,
        help="slope from which a process is growing",
    )
    parser.add_argument("--seed", type=int, default=100, help="seed of the fleet and the run")
    parser.add_argument("--out", type=Path, default=None, help="folder kept (default: temp)")
    parser.add_argument("--json", type=Path, default=None, help="also write the samples here")
    parser.add_argument(
        "--probe",
        type=Path,
        default=None,
        help="run the agent processes through agent_memory_probe.py, its samples in this folder",
    )
    parser.add_argument(
        "--tracemalloc", action="store_true", help="with --probe: trace Python's allocations"
    )
    parser.add_argument(
        "--trim", action="store_true", help="with --probe: malloc_trim(0) after every sample"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # kill (SIGTERM) and Ctrl-C stop the fleet it started, also when run in the background
    # (where a shell starts it with SIGINT ignored); the report is then not printed
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    print("command: python " + shlex.join(sys.argv), flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as temporary:
        out = args.out or Path(temporary)
        report, trends = run_soak(args, out.resolve())
    print_report(report, trends)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
