"""One compromised gateway cannot poison the federation (the shipped ACL, its own login only).

Mosquitto runs with a login per account and the shipped ACL. Three honest agents (simulated
machines of one fault group, really training) and the coordinator (FedAvg, every agent in
every round, the default ``[aggregation]``) run four rounds twice: once alone, once with a
poisoning gateway (:class:`~tests.integration.poisoning.PoisoningGateway`). The gateway
answers its odd rounds with a constant-class model claiming 10**12 training windows, its
even rounds with all-zero weights claiming what it declared, and every evaluation with
accuracy 1.0.

The 10**12 claims are refused (``too_many_samples``) and fail their task at once; the zero
updates are clipped to the norm bound and counted; the honest agents' model stays near the
one they train alone, and the gateway's self-reported 1.0 does not lift the run's accuracy.
Four rounds of one epoch leave the model near chance, so the honest agents' live accuracy
with and without the gateway is measured by ``benchmarks/bench_poisoning.py`` instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.runtime.service import CoordinatorService
from coordinator.strategies.keys import GLOBAL
from faultfleet.models.zoo import model_factory
from faultfleet.wire.settings import BrokerSettings
from faultfleet_apps.brokers.accounts import COORDINATOR, BrokerAccounts, create_accounts
from faultfleet_apps.brokers.launch import start_broker

from .poisoning import Poison, PoisoningGateway
from .services import CoordinatorThread, coordinator_settings, running_agents, sample_value

HONEST = ["m00", "m01", "m02"]
GATEWAY = "gw7"
ROUNDS = 4
CLIENTS_PER_GROUP = 4


def login(broker: BrokerSettings, accounts: BrokerAccounts, user: str) -> BrokerSettings:
    path = accounts.password_path(user)
    return broker.model_copy(update={"username": user, "password_file": path})


def run(
    broker: BrokerSettings, accounts: BrokerAccounts, folder: Path, *, poisoned: bool
) -> dict[str, Any]:
    """One run of the honest agents, with the gateway if ``poisoned``; what it left behind."""
    registry = CollectorRegistry()
    settings = coordinator_settings(
        login(broker, accounts, COORDINATOR),
        folder / "coordinator",
        rounds=ROUNDS,
        min_agents=len(HONEST) + poisoned,
        eval_every=ROUNDS,
        publish_every=ROUNDS,
    )
    agents_broker = broker.model_copy(
        update={"username": "{agent_id}", "password_file": accounts.password_path("{agent_id}")}
    )

    def plan(server_round: int) -> Poison:
        return "constant-class" if server_round % 2 else "zeros"

    gateway = (
        PoisoningGateway(login(broker, accounts, GATEWAY), GATEWAY, declared_samples=80, plan=plan)
        if poisoned
        else None
    )
    try:
        with running_agents(
            agents_broker,
            folder / "agents",
            range(len(HONEST)),
            clients_per_group=CLIENTS_PER_GROUP,
            windows_per_client=(100, 140),
        ):
            service = CoordinatorService(settings, CoordinatorMetrics(registry))
            coordinator = CoordinatorThread(service)
            try:
                summary = coordinator.result(timeout_s=300)
            finally:
                coordinator.close()
    finally:
        if gateway is not None:
            gateway.stop()
    assert service.engine is not None
    return {
        "summary": summary,
        "model": service.engine.strategy.models[GLOBAL].copy(),
        "metrics": registry,
        "sent": gateway.answered() if gateway is not None else [],
    }


def test_a_poisoning_gateways_updates_are_refused_or_clipped_and_counted(
    mosquitto_bin: Path, tmp_path: Path
) -> None:
    # Prepare
    accounts = create_accounts(tmp_path / "secrets", [*HONEST, GATEWAY])
    with start_broker(
        prefer="mosquitto", extra_config=accounts.mosquitto_lines(), workdir=tmp_path / "broker"
    ) as broker:
        plain = BrokerSettings(host=broker.host, port=broker.port)

        # Execute
        clean = run(plain, accounts, tmp_path / "clean", poisoned=False)
        attacked = run(plain, accounts, tmp_path / "attacked", poisoned=True)

    # Assert: every poisoned update was refused or clipped, and counted
    def counted(name: str, **labels: str) -> float:
        return sample_value(attacked["metrics"], name, labels)

    fits = [r for r, what in attacked["sent"] if what != "evaluation"]
    assert sorted(fits) == list(range(1, ROUNDS + 1))
    assert counted("faultfleet_updates_rejected_total", reason="too_many_samples") == ROUNDS // 2
    assert counted("faultfleet_updates_clipped_total", rule="norm") >= ROUNDS // 2
    assert counted("faultfleet_updates_received_total") == len(HONEST) * ROUNDS + ROUNDS // 2

    # ... and the honest agents' model stayed near the one they train alone: within 60 % of
    # how far their own training moved it (a plain average of one zero update among four
    # would shrink it by a fifth of its norm, about 10 times that far; a constant-class
    # model weighted 10**12 would replace it)
    initial = model_factory("compact", (1, 1024), 12, 0)(0)
    trained = float(np.linalg.norm(clean["model"] - initial))
    moved = float(np.linalg.norm(attacked["model"] - clean["model"]))
    assert moved < 0.6 * trained, (moved, trained)
    assert 0.2 * np.linalg.norm(clean["model"]) > 5 * trained

    # ... and the gateway's 1.0 does not lift the run's accuracy
    reported = attacked["summary"].accuracy_by_agent
    assert reported[GATEWAY] == 1.0
    assert attacked["summary"].accuracy <= max(reported[a] for a in HONEST)
