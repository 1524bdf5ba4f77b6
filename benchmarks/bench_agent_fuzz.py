"""Hostile traffic against live agents, then a genuine run: how many agents are wedged?

Usage: python benchmarks/bench_agent_fuzz.py [--agents 12] [--messages 5000] [--rounds 3]
       [--seed 100]

Starts a private Mosquitto (anonymous, as the demo broker was before the ACL: anyone may
publish on any topic), runs ``--agents`` simulated agents in this process exactly as
``faultfleet agent --machines`` builds them (shared metrics, one compute lock), and
publishes ``--messages`` hostile messages on their task, assignment and model topics, drawn
with ``--seed``:

* nesting bombs (a 400 kB frame header of ``[``, and nested objects) and random bytes;
* well-formed task headers with hostile values: 100,000 epochs, 100,000 classes, another
  agent's id, an unknown model, a deadline of 1 ms, a clock 2 h off, no or random weights;
* task headers with one field broken (wrong type, unknown field, another schema version);
* unsigned and forged-signature model frames and assignments.

Then a coordinator runs ``--rounds`` rounds of FedAvg with every agent in every round. An
agent counts as *wedged* when one of its threads is dead or it answered fewer fit tasks
than it was sent. Prints the counts of each hostile kind, the agents' counted refusals,
caught exceptions and thread restarts, the run's updates received against expected, the
wedged agents, and this process's RSS before and after. Numbers only, no pass/fail.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import struct
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.runtime.service import CoordinatorService
from coordinator.runtime.settings import CoordinatorSettings, RunSettings, TrainSettings
from edge_agent.compute_turns import ComputeTurns
from edge_agent.metrics import AgentMetrics
from edge_agent.service import AgentService
from edge_agent.settings import AgentSettings, DiagnosisSettings, SigningSettings, SourceSettings
from edge_agent.supervision import AgentThread
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.wire.codec import MAGIC, encode_frame, encode_tensors
from faultfleet.wire.messages import ClusterAssignment, ModelSpec, TensorEncoding
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings, MetricsSettings
from faultfleet.wire.signing import SigningKey
from faultfleet.wire.topics import Topics
from faultfleet_apps.brokers.launch import start_broker
from faultfleet_apps.cli.agent_run import build_source

TOPICS = Topics()
SPEC = ModelSpec(name="compact", sample_shape=(1, 1024), n_classes=12)
KINDS = ("bomb", "noise", "hostile_task", "broken_task", "forged_model", "forged_assignment")


def _frame(header: Any, body: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    return MAGIC + struct.pack(">I", len(text)) + text + body


def _task_header(rng: np.random.Generator, agent_id: str, number: int) -> dict[str, Any]:
    """A well-formed fit task header, with one hostile value."""
    header: dict[str, Any] = {
        "schema_version": 4,
        "kind": "fit",
        "task_id": f"fuzz-{number}",
        "run_id": "fuzz",
        "server_round": int(rng.integers(0, 10**6)),
        "agent_id": agent_id,
        "model": SPEC.model_dump(mode="json"),
        "model_keys": ["global"],
        "encoding": TensorEncoding().model_dump(mode="json"),
        "issued_at": time.time(),
        "deadline_s": 600.0,
        "train": {"optimizer": "adam", "learning_rate": 1e-3, "epochs": 1, "batch_size": 32},
        "seed": 0,
    }
    hostile = int(rng.integers(0, 6))
    if hostile == 0:
        header["train"]["epochs"] = 100_000
    elif hostile == 1:
        header["model"] = {**header["model"], "n_classes": 100_000}
    elif hostile == 2:
        header["agent_id"] = "someone-else"
    elif hostile == 3:
        header["model"] = {**header["model"], "name": "no-such-model"}
    elif hostile == 4:
        header["deadline_s"] = 0.001
    else:
        header["issued_at"] = time.time() - 7200.0
    return header


def hostile_messages(
    rng: np.random.Generator, agents: list[str], count: int, weights: bytes
) -> list[tuple[str, str, bytes]]:
    """``count`` (kind, topic, payload) triples aimed at ``agents``."""
    forger = SigningKey.generate()
    messages = []
    for number in range(count):
        agent = agents[int(rng.integers(0, len(agents)))]
        kind = KINDS[int(rng.integers(0, len(KINDS)))]
        if kind == "bomb":
            depth = int(rng.integers(1_000, 400_000))
            payload = MAGIC + struct.pack(">I", depth) + b"[" * depth
        elif kind == "noise":
            payload = rng.bytes(int(rng.integers(0, 4096)))
        elif kind == "hostile_task":
            body = weights if rng.random() < 0.5 else rng.bytes(64)
            payload = _frame(_task_header(rng, agent, number), body)
        elif kind == "broken_task":
            header = _task_header(rng, agent, number)
            key = list(header)[int(rng.integers(0, len(header)))]
            header[key] = [header[key], {"x": None}] if rng.random() < 0.5 else "broken"
            header["unexpected"] = 1 if rng.random() < 0.5 else header.get("unexpected")
            payload = _frame(header, weights)
        elif kind == "forged_model":
            payload = encode_frame(forger.sign(_assignment(agent, number)), rng.bytes(256))
        else:
            payload = forger.sign(_assignment(agent, number)).model_dump_json().encode()
        topic = {
            "forged_model": TOPICS.cluster_model("c0"),
            "forged_assignment": TOPICS.assignment(agent),
        }.get(kind, TOPICS.tasks(agent))
        messages.append((kind, topic, payload))
    return messages


def _assignment(agent: str, number: int) -> ClusterAssignment:
    return ClusterAssignment(
        agent_id=agent,
        cluster_id="c0",
        model_version=10**9 + number,
        sha256="0" * 64,
        run_id="fuzz",
        server_round=10**9,
        timestamp=1e12,
    )


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=12)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=100)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    rng = np.random.default_rng(args.seed)
    key = SigningKey.generate()
    weights = encode_tensors(
        {"global": flatten_weights(build_model("compact", (1, 1024), 12, seed=0))},
        TensorEncoding(),
    )
    rss_start = _rss_mb()
    with tempfile.TemporaryDirectory() as folder, start_broker(prefer="mosquitto") as broker:
        root = Path(folder)
        settings = BrokerSettings(host=broker.host, port=broker.port)
        metrics = AgentMetrics(CollectorRegistry())
        lock = ComputeTurns()
        agents = []
        for index in range(args.agents):
            config = AgentSettings(
                agent_id=f"m{index:02d}",
                device="cpu",
                state_dir=root / f"m{index:02d}",
                broker=settings,
                metrics=MetricsSettings(port=0),
                source=SourceSettings(
                    machine_index=index, clients_per_group=4, windows_per_client=(40, 60)
                ),
                diagnosis=DiagnosisSettings(interval_s=0.5, publish=False),
                signing=SigningSettings(trusted_keys=(key.public_text,)),
            )
            source = build_source(config.source, config.diagnosis.interval_s, ())
            agents.append(AgentService(config, source, metrics=metrics, compute_lock=lock))
        stop = threading.Event()
        threads = [threading.Thread(target=a.run, args=(stop,)) for a in agents]
        for thread in threads:
            thread.start()
        for agent in agents:
            agent.connection.wait_subscribed(30)
        attacker = MqttConnection(client_id="attacker", settings=settings)
        attacker.start()
        attacker.wait_connected(30)
        messages = hostile_messages(rng, [a.agent_id for a in agents], args.messages, weights)
        started = time.monotonic()
        for _, topic, payload in messages:
            attacker.publish_wait(topic, payload, timeout_s=30)
        attack_s = time.monotonic() - started
        time.sleep(5)  # let the agents drain their queues
        key.save(root / "coordinator" / "signing.key")
        registry = CollectorRegistry()
        coordinator = CoordinatorService(
            CoordinatorSettings(
                state_dir=root / "coordinator",
                broker=settings,
                metrics=MetricsSettings(port=0),
                run=RunSettings(
                    strategy="fedavg",
                    rounds=args.rounds,
                    fraction=1.0,
                    min_agents=args.agents,
                    round_deadline_s=300.0,
                    eval_every=100,
                    publish_every=100,
                ),
                train=TrainSettings(epochs=1),
            ),
            CoordinatorMetrics(registry),
        )
        summary = coordinator.run(threading.Event(), exit_when_done=True)
        assert summary is not None, "the run ended without a summary"
        received = registry.get_sample_value("faultfleet_updates_received_total") or 0.0
        per_thread = {
            thread.value: (
                metrics.registry.get_sample_value(
                    "faultfleet_thread_errors_total", {"thread": thread.value}
                ),
                metrics.registry.get_sample_value(
                    "faultfleet_thread_restarts_total", {"thread": thread.value}
                ),
            )
            for thread in AgentThread
        }
        dead = [a.agent_id for a, t in zip(agents, threads, strict=True) if not t.is_alive()]
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        attacker.stop()
    kinds = {kind: sum(1 for k, _, _ in messages if k == kind) for kind in KINDS}
    refused = {
        reason: metrics.registry.get_sample_value(
            "faultfleet_tasks_rejected_total", {"reason": reason}
        )
        for reason in ("malformed", "oversized", "schema")
    }
    print(
        f"agents {args.agents}, hostile messages {len(messages)} sent in {attack_s:.1f} s, "
        f"seed {args.seed}"
    )
    print(f"hostile kinds: {kinds}")
    print(f"task frames refused unread by reason: {refused}")
    queue_full = metrics.registry.get_sample_value("faultfleet_tasks_queue_full_total")
    print(f"tasks answered task_failed for a full queue: {queue_full:.0f}")
    print(f"exceptions caught / threads restarted, by thread: {per_thread}")
    expected = args.agents * args.rounds
    print(
        f"genuine run: finished={summary.finished}, rounds={summary.server_round}, "
        f"updates received {received:.0f} of {expected}"
    )
    wedged = "0" if received == expected and not dead else f">= 1 (dead: {dead})"
    print(f"wedged agents: {wedged}")
    print(f"max RSS of this process: {rss_start:.0f} MB at start, {_rss_mb():.0f} MB at end")


if __name__ == "__main__":
    main()
