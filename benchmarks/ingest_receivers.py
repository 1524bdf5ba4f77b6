"""The receivers ``bench_ingest.py`` times: raw ``mosquitto_sub``, bare paho and ``MqttFleet``.

Each function delivers one frame per agent of a :class:`Workload` from the publisher
process (:mod:`ingest_publisher`) to one receiver and returns a :class:`Run`: the time from
the publisher's first publish to the receiver's last message. :class:`TimedAnswers` and
:class:`TimedJournal` are the real coordinator classes (the fleet's answer collector and its
journal) with clocks on their handler and journal writes.
"""

from __future__ import annotations

import math
import resource
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ingest_publisher import TOPICS, WAIT_S, expect

from coordinator.adapters.byte_budget import ANSWER_BUDGET_BYTES
from coordinator.adapters.journal import RoundJournal
from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.mqtt_answers import AnswerCollector
from coordinator.adapters.mqtt_fleet import MqttFleet
from coordinator.adapters.presence import AgentRegistry
from faultfleet.tasks import FitTask, TrainConfig
from faultfleet.types import FloatArray
from faultfleet.wire.messages import AgentStatus, ModelSpec, TensorEncoding
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from faultfleet_apps.brokers.launch import RunningBroker


@dataclass(frozen=True)
class Run:
    """One measured delivery of N updates."""

    seconds: float
    """First publish to last message received, seconds."""
    publisher_seconds: float
    """First publish to the publisher's last PUBACK, seconds."""
    frame_bytes: int
    handler_seconds: float = float("nan")
    """Time spent in ``on_answer`` over all updates (all checking threads), seconds."""
    journal_seconds: float = float("nan")
    """Time spent in ``RoundJournal.record`` over all updates, seconds."""
    cpu_seconds: float = float("nan")
    """CPU time of the receiving process, every thread, from its first message to its last
    (``mosquitto_sub``: over its whole life), seconds."""
    held_bytes: float = float("nan")
    """The most bytes of received answers the coordinator held at once between receiving
    them and journaling them (:class:`~coordinator.adapters.byte_budget.ByteBudget`)."""


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


class TimedAnswers(AnswerCollector):
    """The fleet's real answer collector, adding up the time its answer checks take."""

    handler_seconds = 0.0
    last_answer_at = 0.0
    """Unix time the last update was accepted (journaled and counted)."""
    first_cpu_s = float("nan")
    """The process's CPU time when the first answer was checked, seconds."""
    last_cpu_s = float("nan")
    """The process's CPU time when the last update was accepted, seconds."""
    _timing = threading.Lock()

    def _check(self, topic: str, payload: bytes, *, journal: bool, held: bool) -> bool:
        if math.isnan(self.first_cpu_s):  # the first answer
            self.first_cpu_s = time.process_time()
        started = time.perf_counter()
        journaling = super()._check(topic, payload, journal=journal, held=held)
        with self._timing:  # several checking threads add up
            self.handler_seconds += time.perf_counter() - started
            self.last_answer_at = max(self.last_answer_at, time.time())
        return journaling

    def _settle(self, writes: Sequence[Any]) -> None:
        super()._settle(writes)
        self.last_answer_at = time.time()
        self.last_cpu_s = time.process_time()


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
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
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
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (children.ru_utime + children.ru_stime) - (
        children_before.ru_utime + children_before.ru_stime
    )
    _, started, acked, frame_bytes = expect(work.pipe, "done")
    stamps = [line for line in log_path.read_text().splitlines() if line[:1].isdigit()]
    return Run(float(stamps[-1]) - started, acked - started, frame_bytes, cpu_seconds=cpu)


def paho_run(work: Workload) -> Run:
    """Deliver one frame per agent to a bare ``MqttConnection`` whose handler only counts.

    The ceiling of any receiver built on paho on this machine: what is left between it and
    ``mosquitto_sub`` is paho's pure-Python receive loop, not the coordinator's work.
    """
    n = len(work.agents)
    received = threading.Event()
    count = 0
    last = 0.0
    cpu = [0.0, 0.0]  # the process's CPU time at the first and the last message

    def on_result(topic: str, payload: bytes) -> None:
        nonlocal count, last
        count += 1
        last = time.time()
        cpu[count > 1] = time.process_time()
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
        _, started, acked, frame_bytes = expect(work.pipe, "done")
    finally:
        connection.stop()
    return Run(last - started, acked - started, frame_bytes, cpu_seconds=cpu[1] - cpu[0])


def fleet_round(
    work: Workload,
    journal: TimedJournal,
    server_round: int,
    *,
    check_threads: int = 2,
    max_held_bytes: int = ANSWER_BUDGET_BYTES,
) -> Run:
    """One round of ``MqttFleet.fit`` over the agents, on a fresh coordinator connection;
    ``check_threads`` threads check the answers, which hold at most ``max_held_bytes``
    between receipt and journal."""
    settings = BrokerSettings(host=work.broker.host, port=work.broker.port)
    connection = MqttConnection(client_id="bench-ingest-coordinator", settings=settings)
    registry = AgentRegistry()
    for agent in work.agents:
        registry.update(
            AgentStatus(agent_id=agent, state="online", can_train=True, num_train_samples=100)
        )
    fleet = MqttFleet(
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
    timed = TimedAnswers(
        connection,
        TOPICS,
        run_id="bench-ingest",
        n_params=len(work.weights),
        deadline_s=WAIT_S,
        journal=journal,
        metrics=fleet.answers.metrics,
        max_payload_bytes=settings.max_payload_bytes,
        check_threads=check_threads,
        max_held_bytes=max_held_bytes,
    )
    fleet.answers = timed  # the same collector, with a clock on its handler
    fleet.start()
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
        expect(work.pipe, "ready")
        outcome = fleet.fit(server_round, tasks)
        fleet.end_round()
        _, started, acked, frame_bytes = expect(work.pipe, "done")
    finally:
        connection.stop()
        fleet.close()
    if len(outcome.results) != len(tasks):
        raise RuntimeError(f"only {len(outcome.results)} of {len(tasks)} updates were accepted")
    return Run(
        timed.last_answer_at - started,
        acked - started,
        frame_bytes,
        timed.handler_seconds,
        journal.seconds,
        timed.last_cpu_s - timed.first_cpu_s,
        timed.held.peak,
    )
