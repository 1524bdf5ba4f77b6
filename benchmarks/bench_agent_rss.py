"""Resident memory of one real ``faultfleet agent`` process with the compact model, idle.

Usage: python benchmarks/bench_agent_rss.py [--sources simulated live] [--idle-s 30]
       [--repeats 3] [--machines 24] [--model compact]

Starts a private Mosquitto broker (amqtt where Mosquitto is not installed), stores the
``compact`` zoo model (or ``--model``; seed 0, exported to ONNX) in the agent's model
store, as a restarted agent finds it, and starts ``python -m faultfleet_apps.cli.main agent
--config FILE`` with ``device = "cpu"`` and one of two window sources:

* ``simulated``: one machine of the mixed-fault federation (the agent holds the machine's
  training data and diagnoses a simulated window every 0.1 s, publishing each diagnosis);
* ``live``: the sensor interface with no driver pushing samples: an agent that only
  waits to diagnose.

It samples the agent's resident set size (RSS, from ``/proc``; the agent starts no child
process) when its retained ``online`` status arrives ("start"; for ``simulated`` once its
first diagnosis arrives too) and again after ``--idle-s`` seconds without training tasks
("idle"). For comparison it also prints the RSS of a bare Python interpreter after
importing numpy, onnxruntime, torch, the agent service, what ``faultfleet agent`` imports
before its first task (its parser and command module) and the parser of every command, each
in a fresh process.
Median of ``--repeats`` agents per source. With ``--machines N`` it also measures one
``faultfleet agent --machines 0-(N-1)`` process of N simulated agents (``clients_per_group``
enough for N machines; every agent's store holds the same model, as after a round where they
share a cluster) and prints its RSS and the RSS per agent beyond the single simulated
agent's, ``(process - single) / (N - 1)``. Numbers only, no pass/fail.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from process_memory import rss_bytes

from coordinator.adapters.onnx_export import export_weights
from edge_agent.inference import OnnxDiagnoser
from edge_agent.model_store import ModelStore
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from faultfleet.wire.signing import SigningKey
from faultfleet.wire.topics import Topics
from faultfleet_apps.brokers.launch import RunningBroker, start_broker
from signal_pipeline.scenarios import MIXED_FAULT_CLASS_NAMES

SAMPLE_SHAPE = (1, 1024)
MB = 1024 * 1024
IMPORTS = {
    "python + numpy": "import numpy",
    "+ onnxruntime": "import numpy, onnxruntime",
    "+ torch": "import numpy, onnxruntime, torch",
    "edge_agent.service": "import edge_agent.service",
    "faultfleet agent's modules": (
        "from faultfleet_apps.cli.main import build_parser\n"
        "build_parser('agent')\nimport faultfleet_apps.cli.agent_run"
    ),
    "every command's parser": "from faultfleet_apps.cli.main import build_parser\nbuild_parser()",
}


def import_rss_mb(statement: str) -> float:
    """RSS in MB of a fresh interpreter right after ``statement``; NaN if it fails (a module
    an older version of the code does not have)."""
    probe = f"{statement}\nimport os\nprint(int(open('/proc/self/statm').read().split()[1]))"
    done = subprocess.run(
        [sys.executable, "-c", probe], check=False, capture_output=True, text=True
    )
    if done.returncode != 0:
        return float("nan")
    return int(done.stdout) * os.sysconf("SC_PAGE_SIZE") / MB


def write_config(
    folder: Path,
    broker: RunningBroker,
    source: str,
    public_key: str,
    machines: int | None,
    model: str = "compact",
) -> Path:
    """The agent's TOML file; the model store of every agent already holds ``model``."""
    state = folder / "state"
    names = tuple(MIXED_FAULT_CLASS_NAMES)
    weights = flatten_weights(build_model(model, SAMPLE_SHAPE, len(names), seed=0))
    exported = export_weights(weights, model, SAMPLE_SHAPE, len(names))
    loaded = OnnxDiagnoser(SAMPLE_SHAPE).load(
        exported.onnx_bytes, sha256=exported.sha256, version=1, cluster_id="0", class_names=names
    )
    stores = ["model"] if machines is None else [f"rss{i:02d}/model" for i in range(machines)]
    for store in stores:
        ModelStore(state / store).save(exported.onnx_bytes, loaded)
    per_group = 1 if machines is None else -(-machines // 6)
    table = f'kind = "{source}"\nclients_per_group = {per_group}\n'
    config = folder / "agent.toml"
    config.write_text(
        f'agent_id = "rss"\ndevice = "cpu"\nstate_dir = "{state}"\n\n'
        f'[broker]\nhost = "{broker.host}"\nport = {broker.port}\n\n'
        f'[signing]\ntrusted_keys = ["{public_key}"]\n\n[metrics]\nport = 0\n\n'
        f"[source]\n{table}\n[diagnosis]\ninterval_s = 0.1\npublish = true\n",
        encoding="utf-8",
    )
    return config


def measure_agent(
    broker: RunningBroker,
    source: str,
    idle_s: float,
    machines: int | None = None,
    model: str = "compact",
) -> tuple[float, float]:
    """RSS in MB of one agent process (one agent, or ``machines`` simulated agents) once
    every agent is online (and diagnosing) and after ``idle_s`` seconds more."""
    settings = BrokerSettings(host=broker.host, port=broker.port)
    topics = Topics(settings.topic_root)
    expected = 1 if machines is None else machines
    online: set[str] = set()
    diagnosed: set[str] = set()
    monitor = MqttConnection(client_id="rss-monitor", settings=settings)

    def agent_of(topic: str) -> str:
        return topics.agent_of(topic) or ""

    def on_status(topic: str, payload: bytes) -> None:
        if b'"online"' in payload:
            online.add(agent_of(topic))

    monitor.route(topics.all_agent_status(), on_status)
    monitor.route(topics.all_diagnoses(), lambda topic, _: diagnosed.add(agent_of(topic)))
    monitor.start()
    with tempfile.TemporaryDirectory(prefix="bench-agent-rss-") as name:
        key = SigningKey.generate().public_text
        config = write_config(Path(name), broker, source, key, machines, model)
        command = [sys.executable, "-m", "faultfleet_apps.cli.main", "agent", "--config"]
        command.append(str(config))
        if machines is not None:
            command += ["--machines", f"0-{machines - 1}"]
        agent = subprocess.Popen(command, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120 + 5 * expected
            while len(online) < expected or (source != "live" and len(diagnosed) < expected):
                if agent.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the {source} agent(s) did not come online")
                time.sleep(0.05)
            start = rss_bytes(agent.pid) / MB
            time.sleep(idle_s)
            idle = rss_bytes(agent.pid) / MB
        finally:
            agent.terminate()
            agent.wait(30)
            monitor.stop()
    return start, idle


def main() -> None:
    """Run the benchmark and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", nargs="+", choices=("simulated", "live"), default=None)
    parser.add_argument("--idle-s", type=float, default=30.0, help="seconds to idle")
    parser.add_argument("--repeats", type=int, default=3, help="agents per source")
    parser.add_argument("--machines", type=int, default=0, help="simulated agents in one process")
    parser.add_argument("--model", choices=("compact", "paper"), default="compact")
    args = parser.parse_args()
    print("command: python " + shlex.join(sys.argv))
    print(f"{'process':<36}{'rss_mb':>9}")
    for label, statement in IMPORTS.items():
        print(f"{'imports ' + label:<36}{import_rss_mb(statement):>9.0f}", flush=True)
    broker = start_broker(prefer="auto", persistence=False)
    print(f"\n{broker.kind} broker on {broker.host}:{broker.port}; median of {args.repeats}")
    print(f"{'source':<12}{'start_mb':>10}{'idle_mb':>10}{'idle_s':>8}")
    single: dict[str, tuple[float, float]] = {}
    try:
        for source in args.sources or ["simulated", "live"]:
            runs = [
                measure_agent(broker, source, args.idle_s, None, args.model)
                for _ in range(args.repeats)
            ]
            start = statistics.median(r[0] for r in runs)
            idle = statistics.median(r[1] for r in runs)
            single[source] = (start, idle)
            print(f"{source:<12}{start:>10.0f}{idle:>10.0f}{args.idle_s:>8.0f}", flush=True)
        if args.machines > 1:
            many = [
                measure_agent(broker, "simulated", args.idle_s, args.machines, args.model)
                for _ in range(args.repeats)
            ]
            start = statistics.median(r[0] for r in many)
            idle = statistics.median(r[1] for r in many)
            label = f"{args.machines} simulated"
            print(f"{label:<12}{start:>10.0f}{idle:>10.0f}{args.idle_s:>8.0f}", flush=True)
            if "simulated" in single:
                base = single["simulated"]
                per_start = (start - base[0]) / (args.machines - 1)
                per_idle = (idle - base[1]) / (args.machines - 1)
                print(f"{'per agent':<12}{per_start:>10.1f}{per_idle:>10.1f}", flush=True)
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
