"""The fleet demo: a broker, the coordinator and simulated agents as separate processes.

:func:`run_fleet_demo` starts an MQTT broker (Mosquitto when installed, the embedded amqtt
broker otherwise), writes the coordinator's and the agents' TOML files, starts
``faultfleet coordinator`` and ``faultfleet agent --machines`` processes exactly as a plant
would run them, follows the rounds through the coordinator's retained status, then starts
the machine held back (:mod:`faultfleet_apps.demo.late_joiner`) and waits until the
coordinator has placed it on a cluster and it diagnoses, then watches every agent diagnose
live windows with its cluster's ONNX model and reports what happened. Every process is
stopped on the way out, Ctrl-C included.

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
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from coordinator.adapters.model_registry import ModelRegistry
from coordinator.runtime.run_summary import load_summary
from faultfleet.wire.messages import Diagnosis
from faultfleet.wire.settings import BrokerSettings
from faultfleet.wire.signing import SigningKey
from faultfleet_apps.brokers.accounts import (
    COORDINATOR,
    HISTORIAN,
    STATUS,
    BrokerAccounts,
    create_accounts,
)
from faultfleet_apps.brokers.launch import RunningBroker, find_mosquitto, start_broker
from faultfleet_apps.demo.late_joiner import LateJoin, join_late
from faultfleet_apps.demo.monitor import FleetMonitor
from faultfleet_apps.thread_policy import torch_threads, usable_cores

logger = logging.getLogger(__name__)


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
    late_machines: int = 1
    """Machines held back until the first campaign ended, then started and served (the
    last ones); 0 starts every machine at once."""
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

    @property
    def founders(self) -> int:
        """Machines of the federation when it starts."""
        return self.machines - self.late_machines


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
        f"min_agents = {plan.founders}\nmin_quorum = 1\nround_deadline_s = 120\n"
        f"eval_every = 10\npublish_every = 10\n\n"
        "[models]\nrequest_poll_s = 1\n\n"
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
def child_process(
    command: list[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    stop_timeout_s: float = 30.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """A child process (its own process group, output to ``log_path``) stopped with SIGTERM
    on the way out, SIGKILL after ``stop_timeout_s``; ``env`` is added to this process's."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=environment, start_new_session=True
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=stop_timeout_s)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def _process(command: list[str], log_path: Path) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """A service of the demo fleet: one OpenMP thread unless told otherwise."""
    return child_process(command, log_path, env={"OMP_NUM_THREADS": "1"})


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
    late: list[LateJoin] = field(default_factory=list)
    """How each machine held back was served."""


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
    state_dir = plan.out / "state" / "coordinator"
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
        monitor.start()
        stack.callback(monitor.stop)
        # The agent processes share the cores: each trains with its share (thread_policy).
        threads = str(torch_threads(cores=usable_cores(), workers=plan.agent_processes))

        def start_agents(machines: str, name: str) -> None:
            agent = ["agent", "--config", str(agents_toml), "--machines", machines]
            stack.enter_context(
                _process([*command, *agent, "--threads", threads], logs / f"{name}.log")
            )

        # Agents first, coordinator last: on the way out the coordinator stops first, so it
        # never runs rounds against agents that are shutting down.
        for index, machines in enumerate(machine_slices(plan.founders, plan.agent_processes)):
            start_agents(machines, f"agents-{index}")
        coordinator = stack.enter_context(
            _process(
                [*command, "coordinator", "--config", str(coordinator_toml)],
                logs / "coordinator.log",
            )
        )
        last_round = 0
        while not monitor.campaign_ended():
            if coordinator.poll() is not None:
                raise RuntimeError(
                    f"the coordinator exited with status {coordinator.returncode}; see "
                    f"{logs / 'coordinator.log'}"
                )
            if stop.wait(0.5):
                return None
            current = monitor.server_round()
            if current != last_round and on_round is not None:
                on_round(current, plan.rounds)
            last_round = current
        ended_at = time.time()
        late: list[LateJoin] = []
        for index in range(plan.founders, plan.machines):
            joined = join_late(
                f"m{index:02d}",
                partial(start_agents, f"{index}-{index}", f"late-{index:02d}"),
                monitor,
                stop,
                campaign_ended_at=ended_at,
            )
            if joined is None:
                return None
            late.append(joined)
        expected = serving_versions(state_dir)
        deadline = time.monotonic() + 60
        while monitor.agents_serving(expected) < len(expected) and time.monotonic() < deadline:
            if stop.wait(0.5):
                return None
        live, seconds = monitor.count_for(plan.live_seconds, stop)
        if stop.is_set():
            return None
        summary = load_summary(state_dir)
        if summary is None:
            raise RuntimeError("the coordinator left no summary.json")
        wall = time.monotonic() - started
        return DemoOutcome(summary, live, seconds, wall, broker.kind, security, late)


def serving_versions(state_dir: Path) -> dict[str, int]:
    """Agent → the version of its cluster that serves it, from the model registry."""
    table = ModelRegistry(state_dir / "models").serving()
    return {
        agent: table.clusters[cid].version
        for agent, cid in table.agents.items()
        if cid in table.clusters
    }


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
