"""Coordinator ingest of fit updates over Mosquitto, against the broker's raw delivery rate.

Usage: python benchmarks/bench_ingest.py [--repeats 3] [--models compact paper]
       [--updates-compact 200] [--updates-paper 12] [--journal off shm disk]

Starts a private Mosquitto on 127.0.0.1 (``faultfleet.wire.broker.start_broker``) and one
publisher process that stays up for the whole run: a plain ``MqttConnection`` that sends
pre-built ``fit_update`` frames (QoS 1, one per fake agent, on
``{root}/agents/{agent}/results``) back to back. For each model it measures two receivers
of exactly the same frames from that same publisher:

* ``mosquitto_sub`` (raw): ``mosquitto_sub -q 1 -C N -t '{root}/agents/+/results'``, which
  receives and acknowledges each message and does nothing with it. Its rate is the raw
  broker throughput for these payloads on this machine.
* ``MqttFleet.fit`` (ours): the real coordinator path. An ``MqttFleet`` with a real
  ``MqttConnection``, ``RoundJournal`` and ``CoordinatorMetrics`` publishes one fit task per
  fake agent. The publisher answers once it has all N tasks, and the fleet validates each
  answer on paho's network thread: frame split, pydantic envelope, safetensors decode,
  finiteness check, delta against the task's weights; then the journal's writer thread
  writes the accepted updates in batches (one atomic, fsynced segment per batch) and
  counts them.

Both rates are timed from the publisher's first publish to the receiver's last message:
the receipt stamp ``mosquitto_sub -F %U`` prints for it, or the moment our last update was
journaled and counted. Frames are built before the clock starts, and the task download
happens before it too. All stamps are Unix time (``time.time``), which ``%U`` also uses,
so they compare across processes.

Why this baseline: ``mosquitto_pub -f file`` once per message would charge a process start
and an MQTT connection to every message of the baseline. That would understate the
broker's rate and flatter small payloads. One long-running publisher for both receivers
means the two runs differ only in the receiver. ``pub_s`` is the publisher's own time to
its last PUBACK; when it is close to the raw time, the raw rate is bounded by the sender
and the broker, not by ``mosquitto_sub``. The broker, the publisher and the receiver share
the machine's cores, as a coordinator sharing a gateway with its broker would.

A third receiver, ``paho, no-op``, is a bare ``MqttConnection`` whose handler only counts:
the ceiling of any paho-based receiver here, which separates paho's share of the gap from
the coordinator's.

Journal variants: ``off`` replaces ``RoundJournal.record_many`` with a no-op (not a real
configuration; it shows the journal's share), ``shm`` puts the journal on /dev/shm
(tmpfs), ``disk`` puts it under ``--disk-dir`` (its file system is printed). Each repeat
runs the raw receiver and then every variant, after one unmeasured warm-up of each, and
every round gets a fresh coordinator connection. Prints the medians over ``--repeats``
of updates/s and MB/s (10^6 bytes of MQTT payload), the ratio to raw, and the per-update
time of our network-thread handler (``on_answer``) and of the journal writes (writer thread).
On a shared machine the spread between runs is large: raise ``--repeats``. Numbers only,
no pass/fail.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import multiprocessing
import os
import queue
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from coordinator.journal import RoundJournal
from coordinator.metrics import CoordinatorMetrics
from coordinator.mqtt_fleet import MqttFleet
from coordinator.presence import AgentRegistry
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.tasks import FitTask, TrainConfig
from faultfleet.types import FloatArray
from faultfleet.wire.broker import RunningBroker, start_broker
from faultfleet.wire.codec import encode_frame, encode_tensors, split_frame
from faultfleet.wire.messages import AgentStatus, FitUpdateMessage, ModelSpec, TensorEncoding
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import DEFAULT_MAX_PAYLOAD_BYTES, BrokerSettings
from faultfleet.wire.topics import Topics

SAMPLE_SHAPE = (1, 1024)
N_CLASSES = 12
TOPICS = Topics()
WAIT_S = 600.0


# -- the publisher process -------------------------------------------------------------------


def _answer_frames(
    headers: Sequence[dict[str, Any]], body: bytes, encoding: TensorEncoding
) -> list[tuple[str, bytes]]:
    """One ``fit_update`` frame per task header, all with the same tensor ``body``."""
    frames = []
    for header in headers:
        message = FitUpdateMessage(
            task_id=header["task_id"],
            run_id=header["run_id"],
            server_round=header["server_round"],
            agent_id=header["agent_id"],
            model_key=header["model_keys"][0],
            encoding=encoding,
            num_samples=100,
            train_loss=0.5,
        )
        frames.append((TOPICS.results(header["agent_id"]), encode_frame(message, body)))
    return frames


def publisher_main(pipe: Connection, port: int) -> None:
    """Serve commands from ``pipe`` until ``("stop",)``; runs in a spawned process.

    ``("run", mode, body_path, dtype, compression, agent_ids)``: in mode ``"agents"`` send
    ``("ready",)``, wait for one task per agent and answer them all; in mode ``"raw"``
    answer made-up tasks at once. Then send ``("done", first_publish, last_puback, bytes)``
    (Unix time in seconds, bytes of one frame).
    """
    tasks: queue.Queue[dict[str, Any]] = queue.Queue()

    def on_task(topic: str, payload: bytes) -> None:
        header, _ = split_frame(payload, max_bytes=DEFAULT_MAX_PAYLOAD_BYTES)
        tasks.put(header)

    connection = MqttConnection(
        client_id="bench-ingest-publisher", settings=BrokerSettings(host="127.0.0.1", port=port)
    )
    connection.route(f"{TOPICS.root}/agents/+/tasks", on_task)
    connection.start()
    if not (connection.wait_connected(30) and connection.wait_subscribed(30)):
        pipe.send(("error", f"publisher could not connect to 127.0.0.1:{port}"))
        return
    pipe.send(("ready",))
    while (command := pipe.recv())[0] != "stop":
        _, mode, body_path, dtype, compression, agents = command
        body = Path(body_path).read_bytes()
        encoding = TensorEncoding(dtype=dtype, compression=compression)
        if mode == "agents":
            while not tasks.empty():
                tasks.get_nowait()
            pipe.send(("ready",))
            headers = [tasks.get(timeout=WAIT_S) for _ in agents]
        else:
            made_up = {"run_id": "raw", "server_round": 1, "model_keys": ["global"]}
            headers = [
                {**made_up, "task_id": f"raw{i}", "agent_id": a} for i, a in enumerate(agents)
            ]
        frames = _answer_frames(headers, body, encoding)
        started = time.time()
        for topic, frame in frames[:-1]:
            connection.publish(topic, frame)
        connection.publish_wait(*frames[-1], timeout_s=WAIT_S)
        pipe.send(("done", started, time.time(), len(frames[-1][1])))
    connection.stop()


# -- the receivers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One measured delivery of N updates."""

    seconds: float
    """First publish to last message received, seconds."""
    publisher_seconds: float
    """First publish to the publisher's last PUBACK, seconds."""
    frame_bytes: int
    handler_seconds: float = float("nan")
    """Time spent in ``on_answer`` over all updates, seconds."""
    journal_seconds: float = float("nan")
    """Time spent in ``RoundJournal.record`` over all updates, seconds."""


class TimedJournal(RoundJournal):
    """A journal that adds up the time of its writes; ``enabled=False`` writes nothing."""

    def __init__(self, directory: Path, *, enabled: bool = True) -> None:
        super().__init__(directory)
        self.enabled = enabled
        self.seconds = 0.0

    def record_many(self, entries: Sequence[tuple[str, str, bytes]]) -> None:
        started = time.perf_counter()
        if self.enabled:
            super().record_many(entries)
        self.seconds += time.perf_counter() - started


class TimedFleet(MqttFleet):
    """The real fleet, adding up the time its network-thread handler takes."""

    handler_seconds = 0.0
    last_answer_at = 0.0
    """Unix time the last update was accepted (journaled and counted)."""

    def on_answer(self, topic: str, payload: bytes, *, journal: bool = True) -> None:
        started = time.perf_counter()
        super().on_answer(topic, payload, journal=journal)
        self.handler_seconds += time.perf_counter() - started
        self.last_answer_at = max(self.last_answer_at, time.time())

    def _settle(self, writes: Sequence[Any]) -> None:
        super()._settle(writes)
        self.last_answer_at = time.time()


def _expect(pipe: Connection, kind: str) -> tuple[Any, ...]:
    if not pipe.poll(WAIT_S):
        raise TimeoutError(f"the publisher sent no {kind!r} within {WAIT_S:.0f} s")
    message: tuple[Any, ...] = pipe.recv()
    if message[0] != kind:
        raise RuntimeError(f"publisher answered {message!r}, expected {kind!r}")
    return message


@dataclass(frozen=True)
class Workload:
    """N updates of one model: who answers, with what, through which broker."""

    broker: RunningBroker
    pipe: Connection
    agents: list[str]
    command: tuple[Any, ...]
    """``(body_path, dtype, compression, agents)`` for the publisher."""
    model: ModelSpec
    weights: FloatArray
    """The task's (global) weights, shape (n_params,)."""
    encoding: TensorEncoding


def raw_run(work: Workload) -> Run:
    """Deliver one frame per agent to ``mosquitto_sub``; time until its last receipt."""
    broker, n = work.broker, len(work.agents)
    log_path = broker.workdir / "mosquitto_sub.out"
    # Line-buffered, so that the SUBACK line shows before the first message arrives.
    argv = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []
    argv += ["mosquitto_sub", "-h", broker.host, "-p", str(broker.port), "-q", "1"]
    argv += ["-C", str(n), "-t", TOPICS.all_results(), "-i", "bench-ingest-raw"]
    argv += ["-d", "-F", "%U"]  # -d shows the SUBACK; %U prints the receipt time, not the payload
    with log_path.open("wb") as output:
        process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while b"SUBACK" not in log_path.read_bytes():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mosquitto_sub did not subscribe: {log_path.read_text()!r}")
            time.sleep(0.01)
        work.pipe.send(("run", "raw", *work.command))
        process.wait(timeout=WAIT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    _, started, acked, frame_bytes = _expect(work.pipe, "done")
    stamps = [line for line in log_path.read_text().splitlines() if line[:1].isdigit()]
    return Run(float(stamps[-1]) - started, acked - started, frame_bytes)


def paho_run(work: Workload) -> Run:
    """Deliver one frame per agent to a bare ``MqttConnection`` whose handler only counts.

    The ceiling of any receiver built on paho on this machine: what is left between it and
    ``mosquitto_sub`` is paho's pure-Python receive loop, not the coordinator's work.
    """
    n = len(work.agents)
    received = threading.Event()
    count = 0
    last = 0.0

    def on_result(topic: str, payload: bytes) -> None:
        nonlocal count, last
        count += 1
        last = time.time()
        if count == n:
            received.set()

    settings = BrokerSettings(host=work.broker.host, port=work.broker.port)
    connection = MqttConnection(client_id="bench-ingest-paho", settings=settings)
    connection.route(TOPICS.all_results(), on_result)
    connection.start()
    try:
        if not (connection.wait_connected(30) and connection.wait_subscribed(30)):
            raise RuntimeError(f"paho receiver could not subscribe on {connection.broker_address}")
        work.pipe.send(("run", "raw", *work.command))
        if not received.wait(WAIT_S):
            raise TimeoutError(f"paho receiver got {count} of {n} messages")
        _, started, acked, frame_bytes = _expect(work.pipe, "done")
    finally:
        connection.stop()
    return Run(last - started, acked - started, frame_bytes)


def fleet_round(work: Workload, journal: TimedJournal, server_round: int) -> Run:
    """One round of ``MqttFleet.fit`` over the agents, on a fresh coordinator connection."""
    settings = BrokerSettings(host=work.broker.host, port=work.broker.port)
    connection = MqttConnection(client_id="bench-ingest-coordinator", settings=settings)
    registry = AgentRegistry()
    for agent in work.agents:
        registry.update(
            AgentStatus(agent_id=agent, state="online", can_train=True, num_train_samples=100)
        )
    fleet = TimedFleet(
        connection,
        TOPICS,
        registry,
        work.agents,
        run_id="bench-ingest",
        model=work.model,
        n_params=len(work.weights),
        encoding=work.encoding,
        deadline_s=WAIT_S,
        min_quorum=len(work.agents),
        journal=journal,
        metrics=CoordinatorMetrics(),
        max_payload_bytes=settings.max_payload_bytes,
    )
    tasks = [
        FitTask(agent, {"global": work.weights}, TrainConfig(), seed=i)
        for i, agent in enumerate(work.agents)
    ]
    connection.start()
    try:
        if not (connection.wait_connected(30) and connection.wait_subscribed(30)):
            raise RuntimeError(f"coordinator could not subscribe on {connection.broker_address}")
        journal.seconds = 0.0
        fleet.begin_round(server_round, replay=False)
        work.pipe.send(("run", "agents", *work.command))
        _expect(work.pipe, "ready")
        outcome = fleet.fit(server_round, tasks)
        fleet.end_round()
        _, started, acked, frame_bytes = _expect(work.pipe, "done")
    finally:
        connection.stop()
    if len(outcome.results) != len(tasks):
        raise RuntimeError(f"only {len(outcome.results)} of {len(tasks)} updates were accepted")
    return Run(
        fleet.last_answer_at - started,
        acked - started,
        frame_bytes,
        fleet.handler_seconds,
        journal.seconds,
    )


# -- reporting -------------------------------------------------------------------------------


def file_system(path: Path) -> str:
    """Type of the file system holding ``path`` (from /proc/mounts), e.g. ``ext4``."""
    target, best, kind = str(path.resolve()), "", "unknown"
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return kind
    for line in mounts:
        fields = line.split()
        if len(fields) > 2 and target.startswith(fields[1]) and len(fields[1]) > len(best):
            best, kind = fields[1], fields[2]
    return kind


def row(model: str, receiver: str, journal: str, n: int, runs: list[Run], raw: float) -> str:
    """One table line from the runs of one cell; ``raw`` is the raw median updates/s."""
    seconds = statistics.median(r.seconds for r in runs)
    rate = n / seconds
    megabytes = n * runs[0].frame_bytes / seconds / 1e6
    ratio = rate / raw if raw > 0 else float("nan")
    handler = statistics.median(r.handler_seconds for r in runs) / n * 1e3
    journal_ms = statistics.median(r.journal_seconds for r in runs) / n * 1e3
    pub = statistics.median(r.publisher_seconds for r in runs)
    return (
        f"{model:<8}{receiver:<15}{journal:<8}{n:>6}{rate:>10.1f}{megabytes:>9.1f}"
        f"{ratio:>7.2f}{seconds:>9.3f}{pub:>8.3f}{_ms(handler):>11}{_ms(journal_ms):>11}"
    )


def _ms(value: float) -> str:
    return "-" if np.isnan(value) else f"{value:.2f}"


def main() -> None:
    """Run the benchmark and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=["compact", "paper"])
    parser.add_argument("--updates-compact", type=int, default=200, help="updates per round")
    parser.add_argument("--updates-paper", type=int, default=12, help="updates per round")
    parser.add_argument(
        "--journal", nargs="+", default=["off", "shm", "disk"], choices=["off", "shm", "disk"]
    )
    parser.add_argument("--disk-dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    parser.add_argument("--compression", choices=["none", "zlib"], default="none")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if shutil.which("mosquitto_sub") is None:
        sys.exit("mosquitto_sub is not installed (apt-get install mosquitto-clients)")
    print("command: python " + shlex.join(sys.argv))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} cpus, load average {load}; median of {args.repeats} runs")
    roots = {"shm": Path("/dev/shm"), "disk": args.disk_dir}
    for kind, root in roots.items():
        if kind in args.journal:
            print(f"journal {kind}: {root} ({file_system(root)})")
    encoding = TensorEncoding(dtype=args.dtype, compression=args.compression)
    context = multiprocessing.get_context("spawn")
    with start_broker(prefer="mosquitto", persistence=False) as broker:
        pipe, child_pipe = context.Pipe()
        publisher = context.Process(
            target=publisher_main, args=(child_pipe, broker.port), daemon=True
        )
        publisher.start()
        try:
            _expect(pipe, "ready")
            print(
                f"{'model':<8}{'receiver':<15}{'journal':<8}{'n':>6}{'upd/s':>10}{'MB/s':>9}"
                f"{'ratio':>7}{'wall_s':>9}{'pub_s':>8}{'handler_ms':>11}{'journal_ms':>11}",
                flush=True,
            )
            for model in args.models:
                n = args.updates_paper if model == "paper" else args.updates_compact
                measure_model(broker, pipe, model, n, encoding, args, roots)
        finally:
            pipe.send(("stop",))
            publisher.join(timeout=30)
            if publisher.is_alive():
                publisher.terminate()


def measure_model(
    broker: RunningBroker,
    pipe: Connection,
    model: str,
    n: int,
    encoding: TensorEncoding,
    args: argparse.Namespace,
    roots: dict[str, Path],
) -> None:
    """Print the raw row and one row per journal variant for ``model``.

    Receivers alternate within each repeat, so that a busy machine slows them alike. One
    unmeasured delivery to each kind of receiver runs first: a process's first rounds of
    large allocations are slower (page faults until glibc raises its mmap threshold).
    """
    weights = flatten_weights(build_model(model, SAMPLE_SHAPE, N_CLASSES, seed=0))
    noise = np.random.default_rng(0).standard_normal(len(weights), dtype=np.float32)
    trained = weights + np.float32(1e-3) * noise
    agents = [f"a{i:04d}" for i in range(n)]
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-ingest-")))
        body_path = folder / "body.bin"
        body_path.write_bytes(encode_tensors({"weights": trained}, encoding))
        spec = ModelSpec(name=model, sample_shape=SAMPLE_SHAPE, n_classes=N_CLASSES)
        command = (str(body_path), encoding.dtype, encoding.compression, agents)
        work = Workload(broker, pipe, agents, command, spec, weights, encoding)
        journals = {}
        for kind in args.journal:
            root = folder if kind == "off" else roots[kind]
            journal_dir = stack.enter_context(tempfile.TemporaryDirectory(dir=root))
            journals[kind] = TimedJournal(Path(journal_dir) / "journal", enabled=kind != "off")
        raw_run(work)
        paho_run(work)
        fleet_round(work, TimedJournal(folder / "warm-up", enabled=False), 1)
        runs: dict[str, list[Run]] = {"raw": [], "paho": [], **{kind: [] for kind in journals}}
        for repeat in range(args.repeats):
            runs["raw"].append(raw_run(work))
            runs["paho"].append(paho_run(work))
            for kind, journal in journals.items():
                runs[kind].append(fleet_round(work, journal, server_round=repeat + 2))
    raw = runs.pop("raw")
    raw_rate = n / statistics.median(r.seconds for r in raw)
    print(row(model, "mosquitto_sub", "-", n, raw, raw_rate), flush=True)
    print(row(model, "paho, no-op", "-", n, runs.pop("paho"), raw_rate), flush=True)
    for kind, measured in runs.items():
        print(row(model, "MqttFleet.fit", kind, n, measured, raw_rate), flush=True)


if __name__ == "__main__":
    main()
