"""Horizontal ingest: 1, 2 and 4 ``faultfleet ingest-worker`` processes sharing the updates.

Usage: python benchmarks/bench_ingest_workers.py [--workers 1 2 4] [--repeats 3]
       [--model compact] [--updates 400] [--check-threads 2] [--journal-dir DIR] [--json FILE]

Starts a private Mosquitto on 127.0.0.1 (MQTT 5 shared subscriptions) and the publisher
process of ``bench_ingest.py`` (``ingest_publisher.py``), which sends N pre-built
``fit_update`` frames (QoS 1, one per fake agent) back to back. For each worker count K,
K ``faultfleet ingest-worker`` processes are started (one BLAS thread each; their start
is not timed) and the coordinator's end (:class:`~coordinator.adapters.
ingest_coordinator.IngestCoordinator`) publishes the round's plan: the model, the default
robust policy and a count sketch (d = 1063, as FLACC draws it for 1,000 agents). Once every
worker took the plan the publisher sends the N updates; each worker checks, decodes and
journals its share (``--journal-dir``, fsynced batches) and sends the coordinator one
summary per update (sketch, norm, samples).

``upd/s`` is N over the time from the publisher's first publish to the coordinator's
receipt of the last summary; ``close_s`` is the round's close (partial sums sent, merged)
after that. The merged average is checked against the one every update gives. The raw
row is ``mosquitto_sub`` receiving the same frames (``bench_ingest.py``'s baseline).
Each repeat runs the raw receiver and every K in turn, so that a busy machine slows them
alike. Prints medians over ``--repeats``, each K's ratio to raw and to one worker, and
``2 workers / 1 worker``. The broker, the publisher, the workers and the coordinator share
this machine's cores: on a 2-core machine K workers cannot get K cores. Numbers only, no
pass/fail.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np
from ingest_publisher import WAIT_S, expect, publisher_main
from ingest_receivers import Workload, raw_run

from coordinator.adapters.ingest_coordinator import IngestCoordinator
from coordinator.strategies.robust import DEFAULT_POLICY
from coordinator.strategies.sketch import UpdateSketcher
from coordinator.strategies.streaming import UpdateStream
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.wire.codec import encode_tensors
from faultfleet.wire.messages import ModelSpec, TensorEncoding
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from faultfleet.wire.topics import Topics
from faultfleet_apps.brokers.launch import RunningBroker, free_port, start_broker

SAMPLE_SHAPE = (1, 1024)
N_CLASSES = 12
SKETCH_DIM = 1063


def start_workers(
    count: int, broker: RunningBroker, state_dir: Path, check_threads: int
) -> list[subprocess.Popen[bytes]]:
    """``count`` ingest-worker processes on ``broker``, journaling under ``state_dir``, each
    checking updates in ``check_threads`` threads and serving its metrics on a port of its
    own, as a deployment would (nobody scrapes them here)."""
    config = state_dir / "ingest.toml"
    config.write_text(
        f'worker_id = "w0"\nstate_dir = "{state_dir}"\ncheck_threads = {check_threads}\n'
        f'[broker]\nhost = "{broker.host}"\nport = {broker.port}\n'
        '[metrics]\nhost = "127.0.0.1"\n'
    )
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "faultfleet_apps.cli.main", "ingest-worker"]
    return [
        subprocess.Popen(
            [
                *(*command, "--config", str(config), "--worker-id", f"w{k}"),
                *("--metrics-port", str(free_port())),
            ],
            env=env,
        )
        for k in range(count)
    ]


def stop_workers(workers: list[subprocess.Popen[bytes]]) -> None:
    for process in workers:
        process.send_signal(signal.SIGTERM)
    for process in workers:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def workers_run(
    work: Workload,
    count: int,
    repeat: int,
    trained: np.ndarray,
    journal_dir: Path,
    check_threads: int,
) -> tuple[float, float]:
    """One round through ``count`` workers: (seconds to the last summary, close seconds)."""
    n = len(work.agents)
    with ExitStack() as stack:
        state = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=journal_dir)))
        workers = start_workers(count, work.broker, state, check_threads)
        stack.callback(stop_workers, workers)
        settings = BrokerSettings(host=work.broker.host, port=work.broker.port)
        link = MqttConnection(
            client_id=f"bench-ingest-coordinator-{count}-{repeat}", settings=settings
        )
        stack.callback(link.stop)
        coordinator = IngestCoordinator(
            link, Topics(), max_payload_bytes=settings.max_payload_bytes
        )
        coordinator.start()
        link.start()
        if not link.wait_subscribed(30):
            raise RuntimeError("the coordinator could not subscribe")
        sketcher = UpdateSketcher(len(work.weights), SKETCH_DIM, seed=0)
        stream = UpdateStream(1, {"global": work.weights}, DEFAULT_POLICY, {}, sketcher)
        merged = coordinator.open_round("raw", stream)
        if not coordinator.wait_for(lambda r: len(r.ready()) == count, 180):
            ended = [w.returncode for w in workers if w.poll() is not None]
            raise RuntimeError(
                f"{count} ingest workers did not take the plan within 180 s "
                f"({len(ended)} ended, exit statuses {ended})"
            )
        work.pipe.send(("run", "raw", *work.command))
        if not coordinator.wait_for(lambda r: len(r.updates()) == n, WAIT_S):
            raise RuntimeError(f"{len(merged.updates())} of {n} summaries arrived")
        last = time.time()
        _, started, _, _ = expect(work.pipe, "done")
        closing = time.perf_counter()
        coordinator.close_round(WAIT_S)
        close_s = time.perf_counter() - closing
    if merged.report("global").updates != n:
        raise RuntimeError(f"the partial sums hold {merged.report('global').updates} of {n}")
    np.testing.assert_allclose(merged.average("global"), trained, atol=1e-5)
    return last - started, close_s


def main() -> None:
    """Run the benchmark and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="compact")
    parser.add_argument("--updates", type=int, default=400)
    parser.add_argument(
        "--check-threads", type=int, default=2, help="each worker's check_threads (>= 1)"
    )
    parser.add_argument("--journal-dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args()
    if args.check_threads < 1:
        parser.error("--check-threads must be >= 1")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    print("command: python " + shlex.join(sys.argv))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} cpus, load average {load}; median of {args.repeats} runs")
    weights = flatten_weights(build_model(args.model, SAMPLE_SHAPE, N_CLASSES, seed=0))
    noise = np.random.default_rng(0).standard_normal(len(weights), dtype=np.float32)
    trained = weights + np.float32(1e-3) * noise
    agents = [f"a{i:04d}" for i in range(args.updates)]
    encoding = TensorEncoding()
    context = multiprocessing.get_context("spawn")
    times: dict[str, list[float]] = {"raw": [], **{f"{k}": [] for k in args.workers}}
    closes: dict[str, list[float]] = {f"{k}": [] for k in args.workers}
    with ExitStack() as stack:
        broker = stack.enter_context(start_broker(prefer="mosquitto", persistence=False))
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-ingest-")))
        body_path = folder / "body.bin"
        body_path.write_bytes(encode_tensors({"weights": trained}, encoding))
        pipe, child_pipe = context.Pipe()
        publisher = context.Process(target=publisher_main, args=(child_pipe, broker.port))
        publisher.start()
        stack.callback(publisher.join, 30)
        stack.callback(pipe.send, ("stop",))
        expect(pipe, "ready")
        spec = ModelSpec(name=args.model, sample_shape=SAMPLE_SHAPE, n_classes=N_CLASSES)
        command = (str(body_path), encoding.dtype, encoding.compression, agents)
        work = Workload(broker, pipe, agents, command, spec, weights, encoding)
        raw_run(work)  # warm-up
        for repeat in range(args.repeats):
            times["raw"].append(raw_run(work).seconds)
            for k in args.workers:
                seconds, close_s = workers_run(
                    work, k, repeat, trained, args.journal_dir, args.check_threads
                )
                times[f"{k}"].append(seconds)
                closes[f"{k}"].append(close_s)
    n = args.updates
    rate = {key: n / statistics.median(values) for key, values in times.items()}
    one = rate.get("1", float("nan"))
    print(f"{'receiver':<18}{'n':>6}{'upd/s':>10}{'vs raw':>8}{'vs 1':>7}{'close_s':>9}")
    rows = []
    for key, value in rate.items():
        close = statistics.median(closes[key]) if key in closes else float("nan")
        name = "mosquitto_sub" if key == "raw" else f"{key} ingest worker(s)"
        rows.append(
            {
                "model": args.model,
                "receiver": name,
                "workers": 0 if key == "raw" else int(key),
                "updates": n,
                "updates_per_s": value,
                "ratio_to_raw": value / rate["raw"],
                "ratio_to_one_worker": value / one,
                "close_s": close,
            }
        )
        ratios = f"{value / rate['raw']:>8.2f}{value / one:>7.2f}"
        print(f"{name:<18}{n:>6}{value:>10.1f}{ratios}{close:>9.3f}")
    if "2" in rate and "1" in rate:
        print(f"2 workers / 1 worker: {rate['2'] / one:.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps({"benchmark": "ingest_workers", "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
