"""Ingest workers and the coordinator dying mid-round (real Mosquitto, real
``faultfleet ingest-worker`` processes killed with SIGKILL).

A worker killed mid-round: the broker publishes its last will (``offline``), the
coordinator leaves it out of the round, takes back the updates it had summarised and sends
the round's unanswered tasks again; the other worker takes the answers, every update counts
once and the run ends as one process would have run it. A coordinator killed mid-round:
restarted with the same state directory it resumes the round through the same workers and
ends with the clusters of an uninterrupted run; the workers (threads of the test process,
built as ``faultfleet ingest-worker`` builds them) serve both coordinator processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.engine.state import load_state
from coordinator.runtime.run_summary import load_summary
from coordinator.runtime.service import CoordinatorService
from coordinator.strategies.base import StrategyState
from coordinator.strategies.flacc import FLACC
from coordinator.strategies.registry import make_strategy
from faultfleet.wire.codec import split_frame
from faultfleet.wire.messages import FitTaskMessage
from faultfleet.wire.settings import BrokerSettings
from faultfleet_apps.brokers.launch import free_port

from .services import (
    CoordinatorThread,
    broker_table,
    install_signing_key,
    kill,
    sample_value,
    start_cli,
    wait_until,
    write_toml,
)
from .test_ingest_driven_rounds import (
    GROUPS,
    ROUNDS,
    TwoGroups,
    ingest_workers,
    run_coordinator,
    settings,
)
from .wire_clients import TOPICS, Recorder

WORKERS = ("ingest-1", "ingest-2")
HELD_ROUND = 2
HELD_AGENTS = ("a1", "a3")
"""Agents whose first fit task of round 2 waits for the test: the round stays open."""


def hold_round_2(held: set[str]) -> Any:
    """A fake agents' policy: the first round-2 task of each of :data:`HELD_AGENTS` is not
    answered (its id goes to ``held``); a repeated one is."""

    def policy(task: FitTaskMessage) -> float | None:
        if (
            task.server_round == HELD_ROUND
            and task.agent_id in HELD_AGENTS
            and task.task_id not in held
        ):
            held.add(task.task_id)
            return None
        return 0.0

    return policy


def _status(recorder: Recorder, worker: str) -> str | None:
    seen = recorder.on(TOPICS.ingest_status(worker))
    return json.loads(seen[-1].payload)["state"] if seen else None


def _up(recorder: Recorder, worker: str, process: subprocess.Popen[bytes]) -> bool:
    """Whether ``worker`` says it is online (or its process ended)."""
    return _status(recorder, worker) == "online" or process.poll() is not None


def summarised(recorder: Recorder, worker: str, server_round: int) -> list[str]:
    """The agents whose updates of ``server_round`` ``worker`` summarised."""
    headers = [
        split_frame(m.payload, max_bytes=len(m.payload))[0]
        for m in recorder.on(TOPICS.ingest_summaries(worker))
    ]
    return [
        h["agent_id"]
        for h in headers
        if h["kind"] == "update_summary" and h["server_round"] == server_round
    ]


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value of every sample ``port``'s /metrics serves."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@contextmanager
def worker_processes(
    broker: BrokerSettings, tmp_path: Path, recorder: Recorder
) -> Iterator[tuple[dict[str, subprocess.Popen[bytes]], dict[str, int]]]:
    """``faultfleet ingest-worker`` for each of :data:`WORKERS`, online, one file for both
    and a metrics port each; the processes and their ports. Killed on exit."""
    config = write_toml(
        tmp_path / "ingest.toml",
        {
            "worker_id": WORKERS[0],
            "state_dir": tmp_path / "ingest",
            "broker": broker_table(broker),
            "metrics": {"host": "127.0.0.1"},
        },
    )
    ports = {w: free_port() for w in WORKERS}
    processes = {
        w: start_cli(
            [
                *("ingest-worker", "--config", str(config), "--worker-id", w),
                *("--metrics-port", str(ports[w])),
            ],
            tmp_path / f"{w}.log",
        )
        for w in WORKERS
    }
    try:
        for worker, process in processes.items():
            wait_until(partial(_up, recorder, worker, process), 120, f"{worker} online")
            assert process.poll() is None, (tmp_path / f"{worker}.log").read_text()
        yield processes, ports
    finally:
        for process in processes.values():
            kill(process)


@pytest.mark.timeout(600)  # three processes start on a machine that may be busy
def test_a_worker_killed_mid_round_loses_no_update_and_the_run_goes_on_without_it(
    broker_settings: BrokerSettings, tmp_path: Path, recorder: Recorder
) -> None:
    # Prepare: two worker processes; a coordinator whose round 2 waits for a1 and a3
    held: set[str] = set()
    metrics = CoordinatorMetrics(CollectorRegistry())
    with worker_processes(broker_settings, tmp_path, recorder) as (workers, ports):
        agents = TwoGroups(broker_settings, GROUPS, policy=hold_round_2(held))
        service = CoordinatorService(settings(broker_settings, tmp_path / "c", WORKERS), metrics)
        coordinator = CoordinatorThread(service)
        try:
            wait_until(
                lambda: sum(len(summarised(recorder, w, HELD_ROUND)) for w in WORKERS) == 2,
                120,
                "the round-2 updates of a0 and a2 to be summarised",
            )
            victim = max(WORKERS, key=lambda w: len(summarised(recorder, w, HELD_ROUND)))
            lost = summarised(recorder, victim, HELD_ROUND)

            # Execute: the victim stops reading; the held answers go out (the broker may
            # hand one to it); then it is killed
            os.kill(workers[victim].pid, signal.SIGSTOP)
            for agent in HELD_AGENTS:
                (task,) = agents.fit_tasks(agent, HELD_ROUND)
                agents.connection.publish_wait(TOPICS.results(agent), agents.fit_answer(task))
            kill(workers[victim])
            summary = coordinator.result(240)
            survivor_alive = all(p.poll() is None for w, p in workers.items() if w != victim)
            (survivor,) = [w for w in WORKERS if w != victim]
            served = scrape(ports[survivor])
        finally:
            coordinator.close()
            agents.stop()
    strategy = service.engine.strategy if service.engine is not None else None
    _, reference, _ = run_coordinator(broker_settings, tmp_path / "single", ())

    # Assert: the round ended without a retry; each update counted once, those the victim
    # summarised asked for again; it is missing at round 2's close and round 3's plan
    registry = metrics.registry
    assert lost
    assert survivor_alive
    # ... the survivor's own endpoint, on the port given on its command line, says so too
    assert served[("faultfleet_broker_connected", ())] == 1
    assert served[("faultfleet_ingest_messages_total", (("outcome", "accepted"),))] > 0
    assert served[("faultfleet_ingest_round", ())] == ROUNDS
    assert summary.server_round == ROUNDS
    assert summary.rounds_retried == 0
    assert sample_value(registry, "faultfleet_updates_received_total") == ROUNDS * len(GROUPS)
    assert sample_value(registry, "faultfleet_tasks_resent_total") >= len(lost)
    missing = "faultfleet_ingest_workers_missing_total"
    assert sample_value(registry, missing, {"stage": "close"}) == 1
    assert sample_value(registry, missing, {"stage": "plan"}) == ROUNDS - HELD_ROUND
    assert summary.accuracy_by_agent == dict.fromkeys(GROUPS, 0.5)
    # ... and the run is the one a single process makes of the same updates
    assert isinstance(strategy, FLACC)
    assert sorted(strategy.entities) == [("a0", "a1"), ("a2", "a3")]
    assert strategy.entities == reference.entities
    np.testing.assert_allclose(strategy.models["global"], reference.models["global"], atol=1e-6)


def restored_strategy(state_dir: Path) -> FLACC:
    """The strategy as the coordinator with ``state_dir`` saved it last."""
    saved = load_state(state_dir / "engine")
    run = settings(BrokerSettings(), state_dir, WORKERS).run
    strategy = make_strategy("flacc", fraction=run.fraction, options=run.strategy_options)
    assert isinstance(strategy, FLACC)
    strategy.load_state_dict(StrategyState(arrays=saved.arrays, meta=saved.meta["strategy"]))
    return strategy


def coordinator_config(broker: BrokerSettings, tmp_path: Path) -> Path:
    """``faultfleet coordinator``'s TOML file: the settings of :func:`settings`."""
    built = settings(broker, tmp_path / "coordinator", WORKERS)
    run = built.run
    table: dict[str, Any] = {
        "state_dir": built.state_dir,
        "broker": broker_table(broker),
        "metrics": {"port": 0},
        "run": {
            "strategy": run.strategy,
            "rounds": run.rounds,
            "fraction": run.fraction,
            "min_agents": run.min_agents,
            "round_deadline_s": run.round_deadline_s,
            "retry_wait_s": run.retry_wait_s,
            "eval_every": run.eval_every,
            "publish_every": run.publish_every,
        },
        "train": {"epochs": 1},
        "ingest": {"workers": list(WORKERS)},
    }
    path = write_toml(tmp_path / "coordinator.toml", table)
    options = "\n".join(f"{k} = {json.dumps(v)}" for k, v in run.strategy_options.items())
    with path.open("a", encoding="utf-8") as file:
        file.write(f"[run.strategy_options]\n{options}\n")
    return path


@pytest.mark.timeout(600)
def test_a_coordinator_killed_mid_round_resumes_it_through_the_running_workers(
    broker_settings: BrokerSettings, tmp_path: Path, recorder: Recorder
) -> None:
    # Prepare: two ingest workers (in this process: they are not the ones killed), a
    # coordinator process whose round 2 waits for a1 and a3
    held: set[str] = set()
    config = coordinator_config(broker_settings, tmp_path)
    state_dir = tmp_path / "coordinator"
    install_signing_key(state_dir)
    command = ["coordinator", "--config", str(config), "--exit-when-done"]
    with ingest_workers(broker_settings, tmp_path / "ingest") as workers:
        agents = TwoGroups(broker_settings, GROUPS, policy=hold_round_2(held))
        first = start_cli(command, tmp_path / "first.log")
        second = None
        try:
            wait_until(
                lambda: (
                    (load_summary(state_dir) or {}).get("server_round") == HELD_ROUND - 1
                    and sum(len(summarised(recorder, w, HELD_ROUND)) for w in WORKERS) == 2
                ),
                120,
                "round 1 saved and the round-2 updates of a0 and a2 summarised",
            )

            # Execute: kill it mid-round 2, start it again on the same state directory
            kill(first)
            served_before = [w.worker.counts["accepted"] for w in workers]
            before = load_summary(state_dir)
            second = start_cli(command, tmp_path / "second.log")
            status = second.wait(timeout=240)
            served_after = [w.worker.counts["accepted"] for w in workers]
        finally:
            kill(first)
            if second is not None:
                kill(second)
            agents.stop()
        # ... and the same run, uninterrupted, through the same workers
        connected = all(w.connection.connected for w in workers)
        reference, uninterrupted, _ = run_coordinator(
            broker_settings, tmp_path / "reference", WORKERS
        )
    log = (tmp_path / "second.log").read_text(encoding="utf-8")
    resumed = restored_strategy(state_dir)

    # Assert: the second process resumed round 2 of the same run through both workers
    assert status == 0, log
    assert connected
    assert all(n > m for m, n in zip(served_before, served_after, strict=True))
    assert before is not None
    after = load_summary(state_dir)
    assert after is not None
    assert after["run_id"] == before["run_id"]
    assert (before["server_round"], after["server_round"]) == (HELD_ROUND - 1, ROUNDS)
    assert f"round {HELD_ROUND}: resuming the interrupted round" in log, log
    assert "did not take the round's plan" not in log, log
    assert "sent no partial sums" not in log, log
    assert after["rounds_retried"] == 0
    # ... and ended where the uninterrupted run ended: clusters, models, accuracies
    assert sorted(resumed.entities) == [("a0", "a1"), ("a2", "a3")]
    assert resumed.entities == uninterrupted.entities
    np.testing.assert_allclose(resumed.models["global"], uninterrupted.models["global"], atol=1e-6)
    assert after["clusters"] == reference.clusters
    assert after["accuracy_by_agent"] == reference.accuracy_by_agent
