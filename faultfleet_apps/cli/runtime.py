"""``faultfleet coordinator`` and ``faultfleet agent``: the two long-running services.

Both read a TOML file (``--config``) with environment overrides, serve Prometheus metrics
when ``[metrics] port`` is set, and stop cleanly on SIGTERM (systemd) or Ctrl-C: the
coordinator finishes its state write, agents publish an ``offline`` status.

This module only registers the two commands; each runs from its own module, imported when
the command runs (:mod:`faultfleet_apps.cli.lazy`): ``faultfleet agent`` loads neither the
coordinator nor scikit-learn, and torch only for its first task
(:mod:`faultfleet_apps.cli.agent_run`).
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from faultfleet.errors import UsageError
from faultfleet_apps.cli.lazy import lazy_handler
from faultfleet_apps.cli.numbers import NON_NEGATIVE_NUMBER, POSITIVE
from faultfleet_apps.malloc_policy import AGENT_TRIM_INTERVAL_S

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
    coordinator.set_defaults(
        handler=lazy_handler("faultfleet_apps.cli.coordinator_run", "run_coordinator")
    )
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
            "one at a time (default: OMP_NUM_THREADS, else the cores this process may use, "
            "and one for a model of at most 1,000,000 parameters; give each agent process "
            "its share when a host runs several)"
        ),
    )
    agent.add_argument(
        "--malloc-trim-s",
        type=NON_NEGATIVE_NUMBER,
        default=AGENT_TRIM_INTERVAL_S,
        metavar="SECONDS",
        help=(
            "hand the memory glibc keeps free back to the system (malloc_trim) every "
            f"SECONDS; 0 never (default: {AGENT_TRIM_INTERVAL_S:g})"
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
    agent.set_defaults(handler=lazy_handler("faultfleet_apps.cli.agent_run", "run_agent"))


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


def set_verbosity(verbose: int) -> None:
    """The root logger's level: INFO, DEBUG from ``-vv``."""
    logging.getLogger().setLevel(logging.INFO if verbose < 2 else logging.DEBUG)


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
