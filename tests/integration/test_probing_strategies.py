"""Strategies that probe their clients run end to end over a real Mosquitto broker.

The coordinator service runs FAACL (per-sample losses probes, several fit tasks per agent)
and joint gradient and loss clustering (gradient probes; under sketches each answer is handed
to the strategy's probe stream as it arrives) for three rounds over four simulated
machines, exactly as ``faultfleet coordinator`` and ``faultfleet agent`` wire them. Every
probe must be answered, nothing rejected, and every round completed.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.runtime.service import CoordinatorService
from faultfleet.wire.codec import RejectReason, parse_envelope, split_frame
from faultfleet.wire.messages import ANSWER_ADAPTER
from faultfleet.wire.settings import BrokerSettings

from .services import CoordinatorThread, coordinator_settings, running_agents, sample_value
from .wire_clients import TOPICS, Recorder

MACHINES = range(4)
AGENTS = [f"m{index:02d}" for index in MACHINES]


FAACL_OPTIONS = {"init_rounds": 1, "hierarchical": False, "version": 2, "epsilon": 10.0}
"""Probe from round 2 on; with a tolerance that large every cluster supports every other,
so cluster training sends agents several fit tasks in one round."""


@pytest.mark.parametrize(
    ("strategy", "options", "probe", "answer"),
    [
        ("faacl", FAACL_OPTIONS, "losses", "losses_result"),
        ("jgl", {}, "gradient", "gradient_result"),
        ("jgl", {"pairwise": "sketch"}, "gradient", "gradient_result"),  # a streamed probe
    ],
)
def test_a_probing_strategy_completes_its_rounds_over_mqtt(
    broker_settings: BrokerSettings,
    tmp_path: Path,
    recorder: Recorder,
    strategy: str,
    options: dict[str, object],
    probe: str,
    answer: str,
) -> None:
    # Prepare
    registry = CollectorRegistry()
    settings = coordinator_settings(
        broker_settings,
        tmp_path / "coordinator",
        strategy=strategy,
        strategy_options=options,
        rounds=3,
        min_agents=len(AGENTS),
    )
    service = CoordinatorService(settings, CoordinatorMetrics(registry))

    # Execute
    with running_agents(broker_settings, tmp_path / "agents", MACHINES, interval_s=1.0):
        coordinator = CoordinatorThread(service)
        try:
            summary = coordinator.result(timeout_s=120)
        finally:
            coordinator.close()

    # Assert: every round done; every agent was probed and answered every task
    assert summary.finished
    assert summary.server_round == 3
    fits = Counter(
        (t.agent_id, t.server_round) for a in AGENTS for t in recorder.tasks(a) if t.kind == "fit"
    )
    assert max(fits.values()) == (2 if strategy == "faacl" else 1)
    tasks = {agent: Counter[str](t.kind for t in recorder.tasks(agent)) for agent in AGENTS}
    answers = {
        agent: Counter[str](
            parse_envelope(ANSWER_ADAPTER, split_frame(m.payload, max_bytes=len(m.payload))[0]).kind
            for m in recorder.on(TOPICS.results(agent))
        )
        for agent in AGENTS
    }
    for agent in AGENTS:
        assert tasks[agent][probe] > 0, tasks[agent]
        assert answers[agent][answer] == tasks[agent][probe]
        assert answers[agent]["fit_update"] == tasks[agent]["fit"]
        assert answers[agent]["task_failed"] == 0
    assert all(
        sample_value(registry, "faultfleet_updates_rejected_total", {"reason": r.value}) == 0
        for r in RejectReason
    )
    if strategy == "jgl":  # the last probe placed every agent
        assert service.engine is not None
        assert sorted(getattr(service.engine.strategy, "choices_", {})) == AGENTS
