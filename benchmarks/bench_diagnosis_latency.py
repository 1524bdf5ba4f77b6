"""Edge-agent diagnosis latency per window, against a bare ONNX Runtime ``session.run``.

Usage: python benchmarks/bench_diagnosis_latency.py [--windows 2000] [--models compact paper]
       [--interval-ms 1] [--no-publish]

Exports the ``compact`` (60,432 parameters) and ``paper`` (4,409,036 parameters) zoo
models, built from seed 0, with :func:`coordinator.adapters.onnx_export.export_weights`, and
diagnoses the same random windows of shape (1, 1024) in four ways:

* ``bare``: ``onnxruntime.InferenceSession(onnx_bytes, options, providers).run`` on one
  window of shape (1, 1, 1024), with the agent's session settings
  (``intra_op_num_threads=1``, the same execution providers).
* ``predict``: ``OnnxDiagnoser.predict`` alone (checks, session.run, argmax), to split the
  agent's overhead between inference and what follows it.
* ``agent``: the agent's own per-window path, ``AgentService._diagnose_one`` of a real
  :class:`~edge_agent.service.AgentService` with ``diagnosis.publish = false``, its outbox
  thread running as in a live agent. That is ``OnnxDiagnoser.predict_top``, the
  diagnosis's JSON, the window kept for labelling, the Prometheus counters and histogram,
  the fault streak, and the JSON line queued for the local log (under a temporary folder).
* ``agent+publish``: the same with ``diagnosis.publish = true``. The agent is connected to
  a private broker (Mosquitto, or amqtt when Mosquitto is not installed), and each
  diagnosis is also handed to the agent's outbox thread, which publishes it with QoS 1,
  together with those handed over within ``diagnosis.publish_delay_s`` (0.25 s) of it.
  The time counted is what the diagnosis thread spends; the outbox thread and paho's
  network thread compete with it for the GIL. After the run the benchmark waits until the
  broker acknowledged every diagnosis and says so.

The windows (:class:`~edge_agent.sources.Window`) are made before the measurement, as the
inputs of ``bare`` and ``predict`` are: a source makes them, ``_diagnose_one`` takes them.

The variants alternate in blocks of ``--block`` windows, so a busy machine slows them
alike, after ``--warm-up`` unmeasured windows each. After a block of ``agent+publish`` the
diagnoses its outbox thread still holds are published, untimed, so that their burst falls
in no other variant's block; a block should last longer than ``publish_delay_s`` (500
windows at 1 ms do), so that the agent's own bursts fall in its block as they come.
``--interval-ms`` pauses between windows, as a live agent waits for the next window (0.1 s
by default); without any pause, paho's thread would pile up messages that a real agent
never sends. A pause leaves the caches colder, which slows the agent's longer Python path
more than the bare ``session.run``; ``--interval-ms 0`` gives hot-loop numbers. Prints p50,
p99 and mean in milliseconds, the ratios agent / bare, and ``cpu_us``: the process's CPU
time during a variant's blocks per window, every thread's (an agent's outbox thread and
paho's network thread included), in microseconds. Numbers only, no pass/fail.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from coordinator.adapters.onnx_export import ExportedModel, export_weights
from edge_agent.service import AgentService
from edge_agent.settings import AgentSettings, DiagnosisSettings, SigningSettings
from edge_agent.sources import Window
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.types import FloatArray
from faultfleet.wire.settings import BrokerSettings
from faultfleet.wire.signing import SigningKey
from faultfleet_apps.brokers.launch import RunningBroker, start_broker

SAMPLE_SHAPE = (1, 1024)
CLASS_NAMES = tuple(f"class-{i}" for i in range(12))


class RandomWindows:
    """A diagnosis-only :class:`~edge_agent.sources.WindowSource` (no training data).

    The benchmark hands windows to the agent itself, so :meth:`stream` yields nothing.
    """

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return SAMPLE_SHAPE

    @property
    def class_names(self) -> tuple[str, ...]:
        return CLASS_NAMES

    def training_data(self) -> None:
        return None

    def stream(self, stop: threading.Event) -> Iterator[Window]:
        return iter(())


def make_agent(
    state_dir: Path, exported: ExportedModel, broker: RunningBroker | None
) -> AgentService:
    """A real agent diagnosing with ``exported``; connected to ``broker`` when given."""
    settings = AgentSettings(
        agent_id="bench-agent",
        device="cpu",
        state_dir=state_dir,
        broker=BrokerSettings(host="127.0.0.1", port=broker.port if broker else 1883),
        diagnosis=DiagnosisSettings(publish=broker is not None),
        signing=SigningSettings(trusted_keys=(SigningKey.generate().public_text,)),
    )
    agent = AgentService(settings, RandomWindows())
    agent.diagnoser.load(exported.onnx_bytes, sha256=exported.sha256, version=1, cluster_id="c0")
    if broker is not None:
        agent.connection.start()
        if not agent.connection.wait_connected(30):
            raise RuntimeError(f"agent could not connect to broker 127.0.0.1:{broker.port}")
    return agent


def bare_session(onnx_bytes: bytes, providers: tuple[str, ...], threads: int) -> Any:
    """An ONNX Runtime session set up as the agent's diagnoser sets up its own."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(onnx_bytes, options, providers=list(providers))


def publish_held(agent: AgentService | None) -> None:
    """After a block of ``agent``'s windows, untimed: publish what its outbox thread would
    publish ``[diagnosis] publish_delay_s`` later, so that the burst falls in no other
    variant's block (a live agent runs alone)."""
    if agent is not None and agent.delivery.publish:
        agent.delivery.send_handed_over()


def measure(
    variants: dict[str, Callable[[int], None]],
    n_windows: int,
    *,
    block: int,
    warm_up: int,
    interval_s: float,
    settle: Callable[[str], None] = lambda name: None,
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Seconds per call of each variant, ``n_windows`` calls each, in alternating blocks;
    ``settle(variant)`` after each block, untimed. Also the process's CPU seconds during
    each variant's blocks and settling (every thread's: the outbox and network threads'
    included)."""
    for step in variants.values():
        for index in range(warm_up):
            step(index)
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    cpu_s = dict.fromkeys(variants, 0.0)
    for start in range(0, n_windows, block):
        for name, step in variants.items():
            cpu_started = time.process_time()
            for index in range(start, min(start + block, n_windows)):
                if interval_s > 0:
                    time.sleep(interval_s)
                began = time.perf_counter()
                step(index)
                seconds[name].append(time.perf_counter() - began)
            settle(name)
            cpu_s[name] += time.process_time() - cpu_started
    return seconds, cpu_s


def percentile_ms(values: list[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` (seconds) in milliseconds."""
    return float(np.percentile(np.asarray(values), q)) * 1e3


def report(
    model: str, seconds: dict[str, list[float]], cpu_s: dict[str, float]
) -> list[dict[str, object]]:
    """Print one line per variant, with ratios against ``bare``; returns the rows."""
    bare_p50, bare_p99 = percentile_ms(seconds["bare"], 50), percentile_ms(seconds["bare"], 99)
    rows: list[dict[str, object]] = []
    for name, values in seconds.items():
        p50, p99 = percentile_ms(values, 50), percentile_ms(values, 99)
        cpu_us = cpu_s[name] / len(values) * 1e6
        rows.append(
            {
                "model": model,
                "variant": name,
                "p50_ms": p50,
                "p99_ms": p99,
                "bare_p50_ms": bare_p50,
                "cpu_us_per_window": cpu_us,
            }
        )
        print(
            f"{model:<8}{name:<15}{len(values):>7}{p50:>9.3f}{p99:>9.3f}"
            f"{statistics.fmean(values) * 1e3:>9.3f}{p50 / bare_p50:>9.2f}{p99 / bare_p99:>9.2f}"
            f"{(p50 - bare_p50) * 1e3:>11.0f}{cpu_us:>9.0f}",
            flush=True,
        )
    return rows


def run_model(
    model: str, args: argparse.Namespace, broker: RunningBroker | None, folder: Path
) -> list[dict[str, object]]:
    """Export ``model``, build the variants and print (and return) their latencies."""
    weights = flatten_weights(build_model(model, SAMPLE_SHAPE, len(CLASS_NAMES), seed=0))
    exported = export_weights(weights, model, SAMPLE_SHAPE, len(CLASS_NAMES))
    rng = np.random.default_rng(0)
    samples: FloatArray = rng.standard_normal(
        (args.windows + args.warm_up, *SAMPLE_SHAPE), dtype=np.float32
    )
    agents = {"agent": make_agent(folder / f"{model}-agent", exported, None)}
    if broker is not None:
        agents["agent+publish"] = make_agent(folder / f"{model}-pub", exported, broker)
    first = agents["agent"].diagnoser
    session = bare_session(exported.onnx_bytes, first.providers, first.intra_op_threads)
    batches = samples[:, np.newaxis]

    def bare(index: int) -> None:
        session.run(["probabilities"], {"window": batches[index]})

    made = time.time()  # the source's work, as bare and predict get their input made
    windows = [Window(s, made, None, f"bench window {i}") for i, s in enumerate(samples)]

    def agent_step(agent: AgentService) -> Callable[[int], None]:
        def step(index: int) -> None:
            # The agent's own per-window path: predict, Diagnosis, metrics, log (and publish).
            agent._diagnose_one(windows[index])

        return step

    def predict(index: int) -> None:
        first.predict(samples[index])

    variants: dict[str, Callable[[int], None]] = {"bare": bare, "predict": predict}
    variants.update({name: agent_step(agent) for name, agent in agents.items()})
    stop = threading.Event()
    outbox_threads = [  # the live agent's outbox thread: publishes, writes the log
        threading.Thread(target=agent.delivery.run, args=(stop,), daemon=True)
        for agent in agents.values()
    ]
    for thread in outbox_threads:
        thread.start()
    try:
        seconds, cpu_s = measure(
            variants,
            args.windows,
            block=args.block,
            warm_up=args.warm_up,
            interval_s=args.interval_ms / 1e3,
            settle=lambda name: publish_held(agents.get(name)),
        )
    finally:
        stop.set()
        for thread in outbox_threads:
            thread.join(30)
        if "agent+publish" in agents:
            published = agents["agent+publish"]
            acknowledged = published.connection.wait_acknowledged(60)
            print(
                f"agent+publish: {published.windows_diagnosed} diagnoses, "
                f"{'all' if acknowledged else 'NOT all'} acknowledged by the broker, "
                f"{len(published.delivery.outbox)} in the outbox",
                flush=True,
            )
        for agent in agents.values():
            agent.connection.stop()
            agent.delivery.close()
    return report(model, seconds, cpu_s)


def main() -> None:
    """Run the benchmark and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=2000, help="measured windows per variant")
    parser.add_argument("--models", nargs="+", default=["compact", "paper"])
    parser.add_argument("--block", type=int, default=500, help="windows per alternating block")
    parser.add_argument("--warm-up", type=int, default=50)
    parser.add_argument("--interval-ms", type=float, default=1.0, help="pause between windows")
    parser.add_argument("--no-publish", action="store_true", help="skip agent+publish")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    print("command: python " + shlex.join(sys.argv))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} cpus, load average {load}; onnxruntime {ort.__version__}")
    broker = None if args.no_publish else start_broker(prefer="auto", persistence=False)
    if broker is not None:
        print(f"agent+publish: {broker.kind} broker on 127.0.0.1:{broker.port}")
    print(
        f"{'model':<8}{'variant':<15}{'windows':>7}{'p50_ms':>9}{'p99_ms':>9}{'mean_ms':>9}"
        f"{'p50_x':>9}{'p99_x':>9}{'p50+_us':>11}{'cpu_us':>9}",
        flush=True,
    )
    try:
        with tempfile.TemporaryDirectory(prefix="bench-diagnosis-") as folder:
            rows = [r for m in args.models for r in run_model(m, args, broker, Path(folder))]
        if args.json is not None:
            document = {"benchmark": "diagnosis_latency", "rows": rows}
            args.json.write_text(json.dumps(document, indent=1))
    finally:
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    main()
