"""The coordinator's work per agent status as the fleet grows: a status must cost O(1).

Usage: python benchmarks/bench_fleet_statuses.py [--agents 1000 5000 10000 20000]
       [--repeats 3] [--json FILE]

A fleet's start, a broker restart and every reconnection of the coordinator deliver one
retained status per agent, all at once, on paho's network thread. For each N this builds a
real :class:`~coordinator.runtime.service.CoordinatorService` (no broker: its connection is
never started; a temporary state folder) and hands its status handler the ``online``
statuses of N agents, encoded as agents publish them, in one go, as the network thread
would; after each status it also evaluates the test the service's wait for its first
agents re-checks on every status (``run.min_agents`` = N). Then the same N statuses again
(a reconnection: every agent known and online already) and N last wills.

Prints, per N and per pass, the CPU seconds of the handler and the wait's test together
(``time.process_time``, one thread), the microseconds per status and their growth against
the smallest N: a status that costs O(1) keeps microseconds per status flat, one that
scans the fleet makes them grow with N. Median of ``--repeats``. Numbers only, no
pass/fail.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.runtime.service import CoordinatorService
from coordinator.runtime.settings import CoordinatorSettings
from faultfleet.wire.messages import AgentStatus
from faultfleet.wire.topics import Topics

PASSES = ("first online", "online again", "offline")


def statuses(agents: list[str], state: str) -> list[tuple[str, bytes]]:
    """(topic, payload) of each agent's status, as the agent (or its last will) sends it."""
    topics = Topics()
    out = []
    for agent in agents:
        if state == "online":
            message = AgentStatus(
                agent_id=agent, state="online", can_train=True, num_train_samples=500
            )
        else:
            message = AgentStatus(agent_id=agent, state="offline")
        out.append((topics.agent_status(agent), message.model_dump_json().encode()))
    return out


def measure(n: int, folder: Path) -> dict[str, float]:
    """CPU seconds of each pass of N statuses through one fresh coordinator's handler."""
    settings = CoordinatorSettings(state_dir=folder)
    service = CoordinatorService(settings, CoordinatorMetrics(CollectorRegistry()))
    registry = service.registry
    agents = [f"m{i:06d}" for i in range(n)]
    online, offline = statuses(agents, "online"), statuses(agents, "offline")
    seconds = {}
    for name, messages in zip(PASSES, (online, online, offline), strict=True):
        waiting = 0  # statuses after which the start-up wait was still waiting
        started = time.process_time()
        for topic, payload in messages:
            service._on_status(topic, payload)
            waiting += registry.counts().online_trainers < n  # the start-up wait's test
        seconds[name] = time.process_time() - started
        expected = {"first online": n - 1, "online again": 0, "offline": n}[name]
        if waiting != expected:
            raise RuntimeError(f"{name}: the wait went on after {waiting} statuses of {n}")
    if registry.online() or len(registry.all()) != n:
        raise RuntimeError(f"the registry holds {len(registry.all())} agents, expected {n}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[1000, 5000, 10000, 20000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the service warns once about its new key
    rows = []
    print(f"{'agents':>8} {'pass':<14}{'cpu_s':>9}{'us/status':>11}{'growth':>8}", flush=True)
    first: dict[str, float] = {}
    for n in sorted(args.agents):
        runs = []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory(prefix="bench-statuses-") as folder:
                runs.append(measure(n, Path(folder)))
        for name in PASSES:
            cpu = statistics.median(run[name] for run in runs)
            per_status = cpu / n * 1e6
            first.setdefault(name, per_status)
            growth = per_status / first[name]
            rows.append(
                {
                    "agents": n,
                    "pass": name,
                    "cpu_s": cpu,
                    "us_per_status": per_status,
                    "growth": growth,
                }
            )
            print(f"{n:>8} {name:<14}{cpu:>9.3f}{per_status:>11.1f}{growth:>8.2f}", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"benchmark": "fleet_statuses", "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
