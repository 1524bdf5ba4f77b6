"""Running the services in tests: in threads of the test process, or as CLI processes.

In-process services are wired as ``faultfleet coordinator`` and ``faultfleet agent
--machines`` wire them; :func:`start_cli` runs the real command line for tests that kill
a process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pydantic import TypeAdapter

from coordinator.runtime.run_summary import RunSummary
from coordinator.runtime.service import CoordinatorService
from coordinator.runtime.settings import CoordinatorSettings, RunSettings, TrainSettings
from edge_agent.compute_turns import ComputeTurns
from edge_agent.metrics import AgentMetrics
from edge_agent.service import AgentService
from edge_agent.settings import AgentSettings, DiagnosisSettings, SigningSettings, SourceSettings
from faultfleet.clock import SYSTEM_CLOCK, Clock
from faultfleet.wire.codec import parse_envelope
from faultfleet.wire.messages import SignedMessage
from faultfleet.wire.settings import BrokerSettings, MetricsSettings
from faultfleet.wire.signing import SigningKey, TrustedKeys
from faultfleet_apps.cli.agent_run import build_source

MessageT = TypeVar("MessageT")
SIGNING_KEY = SigningKey.generate()
"""The coordinators' key in these tests; every agent trusts it."""
TRUSTED = SigningSettings(trusted_keys=(SIGNING_KEY.public_text,))


def open_signed(adapter: TypeAdapter[MessageT], data: dict[str, Any] | bytes) -> MessageT:
    """The message inside a signed envelope, verified against :data:`SIGNING_KEY`."""
    signed = parse_envelope(TypeAdapter(SignedMessage), data)
    return parse_envelope(adapter, TrustedKeys([SIGNING_KEY.public_text]).verify(signed))


def install_signing_key(state_dir: Path) -> Path:
    """Place :data:`SIGNING_KEY` where a coordinator with ``state_dir`` looks for its key."""
    path = state_dir / "signing.key"
    if not path.exists():
        SIGNING_KEY.save(path)
    return path


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll ``predicate`` every 10 ms; the monotonic time it held, AssertionError after timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = time.monotonic()
        if predicate():
            return now
        if now > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.01)


def coordinator_settings(
    broker: BrokerSettings, state_dir: Path, **run: Any
) -> CoordinatorSettings:
    """Coordinator settings for a quick run: one epoch, no metrics server, ``run`` overrides.

    The round deadline is an upper bound no busy machine reaches: these rounds end when
    every agent answered. Tests of the deadline itself move an injected clock instead.
    The coordinator signs with :data:`SIGNING_KEY` (placed in ``state_dir``).
    """
    install_signing_key(state_dir)
    defaults: dict[str, Any] = {
        "strategy": "fedavg",
        "rounds": 2,
        "fraction": 1.0,
        "min_agents": 2,
        "round_deadline_s": 600.0,
        "retry_wait_s": 0.0,
        "eval_every": 100,
        "publish_every": 100,
    }
    return CoordinatorSettings(
        state_dir=state_dir,
        broker=broker,
        metrics=MetricsSettings(port=0),
        run=RunSettings(**(defaults | run)),
        train=TrainSettings(epochs=1),
    )


def sample_value(registry: Any, name: str, labels: Mapping[str, str] | None = None) -> float:
    """A metric's current value (0 when the series does not exist)."""
    value = registry.get_sample_value(name, dict(labels or {}))
    return 0.0 if value is None else float(value)


@contextmanager
def running_agents(
    broker: BrokerSettings,
    state_dir: Path,
    machines: Sequence[int],
    *,
    clients_per_group: int = 4,
    windows_per_client: tuple[int, int] = (40, 60),
    interval_s: float = 0.05,
    clock: Clock = SYSTEM_CLOCK,
    adjust: Callable[[AgentSettings], AgentSettings] | None = None,
) -> Iterator[list[AgentService]]:
    """Simulated machines as agents ``m00``, ``m01``, … in threads of this process.

    Built the way ``faultfleet agent --machines`` builds them: one source per machine,
    shared metrics and one compute lock; ``clock`` is every agent's; ``adjust`` may change
    each agent's settings. Stopped (clean ``offline`` status) on exit.
    """
    sources_settings = SourceSettings(
        machine_index=0, clients_per_group=clients_per_group, windows_per_client=windows_per_client
    )
    configs = [
        AgentSettings(
            agent_id=f"m{index:02d}",
            device="cpu",
            state_dir=state_dir / f"m{index:02d}",
            broker=broker,
            metrics=MetricsSettings(port=0),
            source=sources_settings.model_copy(update={"machine_index": index}),
            diagnosis=DiagnosisSettings(interval_s=interval_s),
            signing=TRUSTED,
        )
        for index in machines
    ]
    if adjust is not None:
        configs = [adjust(config) for config in configs]
    sources = [build_source(c.source, c.diagnosis.interval_s, ()) for c in configs]
    metrics = AgentMetrics(class_names=sources[0].class_names)
    compute_lock = ComputeTurns()
    services = [
        AgentService(c, s, metrics=metrics, compute_lock=compute_lock, clock=clock)
        for c, s in zip(configs, sources, strict=True)
    ]
    stop = threading.Event()
    threads = [threading.Thread(target=a.run, args=(stop,), name=a.agent_id) for a in services]
    for thread in threads:
        thread.start()
    try:
        yield services
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)


class CoordinatorThread:
    """``service.run(stop, exit_when_done=True)`` in a thread; :meth:`result` waits for it."""

    def __init__(self, service: CoordinatorService) -> None:
        self.service = service
        self.stop = threading.Event()
        self.summary: RunSummary | None = None
        self.error: Exception | None = None
        self._thread = threading.Thread(target=self._run, name="coordinator")
        self._thread.start()

    def _run(self) -> None:
        try:
            self.summary = self.service.run(self.stop, exit_when_done=True)
        except Exception as error:  # re-raised in the test thread by result()
            self.error = error

    def result(self, timeout_s: float) -> RunSummary:
        """The run's summary once it finished; AssertionError after ``timeout_s`` seconds."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self.stop.set()
            self._thread.join(30)
            raise AssertionError(f"the coordinator did not finish within {timeout_s:g} s")
        if self.error is not None:
            raise self.error
        assert self.summary is not None
        return self.summary

    def close(self) -> None:
        """Stop the coordinator if it still runs (a failed test)."""
        self.stop.set()
        self._thread.join(30)


REPO_ROOT = Path(__file__).resolve().parents[2]


def write_toml(path: Path, settings: Mapping[str, Any]) -> Path:
    """Write ``settings`` (scalars, lists and one level of tables) as a TOML file."""

    def value(item: Any) -> str:
        return json.dumps(str(item) if isinstance(item, Path) else item)

    lines = [
        f"{key} = {value(item)}" for key, item in settings.items() if not isinstance(item, Mapping)
    ]
    for key, table in settings.items():
        if isinstance(table, Mapping):
            lines.append(f"[{key}]")
            lines += [f"{name} = {value(item)}" for name, item in table.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def broker_table(settings: BrokerSettings) -> dict[str, Any]:
    """The ``[broker]`` table of a service's TOML file."""
    return {"host": settings.host, "port": settings.port}


CLI_WITH_CTRL_C = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('faultfleet_apps.cli.main', run_name='__main__', alter_sys=True)"
)
"""``python -m faultfleet_apps.cli.main`` with Ctrl-C (SIGINT) as a terminal gives it: a
test run started in the background ignores SIGINT, and so would every process it starts."""


def start_cli(arguments: Sequence[str], log_path: Path) -> subprocess.Popen[bytes]:
    """``python -m faultfleet_apps.cli.main ARGUMENTS`` with its output in ``log_path``,
    SIGINT raising KeyboardInterrupt in it whatever the test run ignores."""
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-c", CLI_WITH_CTRL_C, *arguments],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``process`` (if it still runs) and reap it."""
    if process.poll() is None:
        process.kill()
    process.wait(timeout=30)
