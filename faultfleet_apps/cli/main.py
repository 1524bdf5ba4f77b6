"""The ``faultfleet`` command line: the composition root that wires settings to the packages.

Subcommands register themselves through :func:`build_parser`; each handler returns the
process exit status. :func:`main` turns what a handler raises into one line on stderr and
an exit status (the error classes are drawn in :mod:`faultfleet.errors`):

====  ==========================================================================
0     done
1     the command ran and reports a failure (an agent stopped on an error, an agent
      that could not be retired)
2     a user error: a bad option, value, file or setting (argparse's errors included),
      printed as ``faultfleet: error: …``
70    an internal error, a bug in faultfleet (``EX_SOFTWARE`` of sysexits.h): the line
      names the exception; ``faultfleet --debug …`` prints the traceback
130   interrupted by Ctrl-C (128 + SIGINT); the services (``coordinator``, ``agent``)
      instead stop cleanly on SIGINT or SIGTERM and exit 0
====  ==========================================================================

No traceback is printed without ``--debug``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from faultfleet import __version__
from faultfleet.errors import UsageError

logger = logging.getLogger(__name__)

REGISTRATIONS = (
    ("faultfleet_apps.cli.signals", "add_signals_commands"),
    ("faultfleet_apps.cli.sim", "add_sim_command"),
    ("faultfleet_apps.cli.bench", "add_bench_command"),
    ("faultfleet_apps.cli.demo", "add_demo_command"),
    ("faultfleet_apps.cli.runtime", "add_runtime_commands"),
    ("faultfleet_apps.cli.ingest", "add_ingest_command"),
    ("faultfleet_apps.cli.deploy", "add_deploy_command"),
    ("faultfleet_apps.cli.keys", "add_keys_command"),
    ("faultfleet_apps.cli.models", "add_models_command"),
    ("faultfleet_apps.cli.campaigns", "add_campaign_command"),
    ("faultfleet_apps.cli.labels", "add_label_command"),
    ("faultfleet_apps.cli.status", "add_status_command"),
)
"""The modules that register subcommands, and their registering functions, in order."""

SERVICE_COMMANDS = {
    "agent": "faultfleet_apps.cli.runtime",
    "coordinator": "faultfleet_apps.cli.runtime",
    "ingest-worker": "faultfleet_apps.cli.ingest",
}
"""Commands whose process registers only the commands of the module that registers them
(see :func:`main`), and that module."""

USAGE_ERROR = 2
INTERNAL_ERROR = 70
INTERRUPTED = 130


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser with every subcommand; given one of :data:`SERVICE_COMMANDS`,
    with only the commands of the module that registers it (the same subparser)."""
    parser = argparse.ArgumentParser(
        prog="faultfleet",
        description=(
            "Clustered federated learning for machine fault diagnosis: simulate and inspect "
            "vibration signals, build federations of machines, run federated strategies."
        ),
        epilog=(
            "Exit status: 0 done, 1 a failure the command reports, 2 a user error, 70 an "
            "internal error (a bug in faultfleet), 130 interrupted."
        ),
    )
    parser.add_argument("--version", action="version", version=f"faultfleet {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)"
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="print the full traceback of an error (give it before the command)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    registrations = (
        [r for r in REGISTRATIONS if r[0] == SERVICE_COMMANDS[command]]
        if command in SERVICE_COMMANDS
        else REGISTRATIONS
    )
    for module, function in registrations:
        register: Callable[[Any], None] = getattr(importlib.import_module(module), function)
        register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (also for ``--help`` and bad options).

    ``faultfleet agent``, ``faultfleet coordinator`` and ``faultfleet ingest-worker`` build
    a parser of their own module's commands only: the other commands' modules import the
    simulator, the image benchmarks and torch to describe their options, which a gateway's
    agent, whose idle memory counts, does not need (it loads torch for its first task only),
    nor does an ingest worker (never).
    """
    given = sys.argv[1:] if argv is None else list(argv)
    command = next((word for word in given if not word.startswith("-")), None)
    parser = build_parser(command if command in SERVICE_COMMANDS else None)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version, or argparse's one-line usage error
        code = exit_.code
        return 0 if code is None else code if isinstance(code, int) else USAGE_ERROR
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        status: int = args.handler(args)
    except KeyboardInterrupt as interrupt:
        _report(args.debug, f"faultfleet: {str(interrupt) or 'interrupted'}")
        return INTERRUPTED
    except UsageError as error:
        _report(args.debug, f"faultfleet: error: {error}")
        return USAGE_ERROR
    except Exception as error:
        advice = (
            "please report it with the traceback above"
            if args.debug
            else "run the command again as `faultfleet --debug ...` to see the traceback, "
            "and please report it"
        )
        _report(
            args.debug,
            f"faultfleet: internal error (a bug in faultfleet): {type(error).__name__}: "
            f"{error}; {advice}",
        )
        return INTERNAL_ERROR
    return status


def _report(debug: bool, line: str) -> None:
    """``line`` on stderr, after the traceback of the error being handled with ``debug``."""
    if debug:
        traceback.print_exc(file=sys.stderr)
    print(line, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
