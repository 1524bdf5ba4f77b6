"""The fleet demo: a broker, the coordinator and simulated agents as separate processes.

:func:`run_fleet_demo` starts an MQTT broker (Mosquitto when installed, the embedded amqtt
broker otherwise), writes the coordinator's and the agents' TOML files, starts
``faultfleet coordinator`` and ``faultfleet agent --machines`` processes exactly as a plant
would run them, follows the rounds through the coordinator's retained status, then watches
the agents diagnose live windows with their cluster's ONNX model and reports what happened.
Every process is stopped on the way out, Ctrl-C included.

It is secured as a plant is (:func:`prepare_secrets`): every agent, the coordinator and the
monitor log in with their own random password, Mosquitto runs with the shipped ACL and
``allow_anonymous false``, and the coordinator signs its models with a fresh key that every
agent trusts. The amqtt fallback has no logins and no ACL (any local process may publish);
it listens on 127.0.0.1 only, and the signatures still keep forged models out.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import TypeAdapter

from coordinator.runtime.run_summary import load_summary
from faultfleet.wire.codec import WireError, parse_envelope
from faultfleet.wire.messages import CoordinatorStatus, Diagnosis
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from faultfleet.wire.signing import SigningKey
from faultfleet.wire.topics import Topics
from faultfleet_apps.brokers.accounts import (
    COORDINATOR,
    HISTORIAN,
    STATUS,
    BrokerAccounts,
    create_accounts,
)
from faultfleet_apps.brokers.launch import RunningBroker, find_mosquitto, start_broker
from faultfleet_apps.thread_policy import torch_threads, usable_cores

logger = logging.getLogger(__name__)

_STATUS = TypeAdapter(CoordinatorStatus)
_DIAGNOSIS = TypeAdapter(Diagnosis)


@dataclass(frozen=True)
class DemoPlan:
    """What the demo runs."""

    out: Path
    seed: int = 0
    clients_per_group: int = 8
    groups: int = 6
    rounds: int = 40
    fraction: float = 0.5
    epochs: int = 2
    learning_rate: float = 1e-3
    n_merge: int = 3
    """FLACC merges per round: 3 separates 48 machines by about round 20 (1 needs 50-70)."""
    n_sep: int = 5
    agent_processes: int = 2
    interval_s: float = 0.1
    """Time between live windows of each simulated machine."""
    live_seconds: float = 10.0
    """How long diagnoses are counted once every agent serves the final models."""
    broker: str = "auto"
    device: str = "cpu"
    """Where the agents train: ``"cpu"`` (the default, so that the demo's numbers are the
    same on every machine), ``"auto"`` (a GPU when torch sees one) or ``"cuda"``."""

    @property
    def machines(self) -> int:
        return self.clients_per_group * self.groups


@dataclass
class LiveCounts:
    """Diagnoses seen on ``agents/+/diagnoses``."""

    total: int = 0
    by_agent_version: dict[str, int] = field(default_factory=dict)
    """Latest model version each agent diagnosed with."""
    window: list[Diagnosis] = field(default_factory=list)
    """Diagnoses of the counting window."""
    counting: bool = False


class FleetMonitor:
    """Subscribes to the coordinator's status and the agents' diagnoses."""

    def __init__(self, settings: BrokerSettings) -> None:
        self.topics = Topics(settings.topic_root)
        self.lock = threading.Lock()
        self.status: CoordinatorStatus | None = None
        self.live = LiveCounts()
        self.connection = MqttConnection(client_id="faultfleet-demo-monitor", settings=settings)
        self.connection.route(self.topics.coordinator_status(), self._on_status)
        self.connection.route(self.topics.all_diagnoses(), self._on_diagnosis)

    def _on_status(self, topic: str, payload: bytes) -> None:
        if payload:
            with self.lock:
                self.status = parse_envelope(_STATUS, payload)

    def _on_diagnosis(self, topic: str, payload: bytes) -> None:
        try:
            diagnosis = parse_envelope(_DIAGNOSIS, payload)
        except WireError as error:
            logger.warning("bad diagnosis on %s: %s", topic, error)
            return
        with self.lock:
            self.live.total += 1
            self.live.by_agent_version[diagnosis.agent_id] = diagnosis.model_version
            if self.live.counting:
                self.live.window.append(diagnosis)

    def server_round(self) -> int:
        with self.lock:
            return self.status.server_round if self.status else 0

    def agents_on_version(self, version: int) -> int:
        with self.lock:
            return sum(1 for v in self.live.by_agent_version.values() if v >= version)

    def count_for(self, seconds: float, stop: threading.Event) -> tuple[list[Diagnosis], float]:
        """Diagnoses received during ``seconds`` (fewer if stopped) and the time measured."""
        with self.lock:
            self.live.window = []
            self.live.counting = True
        started = time.monotonic()
        stop.wait(seconds)
        with self.lock:
            self.live.counting = False
            return list(self.live.window), time.monotonic() - started


@dataclass(frozen=True)
class DemoSecrets:
    """The demo's broker accounts and the coordinator's signing key."""

    accounts: BrokerAccounts
    key_file: Path
    public_key: str
    key_id: str

    def broker_settings(self, broker: RunningBroker, user: str) -> BrokerSettings:
        """How ``user`` reaches ``broker``."""
        return BrokerSettings(
            host=broker.host,
            port=broker.port,
            username=user,
            password_file=self.accounts.password_path(user),
        )


def agent_ids(plan: DemoPlan) -> list[str]:
    """The agents' ids: ``m`` and the machine index (``faultfleet agent --machines``)."""
    return [f"m{index:02d}" for index in range(plan.machines)]


def prepare_secrets(plan: DemoPlan) -> DemoSecrets:
    """Fresh passwords for every account and a fresh signing key, in ``plan.out/secrets``."""
    folder = plan.out / "secrets"
    shutil.rmtree(folder, ignore_errors=True)
    accounts = create_accounts(folder, agent_ids(plan))
    key = SigningKey.generate()
    key.save(folder / "signing.key")
    return DemoSecrets(accounts, folder / "signing.key", key.public_text, key.key_id)


def write_configs(plan: DemoPlan, broker: RunningBroker, secrets: DemoSecrets) -> tuple[Path, Path]:
    """The coordinator's and the agents' TOML files for ``plan``, with their credentials.

    ``status.toml`` beside them lets ``faultfleet status --config`` read the demo's fleet with
    the read-only ``status`` account.
    """
    folder = plan.out / "config"
    folder.mkdir(parents=True, exist_ok=True)
    broker_table = f'[broker]\nhost = "{broker.host}"\nport = {broker.port}\n'
    passwords = secrets.accounts.password_path("{agent_id}").resolve()
    coordinator = folder / "coordinator.toml"
    coordinator.write_text(
        f'state_dir = "{(plan.out / "state" / "coordinator").resolve()}"\n\n'
        f"{broker_table}"
        f'username = "{COORDINATOR}"\n'
        f'password_file = "{secrets.accounts.password_path(COORDINATOR).resolve()}"\n\n'
        f'[signing]\nkey_file = "{secrets.key_file.resolve()}"\n\n'
        "[metrics]\nport = 0\n\n"
        "[run]\n"
        'strategy = "flacc"\nmodel = "compact"\n'
        f"strategy_options = {{ n_merge = {plan.n_merge}, n_sep = {plan.n_sep} }}\n"
        f"rounds = {plan.rounds}\nfraction = {plan.fraction}\nseed = {plan.seed}\n"
        f"min_agents = {plan.machines}\nmin_quorum = 1\nround_deadline_s = 120\n"
        f"eval_every = 10\npublish_every = 10\n\n"
        "[train]\n"
        f'optimizer = "adam"\nlearning_rate = {plan.learning_rate}\nepochs = {plan.epochs}\n'
        "batch_size = 32\n",
        encoding="utf-8",
    )
    agents = folder / "agents.toml"
    agents.write_text(
        'agent_id = "m"\n'
        f'device = "{plan.device}"\n'
        f'state_dir = "{(plan.out / "state" / "agents").resolve()}"\n\n'
        f"{broker_table}"
        'username = "{agent_id}"\n'
        f'password_file = "{passwords}"\n\n'
        f'[signing]\ntrusted_keys = ["{secrets.public_key}"]\n\n'
        "[metrics]\nport = 0\n\n"
        f'[source]\nkind = "simulated"\nseed = {plan.seed}\n'
        f"clients_per_group = {plan.clients_per_group}\n\n"
        f"[diagnosis]\ninterval_s = {plan.interval_s}\npublish = true\n",
        encoding="utf-8",
    )
    (folder / "status.toml").write_text(
        f"{broker_table}"
        f'username = "{STATUS}"\n'
        f'password_file = "{secrets.accounts.password_path(STATUS).resolve()}"\n',
        encoding="utf-8",
    )
    return coordinator, agents


@contextmanager
def _process(command: list[str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child process (its own process group) stopped with SIGTERM on the way out."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def machine_slices(machines: int, parts: int) -> list[str]:
    """``--machines`` ranges that share ``machines`` among ``parts`` processes."""
    size = -(-machines // parts)
    return [f"{s}-{min(s + size, machines) - 1}" for s in range(0, machines, size)]


@dataclass
class DemoOutcome:
    """What the demo measured."""

    summary: dict[str, object]
    live: list[Diagnosis]
    live_seconds: float
    wall_seconds: float
    broker_kind: str
    security: str = ""
    """What protects the broker and the models in this run."""


def run_fleet_demo(
    plan: DemoPlan,
    stop: threading.Event,
    on_round: Callable[[int, int], None] | None = None,
) -> DemoOutcome | None:
    """Run the demo; None when ``stop`` was set before it finished."""
    started = time.monotonic()
    # A fresh run: no checkpoint, and no retained model or assignment of an earlier run in
    # the broker's persistence file.
    for leftover in ("state", "broker"):
        shutil.rmtree(plan.out / leftover, ignore_errors=True)
    logs = plan.out / "logs"
    command = [sys.executable, "-m", "faultfleet_apps.cli.main"]
    secrets = prepare_secrets(plan)
    mosquitto = plan.broker != "amqtt" and find_mosquitto() is not None
    with ExitStack() as stack:
        broker = stack.enter_context(
            start_broker(
                prefer=plan.broker,  # type: ignore[arg-type]
                workdir=plan.out / "broker",
                extra_config=secrets.accounts.mosquitto_lines() if mosquitto else (),
            )
        )
        security = describe_security(broker, secrets)
        if broker.kind == "amqtt":
            logger.warning("%s", security)
        coordinator_toml, agents_toml = write_configs(plan, broker, secrets)
        monitor = FleetMonitor(secrets.broker_settings(broker, HISTORIAN))
        monitor.connection.start()
        stack.callback(monitor.connection.stop)
        # Agents first, coordinator last: on the way out the coordinator stops first, so it
        # never runs rounds against agents that are shutting down.
        # The agent processes share the cores: each trains with its share (thread_policy).
        threads = str(torch_threads(cores=usable_cores(), workers=plan.agent_processes))
        for index, machines in enumerate(machine_slices(plan.machines, plan.agent_processes)):
            agent = ["agent", "--config", str(agents_toml), "--machines", machines]
            stack.enter_context(
                _process(
                    [*command, *agent, "--threads", threads],
                    logs / f"agents-{index}.log",
                )
            )
        coordinator = stack.enter_context(
            _process(
                [*command, "coordinator", "--config", str(coordinator_toml), "--exit-when-done"],
                logs / "coordinator.log",
            )
        )
        last_round = 0
        while coordinator.poll() is None:
            if stop.wait(0.5):
                return None
            current = monitor.server_round()
            if current != last_round and on_round is not None:
                on_round(current, plan.rounds)
            last_round = current
        if coordinator.returncode != 0:
            raise RuntimeError(
                f"the coordinator exited with status {coordinator.returncode}; see "
                f"{logs / 'coordinator.log'}"
            )
        summary = load_summary(plan.out / "state" / "coordinator")
        if summary is None:
            raise RuntimeError("the coordinator left no summary.json")
        version = int(str(summary.get("model_version", 0)))
        deadline = time.monotonic() + 60
        while monitor.agents_on_version(version) < plan.machines and time.monotonic() < deadline:
            if stop.wait(0.5):
                return None
        live, seconds = monitor.count_for(plan.live_seconds, stop)
        if stop.is_set():
            return None
        wall = time.monotonic() - started
        return DemoOutcome(summary, live, seconds, wall, broker.kind, security)


def describe_security(broker: RunningBroker, secrets: DemoSecrets) -> str:
    """One line on what protects this demo's broker and models."""
    signed = f"models and assignments signed with key {secrets.key_id}"
    if broker.kind == "mosquitto":
        return (
            f"{len(secrets.accounts.users)} broker accounts with their own passwords "
            f"(password file by {secrets.accounts.writer}), the shipped ACL, no anonymous "
            f"access; {signed}"
        )
    return (
        "amqtt fallback: no logins and no ACL, any process on this host may publish (it "
        f"listens on 127.0.0.1 only); {signed}, so no forged model is loaded; install "
        "mosquitto for logins and the ACL"
    )


def live_accuracy(diagnoses: list[Diagnosis]) -> dict[str, tuple[float, int]]:
    """Per cluster: share of diagnoses equal to the true label, and how many had one."""
    hits: dict[str, int] = defaultdict(int)
    counts: Counter[str] = Counter()
    for d in diagnoses:
        if d.true_label is not None:
            counts[d.cluster_id] += 1
            hits[d.cluster_id] += int(d.class_id == d.true_label)
    return {c: (hits[c] / n, n) for c, n in counts.items()}
