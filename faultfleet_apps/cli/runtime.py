"""``faultfleet coordinator`` and ``faultfleet agent``: the two long-running services.

Both read a TOML file (``--config``) with environment overrides, serve Prometheus metrics
when ``[metrics] port`` is set, and stop cleanly on SIGTERM (systemd) or Ctrl-C: the
coordinator finishes its state write, agents publish an ``offline`` status.
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.runtime.service import CoordinatorService
from coordinator.runtime.settings import CoordinatorSettings
from edge_agent.compute_turns import ComputeTurns
from edge_agent.incoming import IncomingRefusal
from edge_agent.metrics import AgentMetrics
from edge_agent.retire import RetireError, retire_agent
from edge_agent.service import AgentService
from edge_agent.settings import AgentSettings, SourceSettings
from edge_agent.source_types import WindowSource
from edge_agent.sources import LiveSensorSource, RecordingFolderSource, SimulatedMachineSource
from faultfleet.errors import UsageError
from faultfleet.metrics_http import serve_metrics
from faultfleet.wire.settings import load_settings
from faultfleet_apps.cli.arguments import POSITIVE
from faultfleet_apps.thread_policy import apply_thread_policy
from signal_pipeline.scenarios import MIXED_FAULT_CLASS_NAMES

logger = logging.getLogger(__name__)


def add_runtime_commands(commands: Any) -> None:
    """Register ``coordinator`` and ``agent``."""
    coordinator = commands.add_parser(
        "coordinator",
        help="run the coordinator service (federated rounds over MQTT)",
        description=(
            "Drive federated rounds over MQTT in training campaigns, cluster the agents and "
            "publish one ONNX model per cluster; serve the models between campaigns. Settings: "
            "a TOML file plus FAULTFLEET_COORDINATOR_* overrides."
        ),
    )
    coordinator.add_argument("--config", type=Path, required=True, help="coordinator TOML file")
    coordinator.add_argument(
        "--exit-when-done",
        action="store_true",
        help=(
            "exit once no campaign runs (after the first campaign at a first start) instead "
            "of serving the models and training further campaigns until stopped"
        ),
    )
    coordinator.set_defaults(handler=run_coordinator)
    agent = commands.add_parser(
        "agent",
        help="run an edge agent (local training, live diagnosis with ONNX Runtime)",
        description=(
            "Train locally when the coordinator asks, receive the cluster's ONNX model and "
            "diagnose every live window. Settings: a TOML file plus FAULTFLEET_AGENT_* "
            "overrides."
        ),
    )
    agent.add_argument("--config", type=Path, required=True, help="agent TOML file")
    agent.add_argument(
        "--machines",
        type=_machine_range,
        metavar="FIRST-LAST",
        help=(
            "lab use: run one agent per simulated machine FIRST..LAST in this process; agent "
            "ids are agent_id followed by the two-digit machine index"
        ),
    )
    agent.add_argument(
        "--threads",
        type=POSITIVE,
        help=(
            "torch threads for training, shared by the agents of this process, which train "
            "one at a time (default: OMP_NUM_THREADS, else the cores this process may use; "
            "give each agent process its share when a host runs several)"
        ),
    )
    agent.add_argument(
        "--retire",
        action="store_true",
        help=(
            "take the (stopped) agent out of service for good: publish its retired status, "
            "so the coordinator removes it from the federation, and exit"
        ),
    )
    agent.set_defaults(handler=run_agent)


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGTERM or SIGINT (also when the shell started us ignoring SIGINT)."""
    stop = threading.Event()

    def handle(signum: int, frame: object) -> None:
        logger.info("received %s; stopping", signal.Signals(signum).name)
        stop.set()

    previous = {s: signal.signal(s, handle) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _quiet_libraries(verbose: int) -> None:
    logging.getLogger().setLevel(logging.INFO if verbose < 2 else logging.DEBUG)


def run_coordinator(args: argparse.Namespace) -> int:
    """``faultfleet coordinator``."""
    settings = load_settings(CoordinatorSettings, args.config)
    _quiet_libraries(args.verbose)
    metrics = CoordinatorMetrics()
    server = serve_metrics(settings.metrics, metrics.registry)
    try:
        with stop_on_signals() as stop:
            service = CoordinatorService(settings, metrics)
            summary = service.run(stop, exit_when_done=args.exit_when_done)
    finally:
        if server is not None:
            server.stop()
    if summary is not None:
        logger.info("stopped at round %d of %d", summary.server_round, summary.rounds)
    return 0


def parse_machines(text: str) -> range:
    """``"0-23"`` → range(0, 24); a single ``"5"`` → range(5, 6)."""
    match = re.fullmatch(r"(\d+)(?:-(\d+))?", text.strip())
    if match is None or (match.group(2) is not None and int(match.group(2)) < int(match.group(1))):
        raise UsageError(f"--machines {text!r}: write FIRST-LAST with FIRST <= LAST, e.g. 0-23")
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) is not None else first
    return range(first, last + 1)


def _machine_range(text: str) -> range:
    """``--machines`` checked when the line is parsed."""
    try:
        return parse_machines(text)
    except UsageError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("--machines ")) from None


def build_source(
    source: SourceSettings,
    interval_s: float,
    class_names: tuple[str, ...],
    on_refused: Callable[[IncomingRefusal], None] | None = None,
) -> WindowSource:
    """The window source the settings describe; ``on_refused`` counts the incoming files a
    recordings folder refuses."""
    if source.kind == "simulated":
        return SimulatedMachineSource(
            scenario=source.scenario,
            seed=source.seed,
            machine_index=source.machine_index,
            interval_s=interval_s,
            snr_db=source.snr_db,
            clients_per_group=source.clients_per_group,
            windows_per_client=source.windows_per_client,
        )
    if source.kind == "recordings":
        assert source.path is not None
        return RecordingFolderSource(
            source.path,
            window_length=source.window_length,
            interval_s=interval_s,
            poll_s=source.poll_s,
            manifest_outside_folder=source.manifest_outside_folder,
            max_incoming_bytes=source.max_incoming_bytes,
            on_refused=on_refused,
        )
    return LiveSensorSource(
        (1, source.window_length), class_names or MIXED_FAULT_CLASS_NAMES, fs_hz=source.fs_hz
    )


def _retire(settings: AgentSettings, machines: range | None) -> int:
    """``faultfleet agent --retire``: one agent, or each of ``--machines``."""
    ids = [settings.agent_id] if machines is None else [machine_id(settings, i) for i in machines]
    failed = []
    for agent_id in ids:
        try:
            retire_agent(settings.model_copy(update={"agent_id": agent_id}))
        except RetireError as error:
            print(f"faultfleet: error: {error}", file=sys.stderr)
            failed.append(agent_id)
            continue
        print(f"agent {agent_id} retired")
    if failed:
        print(f"faultfleet: error: not retired: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def machine_id(settings: AgentSettings, index: int) -> str:
    """Agent id of simulated machine ``index`` under ``--machines``."""
    return f"{settings.agent_id}{index:02d}"


def run_agent(args: argparse.Namespace) -> int:
    """``faultfleet agent``."""
    settings = load_settings(AgentSettings, args.config)
    _quiet_libraries(args.verbose)
    machines: range | None = args.machines
    if machines is not None and settings.source.kind != "simulated":
        raise UsageError("--machines runs simulated machines; set [source] kind = 'simulated'")
    if args.retire:
        return _retire(settings, machines)
    configs = (
        [settings]
        if machines is None
        else [
            settings.model_copy(
                update={
                    "agent_id": machine_id(settings, index),
                    "state_dir": settings.state_dir / machine_id(settings, index),
                    "source": settings.source.model_copy(update={"machine_index": index}),
                }
            )
            for index in machines
        ]
    )
    apply_thread_policy(args.threads)
    compute_lock = ComputeTurns()
    metrics = AgentMetrics()
    sources = [
        build_source(c.source, c.diagnosis.interval_s, (), metrics.incoming_refused)
        for c in configs
    ]
    metrics.set_class_names(sources[0].class_names)
    server = serve_metrics(settings.metrics, metrics.registry)
    failed: list[str] = []
    try:
        with stop_on_signals() as stop:
            services = [
                AgentService(c, s, metrics=metrics, compute_lock=compute_lock)
                for c, s in zip(configs, sources, strict=True)
            ]

            def serve(agent: AgentService) -> None:
                try:
                    agent.run(stop)
                except Exception:
                    logger.exception("agent %s stopped on an error", agent.agent_id)
                    failed.append(agent.agent_id)
                    stop.set()

            threads = [threading.Thread(target=serve, args=(a,), name=a.agent_id) for a in services]
            for thread in threads:
                thread.start()
            logger.info("%d agent(s) running; Ctrl-C stops them", len(services))
            while any(t.is_alive() for t in threads):
                stop.wait(0.5)
                if stop.is_set():
                    for thread in threads:
                        thread.join()
    finally:
        if server is not None:
            server.stop()
    if failed:
        print(
            f"faultfleet: error: agent(s) {', '.join(failed)} stopped on an error", file=sys.stderr
        )
        return 1
    return 0
