"""A round's dispatch of fit tasks through Mosquitto: the coordinator's peak memory and time.

Usage: python benchmarks/bench_dispatch.py [--model paper] [--tasks 48] [--repeats 3]
       [--json FILE]

Starts a private Mosquitto on 127.0.0.1 and, in a fresh process per run, a coordinator's
:class:`~coordinator.adapters.mqtt_fleet.MqttFleet` on a real connection with ``--tasks``
fake agents online, which dispatches one fit task of the ``--model`` zoo model (seed 0) to
each (``AnswerCollector.dispatch``, as a round does; nobody answers). Once the broker has
acknowledged every task the round is aborted and the process reports the time from the
start of the dispatch to the last acknowledgement, its own peak resident set size
(``VmHWM``) and its resident size just before the dispatch (``before_mb``: the interpreter,
torch, the model, the tasks' headers and their shared body).

Two variants, alternating, each in its own process: ``bounded`` (the default
:data:`~coordinator.adapters.mqtt_answers.DISPATCH_BACKLOG_BYTES` of tasks sent and not
yet acknowledged before the next one is sent) and ``unbounded`` (the bound lifted: every
task is handed to paho at once and waits there for the broker, as before the bound).
Prints the medians of ``--repeats`` and the ratios bounded / unbounded. The ``paper``
model's tasks are 17.6 MB each, so 48 of them are 845 MB. Numbers only, no pass/fail.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from process_memory import own_peak_rss_bytes, rss_bytes, run_json_worker

from coordinator.adapters.journal import RoundJournal
from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.mqtt_answers import DISPATCH_BACKLOG_BYTES
from coordinator.adapters.mqtt_fleet import MqttFleet
from coordinator.adapters.presence import AgentRegistry
from coordinator.adapters.round_tasks import RoundAbortedError
from coordinator.adapters.task_frames import Frame
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.tasks import FitTask, TrainConfig
from faultfleet.wire.messages import AgentStatus, ModelSpec, TensorEncoding
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from faultfleet.wire.topics import Topics
from faultfleet_apps.brokers.launch import start_broker

SAMPLE_SHAPE = (1, 1024)
N_CLASSES = 12
WAIT_S = 600.0
MB = 1024 * 1024
VARIANTS = {"bounded": DISPATCH_BACKLOG_BYTES, "unbounded": 1 << 62}


def dispatch_once(port: int, model: str, n: int, backlog_bytes: int) -> dict[str, float]:
    """One dispatch of ``n`` fit tasks on a fresh connection; seconds and peak RSS."""
    weights = flatten_weights(build_model(model, SAMPLE_SHAPE, N_CLASSES, seed=0))
    agents = [f"a{i:05d}" for i in range(n)]
    registry = AgentRegistry()
    for agent in agents:
        registry.update(
            AgentStatus(agent_id=agent, state="online", can_train=True, num_train_samples=100)
        )
    settings = BrokerSettings(port=port)
    connection = MqttConnection(client_id="bench-dispatch", settings=settings)
    with tempfile.TemporaryDirectory(prefix="bench-dispatch-") as folder:
        fleet = MqttFleet(
            connection,
            Topics(),
            registry,
            agents,
            run_id="bench-dispatch",
            model=ModelSpec(name=model, sample_shape=SAMPLE_SHAPE, n_classes=N_CLASSES),
            n_params=len(weights),
            encoding=TensorEncoding(),
            deadline_s=WAIT_S,
            min_quorum=1,
            journal=RoundJournal(Path(folder)),
            metrics=CoordinatorMetrics(),
            max_payload_bytes=settings.max_payload_bytes,
        )
        fleet.answers.max_backlog_bytes = backlog_bytes
        fleet.start()
        connection.start()
        try:
            if not connection.wait_connected(30):
                raise RuntimeError(f"no connection to the broker on port {port}")
            fleet.begin_round(1, replay=False)
            tasks = [
                FitTask(a, {"global": weights}, TrainConfig(), seed=i) for i, a in enumerate(agents)
            ]
            frames = fleet.frames.fit(1, tasks)
            before = rss_bytes(os.getpid())
            started = time.monotonic()
            thread = threading.Thread(target=_dispatch, args=(fleet, frames), daemon=True)
            thread.start()
            deadline = started + WAIT_S
            while len(fleet.answers._sent) < n and time.monotonic() < deadline:
                time.sleep(0.005)
            if not connection.wait_acknowledged(max(deadline - time.monotonic(), 0.0)):
                raise RuntimeError("the broker did not acknowledge every task")
            seconds = time.monotonic() - started
            fleet.abort()
            thread.join(30)
        finally:
            connection.stop()
            fleet.close()
    return {
        "seconds": seconds,
        "peak_rss_mb": own_peak_rss_bytes() / MB,
        "rss_before_mb": before / MB,
    }


def _dispatch(fleet: MqttFleet, frames: list[Frame]) -> None:
    with contextlib.suppress(RoundAbortedError):  # aborted once every task is acknowledged
        fleet.answers.dispatch(frames, {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="paper")
    parser.add_argument("--tasks", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    parser.add_argument("--worker", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        result = dispatch_once(args.port, args.model, args.tasks, VARIANTS[args.worker])
        print(json.dumps(result))
        return
    broker = start_broker(prefer="mosquitto")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    try:
        for _ in range(args.repeats):
            for name in VARIANTS:
                arguments = ["--worker", name, "--port", str(broker.port)]
                arguments += ["--model", args.model, "--tasks", str(args.tasks)]
                runs[name].append(run_json_worker(__file__, arguments, 1, f"{name} dispatch"))
    finally:
        broker.stop()
    rows = []
    print(
        f"{'variant':<11}{'tasks':>6}{'seconds':>9}{'peak_rss_mb':>13}{'before_mb':>11}",
        flush=True,
    )
    for name, got in runs.items():
        seconds = statistics.median(float(r["seconds"]) for r in got)
        peak = statistics.median(float(r["peak_rss_mb"]) for r in got)
        before = statistics.median(float(r["rss_before_mb"]) for r in got)
        rows.append(
            {
                "variant": name,
                "model": args.model,
                "tasks": args.tasks,
                "seconds": seconds,
                "peak_rss_mb": peak,
                "rss_before_mb": before,
            }
        )
        print(f"{name:<11}{args.tasks:>6}{seconds:>9.2f}{peak:>13.0f}{before:>11.0f}", flush=True)
    bounded, unbounded = rows
    print(
        f"bounded / unbounded: time {bounded['seconds'] / unbounded['seconds']:.2f}, "
        f"peak RSS {bounded['peak_rss_mb'] / unbounded['peak_rss_mb']:.2f}"
    )
    if args.json is not None:
        args.json.write_text(json.dumps({"benchmark": "dispatch", "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
