"""``faultfleet status``: which agents are online, offline or retired, and what they diagnose.

Reads the broker's retained messages with a read-only login (``--config``, see
``deploy/config/status.toml``) and prints a table, or with ``--json`` the status document
(docs/runtime.md). ``--watch [SECONDS]`` keeps the session open, follows the live
diagnoses too and prints the fleet again every SECONDS until Ctrl-C, which ends it with
exit status 0. A broker that cannot be reached or refuses the login or the subscriptions
is a :class:`~faultfleet_apps.fleet_status.reader.StatusError`, a user error: one line and
exit status 2; Ctrl-C before the first snapshot: 130 (both from ``cli.main``).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from coordinator.runtime.run_summary import load_summary
from faultfleet.clock import SYSTEM_CLOCK, Clock
from faultfleet.errors import UsageError
from faultfleet.wire.settings import load_settings
from faultfleet.wire.topics import Topics
from faultfleet_apps.fleet_status.reader import FleetReader
from faultfleet_apps.fleet_status.render import render_table
from faultfleet_apps.fleet_status.settings import StatusSettings
from faultfleet_apps.fleet_status.view import FleetView

DEFAULT_WATCH_S = 2.0
CLEAR_SCREEN = "\x1b[H\x1b[2J"


def add_status_command(commands: Any) -> None:
    """Register ``status``."""
    status = commands.add_parser(
        "status",
        help="show the fleet: agents online, offline or retired, their models and diagnoses",
        description=(
            "Read the coordinator's and the agents' retained messages from the broker "
            "(read-only) and show every agent's state, last seen, cluster, serving model "
            "version, last diagnosis and fault streak, and the coordinator's run, campaign "
            "and recent promotions. Settings: a TOML file with a [broker] table plus "
            "FAULTFLEET_STATUS_* overrides."
        ),
    )
    status.add_argument(
        "--config", type=Path, help="TOML file with the [broker] table (deploy/config/status.toml)"
    )
    status.add_argument("--json", action="store_true", help="print the status document as JSON")
    status.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=DEFAULT_WATCH_S,
        metavar="SECONDS",
        help=f"refresh every SECONDS (default {DEFAULT_WATCH_S:g}) until Ctrl-C",
    )
    status.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long to wait for the broker (default 10)",
    )
    status.add_argument(
        "--state-dir",
        type=Path,
        help="the coordinator's state_dir, when it is on this machine: its summary.json "
        "fills in the campaign and promotions if the broker has not got them",
    )
    status.set_defaults(handler=run_status)


def run_status(args: argparse.Namespace) -> int:
    """``faultfleet status``."""
    if args.watch is not None and args.watch <= 0:
        raise UsageError(f"--watch {args.watch:g}: give a refresh interval above 0 seconds")
    if args.timeout <= 0:
        raise UsageError(f"--timeout {args.timeout:g}: give a wait above 0 seconds")
    settings = load_settings(StatusSettings, args.config)
    summary = load_summary(args.state_dir) if args.state_dir is not None else None
    view = FleetView(Topics(settings.broker.topic_root), summary)
    reader = FleetReader(settings.broker, view, live=args.watch is not None)
    with reader:
        reader.start(args.timeout)
        reader.settle(args.timeout)
        if args.watch is None:
            show(reader, as_json=args.json, out=sys.stdout)
            return 0
        return watch(reader, interval_s=args.watch, as_json=args.json, out=sys.stdout)


def show(reader: FleetReader, *, as_json: bool, out: TextIO, clear: bool = False) -> None:
    """Print the fleet once: the table, or the JSON document on one line with ``as_json``."""
    snapshot = reader.view.snapshot(now=reader.clock.time(), broker=reader.broker)
    if as_json:
        out.write(json.dumps(snapshot, ensure_ascii=False) + "\n")
    else:
        out.write((CLEAR_SCREEN if clear else "") + render_table(snapshot) + "\n")
    out.flush()


def watch(
    reader: FleetReader,
    *,
    interval_s: float,
    as_json: bool,
    out: TextIO,
    clock: Clock = SYSTEM_CLOCK,
) -> int:
    """Print the fleet every ``interval_s`` seconds until Ctrl-C; returns 0 then.

    With ``as_json`` every refresh is one JSON line (JSON Lines); the table clears the
    terminal first when ``out`` is one.
    """
    clear = not as_json and out.isatty()
    never = threading.Event()
    try:
        while True:
            show(reader, as_json=as_json, out=out, clear=clear)
            clock.wait(never, interval_s)
    except KeyboardInterrupt:
        return 0
