"""Honest agents' live accuracy with one poisoning gateway in the fleet, defended or not.

Usage: PYTHONPATH=. python benchmarks/bench_poisoning.py [--honest 6] [--per-group 2]
       [--rounds 20] [--strategy flacc] [--live-windows 1000]
       [--scenarios clean undefended field greedy smart]

Each scenario starts a private Mosquitto with a login per account and the shipped ACL, runs
``--honest`` simulated machines as edge agents (``faultfleet agent --machines`` wiring,
``--per-group`` machines per fault group) and the coordinator in this process, trains
``--rounds`` rounds with every agent in every round and publishes the final models once;
once every honest agent serves its final model, each one's *live accuracy* is that model's
accuracy on the first ``--live-windows`` fresh windows its machine streams — the windows and
the model its live diagnosis sees, the same windows in every scenario, so that scenarios
compare paired (counting the agents' own diagnoses for a while would compare different
windows, whose sampling noise alone is about 2 points at 500 windows). The poisoning
gateway (``tests/integration/poisoning.py``) logs in with its own account only:

* ``clean``: no gateway;
* ``undefended``: a gateway declaring 10**12 training windows and answering every fit task
  with a constant-class model claiming 10**12, against a coordinator with every
  ``[aggregation]`` rule off and ``max_samples_per_agent`` above its claim (the field
  report's setting);
* ``field``: the field report's gateway against the default settings: it declares 200
  windows and claims 10**12 with a constant-class model in odd rounds, sends all-zero
  weights claiming its 200 in even rounds, and reports accuracy 1.0 for every evaluation;
* ``greedy``: it declares 10**12 windows against the default settings;
* ``smart``: it declares and claims exactly ``max_samples_per_agent`` (10**6) with a
  constant-class model every round, against the default settings.

Prints, per scenario, each honest agent's live accuracy, the change from ``clean`` in points,
and the coordinator's refusal and clipping counters. Numbers only, no pass/fail.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.runtime.service import CoordinatorService
from coordinator.runtime.settings import AggregationSettings, TrainSettings
from coordinator.strategies.base import Strategy
from edge_agent.evaluation import evaluate
from edge_agent.sources import SimulatedMachineSource
from faultfleet.models.zoo import build_model
from faultfleet.wire.settings import BrokerSettings
from faultfleet_apps.brokers.accounts import COORDINATOR, create_accounts
from faultfleet_apps.brokers.launch import start_broker
from signal_pipeline.federation import Dataset
from tests.integration.poisoning import FIELD_REPORT_SAMPLES, Poison, PoisoningGateway
from tests.integration.services import (
    CoordinatorThread,
    coordinator_settings,
    running_agents,
    sample_value,
    wait_until,
)

GATEWAY = "gw7"
WINDOWS = (150, 250)
SCENARIOS = ("clean", "undefended", "field", "greedy", "smart")


@dataclass
class Outcome:
    """What one scenario measured."""

    live: dict[str, float]
    """Honest agent → live accuracy."""
    counters: dict[str, float] = field(default_factory=dict)
    clusters: dict[str, list[str]] = field(default_factory=dict)


def live_windows(machine_index: int, count: int, per_group: int) -> Dataset:
    """The first ``count`` windows machine ``machine_index`` streams, with their labels."""
    source = SimulatedMachineSource(
        machine_index=machine_index,
        interval_s=0.0,
        clients_per_group=per_group,
        windows_per_client=WINDOWS,
    )
    windows = list(itertools.islice(source.stream(threading.Event()), count))
    x = np.stack([w.samples for w in windows]).astype(np.float32)
    y = np.array([w.true_label for w in windows], dtype=np.int64)
    return Dataset(x, y)


def live_accuracy(strategy: Strategy, agent: str, windows: Dataset) -> float:
    """Accuracy on ``windows`` of the model that serves ``agent`` (its cluster's)."""
    weights = strategy.models[strategy.predict_models(agent)[0]]
    model = build_model("compact", (1, 1024), 12)
    return evaluate(model, weights, windows, device=torch.device("cpu")).accuracy


def gateway_for(scenario: str) -> dict[str, Any] | None:
    """The gateway's declared samples, plan and claim in ``scenario`` (None: no gateway)."""

    def constant(server_round: int) -> Poison:
        return "constant-class"

    def alternate(server_round: int) -> Poison:
        return "constant-class" if server_round % 2 else "zeros"

    return {
        "clean": None,
        "undefended": {"declared": FIELD_REPORT_SAMPLES, "plan": constant},
        "field": {"declared": 200, "plan": alternate},
        "greedy": {"declared": FIELD_REPORT_SAMPLES, "plan": constant},
        "smart": {"declared": 10**6, "plan": constant, "claimed": 10**6},
    }[scenario]


def run_scenario(
    scenario: str, args: argparse.Namespace, folder: Path, windows: dict[str, Dataset]
) -> Outcome:
    """One scenario on a fresh broker (so no retained model of another run is around)."""
    gateway_plan = gateway_for(scenario)
    machines = range(args.honest)
    honest = [f"m{i:02d}" for i in machines]
    accounts = create_accounts(folder / "secrets", [*honest, GATEWAY])

    def login(base: BrokerSettings, user: str) -> BrokerSettings:
        return base.model_copy(
            update={"username": user, "password_file": accounts.password_path(user)}
        )

    with start_broker(
        prefer="mosquitto", extra_config=accounts.mosquitto_lines(), workdir=folder / "broker"
    ) as broker:
        base = BrokerSettings(host=broker.host, port=broker.port)
        aggregation = AggregationSettings()
        if scenario == "undefended":
            aggregation = AggregationSettings(
                max_samples_per_agent=10 * FIELD_REPORT_SAMPLES,
                clip_factor=0,
                weight_cap=0,
                trim_fraction=0,
            )
        settings = coordinator_settings(
            login(base, COORDINATOR),
            folder / "coordinator",
            strategy=args.strategy,
            rounds=args.rounds,
            # a gateway declaring more than max_samples_per_agent is not asked to train
            min_agents=args.honest + (gateway_plan is not None and scenario != "greedy"),
            eval_every=args.rounds,
            publish_every=args.rounds,
            strategy_options={"n_sep": 5} if args.strategy == "flacc" else {},
        ).model_copy(
            update={
                "train": TrainSettings(epochs=args.epochs, learning_rate=args.learning_rate),
                "aggregation": aggregation,
            }
        )
        registry = CollectorRegistry()
        gateway = None
        if gateway_plan is not None:
            gateway = PoisoningGateway(
                login(base, GATEWAY),
                GATEWAY,
                declared_samples=gateway_plan["declared"],
                plan=gateway_plan["plan"],
                claimed_samples=gateway_plan.get("claimed", FIELD_REPORT_SAMPLES),
            )
        agents_broker = base.model_copy(
            update={"username": "{agent_id}", "password_file": accounts.password_path("{agent_id}")}
        )
        try:
            with running_agents(
                agents_broker,
                folder / "agents",
                machines,
                clients_per_group=args.per_group,
                windows_per_client=WINDOWS,
                interval_s=0.05,
            ) as agents:
                service = CoordinatorService(settings, CoordinatorMetrics(registry))
                coordinator = CoordinatorThread(service)
                try:
                    summary = coordinator.result(timeout_s=3600)
                finally:
                    coordinator.close()
                version = summary.model_version
                wait_until(  # the final models reached the agents: they diagnose with them
                    lambda: all(
                        a.diagnoser.active is not None and a.diagnoser.active.version == version
                        for a in agents
                    ),
                    120,
                    "every honest agent on the final models",
                )
        finally:
            if gateway is not None:
                gateway.stop()
    assert service.engine is not None
    strategy = service.engine.strategy
    counters = {
        "refused (too_many_samples)": sample_value(
            registry, "faultfleet_updates_rejected_total", {"reason": "too_many_samples"}
        ),
        "norm clipped": sample_value(
            registry, "faultfleet_updates_clipped_total", {"rule": "norm"}
        ),
        "weight capped": sample_value(
            registry, "faultfleet_updates_clipped_total", {"rule": "weight"}
        ),
        "updates accepted": sample_value(registry, "faultfleet_updates_received_total"),
    }
    return Outcome(
        live={a: live_accuracy(strategy, a, windows[a]) for a in honest},
        counters=counters,
        clusters=summary.clusters,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--honest", type=int, default=6, help="honest machines")
    parser.add_argument(
        "--per-group",
        type=int,
        default=2,
        help="machines per fault group: 2 puts 6 honest machines in 3 groups, 6 in one",
    )
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--strategy", default="flacc")
    parser.add_argument("--live-windows", type=int, default=1000)
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    windows = {
        f"m{i:02d}": live_windows(i, args.live_windows, args.per_group) for i in range(args.honest)
    }
    outcomes: dict[str, Outcome] = {}
    with tempfile.TemporaryDirectory(prefix="bench-poisoning-") as tmp:
        for scenario in args.scenarios:
            started = time.monotonic()
            outcomes[scenario] = run_scenario(scenario, args, Path(tmp) / scenario, windows)
            print(f"{scenario}: {time.monotonic() - started:.0f} s", flush=True)
    print(
        f"\n{args.strategy}, {args.honest} honest machines ({args.per_group} per group), "
        f"{args.rounds} rounds, {args.epochs} epochs, live accuracy on the first "
        f"{args.live_windows} streamed windows of each machine"
    )
    honest = sorted({a for o in outcomes.values() for a in o.live})
    print("| scenario | " + " | ".join(honest) + " | worst change vs clean (pts) | counters |")
    print("|---" * (len(honest) + 3) + "|")
    clean = outcomes.get("clean")
    for scenario, outcome in outcomes.items():
        cells = [f"{outcome.live[a]:.3f}" if a in outcome.live else "—" for a in honest]
        worst = "—"
        if clean is not None and scenario != "clean":
            changes = [
                100 * (outcome.live[a] - clean.live[a])
                for a in honest
                if a in outcome.live and a in clean.live
            ]
            worst = f"{min(changes):+.1f}" if changes else "—"
        counters = ", ".join(f"{k} {v:g}" for k, v in outcome.counters.items())
        print(f"| {scenario} | " + " | ".join(cells) + f" | {worst} | {counters} |")
    for scenario, outcome in outcomes.items():
        print(f"{scenario} clusters: {outcome.clusters}")


if __name__ == "__main__":
    main()
