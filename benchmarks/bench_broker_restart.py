"""A broker killed mid-round: updates lost, rounds held to their deadline, clusters changed?

Usage: python benchmarks/bench_broker_restart.py [--agents 6] [--rounds 40] [--kills 3]
       [--down-s 5] [--strategy flacc] [--seed 100]

Runs the same federated run twice over a private Mosquitto (configured as
``faultfleet_apps.brokers.launch`` does: persistence saved after every change), with
``--agents`` simulated machines of the mixed-fault scenario (two per group) as agents in this
process, built as ``faultfleet agent --machines`` builds them, and the coordinator service
in a thread, round deadline 60 s:

1. uninterrupted;
2. with the broker killed (SIGKILL) in the middle of ``--kills`` rounds spread over the run
   — once some of the round's updates arrived and others had not — kept down ``--down-s``
   seconds, and restarted on the same port and folder.

Prints, for the interrupted run: updates received against expected (rounds x agents) and
lost, agents failed at a deadline, rounds retried for a missing quorum, each killed round's
duration, tasks the coordinator sent again and duplicate answers it ignored; and whether the
final clusters (``summary.json``) and every array of the strategy's state (the cluster
models) equal the uninterrupted run's. Numbers only, no pass/fail.
"""

from __future__ import annotations

import argparse
import logging
import re
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.runtime.run_summary import RunSummary
from coordinator.runtime.service import CoordinatorService
from coordinator.runtime.settings import CoordinatorSettings, RunSettings, TrainSettings
from edge_agent.compute_turns import ComputeTurns
from edge_agent.metrics import AgentMetrics
from edge_agent.service import AgentService
from edge_agent.settings import AgentSettings, DiagnosisSettings, SigningSettings, SourceSettings
from faultfleet.wire.settings import BrokerSettings, MetricsSettings
from faultfleet.wire.signing import SigningKey
from faultfleet_apps.brokers.launch import RunningBroker, start_broker
from faultfleet_apps.cli.agent_run import build_source

DEADLINE_S = 60.0
_ROUND_LINE = re.compile(r"round (\d+)/\d+: (\d+) of (\d+) answered, \d+ cluster\(s\), ([\d.]+) s")


class Lines(logging.Handler):
    """Keeps the messages of the loggers it is attached to."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@dataclass
class Outcome:
    summary: RunSummary
    arrays: dict[str, np.ndarray]
    registry: CollectorRegistry
    agent_registry: CollectorRegistry
    rounds: dict[int, tuple[int, int, float]]
    """Round → (answered, sampled, seconds), from the coordinator's log."""
    deadline_failures: int
    killed_rounds: list[int]


def _agents(
    settings: BrokerSettings, root: Path, n_agents: int, seed: int, key: SigningKey
) -> list[AgentService]:
    metrics: AgentMetrics | None = None
    lock = ComputeTurns()
    agents = []
    for index in range(n_agents):
        config = AgentSettings(
            agent_id=f"m{index:02d}",
            device="cpu",
            state_dir=root / f"m{index:02d}",
            broker=settings,
            metrics=MetricsSettings(port=0),
            source=SourceSettings(
                seed=seed, machine_index=index, clients_per_group=2, windows_per_client=(60, 90)
            ),
            diagnosis=DiagnosisSettings(interval_s=1.0, publish=False),
            signing=SigningSettings(trusted_keys=(key.public_text,)),
        )
        source = build_source(config.source, config.diagnosis.interval_s, ())
        metrics = metrics or AgentMetrics(CollectorRegistry(), class_names=source.class_names)
        agents.append(AgentService(config, source, metrics=metrics, compute_lock=lock))
    return agents


def run(args: argparse.Namespace, kill_rounds: list[int], report: Callable[[str], None]) -> Outcome:
    """One run; the broker is killed mid-round in each of ``kill_rounds``."""
    lines = Lines()
    for name in ("coordinator.engine.rounds", "coordinator.runtime.round_loop"):
        logging.getLogger(name).addHandler(lines)
        logging.getLogger(name).setLevel(logging.DEBUG)
        logging.getLogger(name).propagate = False
    key = SigningKey.generate()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        broker = start_broker(prefer="mosquitto", workdir=root / "broker")
        try:
            settings = BrokerSettings(host=broker.host, port=broker.port)
            agents = _agents(settings, root, args.agents, args.seed, key)
            stop = threading.Event()
            threads = [threading.Thread(target=a.run, args=(stop,)) for a in agents]
            for thread in threads:
                thread.start()
            key.save(root / "coordinator" / "signing.key")
            registry = CollectorRegistry()
            service = CoordinatorService(
                CoordinatorSettings(
                    state_dir=root / "coordinator",
                    broker=settings,
                    metrics=MetricsSettings(port=0),
                    run=RunSettings(
                        strategy=args.strategy,
                        rounds=args.rounds,
                        fraction=1.0,
                        min_agents=args.agents,
                        round_deadline_s=DEADLINE_S,
                        eval_every=100,
                        publish_every=10,
                        seed=args.seed,
                    ),
                    train=TrainSettings(epochs=1),
                ),
                CoordinatorMetrics(registry),
            )
            result: list[RunSummary | None] = []
            coordinator = threading.Thread(
                target=lambda: result.append(service.run(threading.Event(), exit_when_done=True))
            )
            coordinator.start()
            for server_round in kill_rounds:
                _kill_mid_round(service, broker, server_round, args, report)
            coordinator.join()
            stop.set()
            for thread in threads:
                thread.join(timeout=60)
        finally:
            broker.stop()
    summary = result[0] if result else None
    if summary is None or service.engine is None:
        raise RuntimeError("the coordinator ended without finishing the run")
    for name in ("coordinator.engine.rounds", "coordinator.runtime.round_loop"):
        logging.getLogger(name).removeHandler(lines)
    rounds = {}
    for message in lines.messages:
        match = _ROUND_LINE.search(message)
        if match:
            number, answered, sampled, seconds = match.groups()
            rounds[int(number)] = (int(answered), int(sampled), float(seconds))
    return Outcome(
        summary,
        dict(service.engine.state().arrays),
        registry,
        agents[0].metrics.registry,
        rounds,
        sum("no answer within" in m for m in lines.messages),
        kill_rounds,
    )


def _kill_mid_round(
    service: CoordinatorService,
    broker: RunningBroker,
    server_round: int,
    args: argparse.Namespace,
    report: Callable[[str], None],
) -> None:
    """Kill the broker once ``server_round`` has some updates in and some missing."""
    while True:
        engine, fleet = service.engine, service.fleet
        if engine is not None and fleet is not None and engine.server_round == server_round - 1:
            waiting = fleet.waiting_for()
            if 0 < len(waiting) < args.agents:
                break
        time.sleep(0.005)
    broker.kill()
    report(
        f"  round {server_round}: broker killed with {len(waiting)} of {args.agents} "
        f"updates missing; down {args.down_s:g} s"
    )
    time.sleep(args.down_s)
    broker.restart()


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--down-s", type=float, default=5.0)
    parser.add_argument("--strategy", default="flacc")
    parser.add_argument("--seed", type=int, default=100)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    step = args.rounds // (args.kills + 1)
    kill_rounds = [step * (k + 1) for k in range(args.kills)]
    print(
        f"{args.agents} agents, {args.rounds} rounds of {args.strategy}, seed {args.seed}, "
        f"round deadline {DEADLINE_S:g} s"
    )
    started = time.monotonic()
    plain = run(args, [], print)
    print(f"uninterrupted run: {time.monotonic() - started:.0f} s")
    started = time.monotonic()
    print(f"interrupted run: broker killed in rounds {kill_rounds}")
    hit = run(args, kill_rounds, print)
    print(f"interrupted run: {time.monotonic() - started:.0f} s")
    expected = args.rounds * args.agents
    received = _value(hit.registry, "faultfleet_updates_received_total")
    answered = sum(a for a, _, _ in hit.rounds.values())
    print(
        f"updates received {received:.0f} of {expected}; lost (sampled, not answered) "
        f"{sum(s - a for a, s, _ in hit.rounds.values())}; answered per round log {answered}"
    )
    print(
        f"agents failed at the {DEADLINE_S:g} s deadline: {hit.deadline_failures}; "
        f"rounds retried for the quorum: {hit.summary.rounds_retried}"
    )
    killed = {r: hit.rounds.get(r, (0, 0, float("nan")))[2] for r in kill_rounds}
    others = [s for r, (_, _, s) in hit.rounds.items() if r not in kill_rounds]
    print(
        f"killed rounds' durations (s): {killed}; other rounds: median "
        f"{float(np.median(others)):.2f} s, max {max(others):.2f} s"
    )
    print(
        f"tasks sent again {_value(hit.registry, 'faultfleet_tasks_resent_total'):.0f}, "
        f"duplicate answers ignored "
        f"{_value(hit.registry, 'faultfleet_updates_rejected_total', reason='duplicate'):.0f}, "
        f"repeated tasks seen by agents "
        f"{_value(hit.agent_registry, 'faultfleet_tasks_repeated_total'):.0f}"
    )
    same_arrays = plain.arrays.keys() == hit.arrays.keys() and all(
        np.array_equal(plain.arrays[k], hit.arrays[k]) for k in plain.arrays
    )
    same_clusters = plain.summary.clusters == hit.summary.clusters
    print(
        f"final clusters equal the uninterrupted run's: {same_clusters} "
        f"({len(hit.summary.clusters)} clusters: {sorted(hit.summary.clusters.values())}); "
        f"strategy state ({len(plain.arrays)} arrays) bit-identical: {same_arrays}"
    )


if __name__ == "__main__":
    main()
