"""Subcommand handlers imported when their command runs, not when the parser is built.

``faultfleet`` builds one parser with every subcommand, so every command module is imported
by every command. A module that registers a command keeps its heavy imports (the simulator,
the image benchmarks, tqdm, matplotlib) in a separate ``*_run`` module and registers
:func:`lazy_handler` instead: ``faultfleet agent`` on a gateway then loads neither the
simulator nor the extras it lacks, and ``faultfleet sim`` on a gateway without the ``sim``
extra stops with how to install it.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable

from faultfleet.errors import UsageError

EXTRAS = {"matplotlib": "sim", "tqdm": "sim", "amqtt": "demo"}
"""Optional packages, by the extra that installs them (pyproject.toml)."""

Handler = Callable[[argparse.Namespace], int]


def lazy_handler(module: str, function: str) -> Handler:
    """A handler that imports ``module`` and calls its ``function`` when the command runs.

    Raises
    ------
    UsageError
        The module needs an optional package this installation lacks (the message names the
        extra that installs it).
    """

    def run(args: argparse.Namespace) -> int:
        try:
            loaded = importlib.import_module(module)
        except ModuleNotFoundError as missing:
            top = (missing.name or "").partition(".")[0]
            if top not in EXTRAS:
                raise
            raise UsageError(
                f"this command needs {top}, which this installation lacks; install it with: "
                f"pip install 'faultfleet[{EXTRAS[top]}]'"
            ) from missing
        handler: Handler = getattr(loaded, function)
        return handler(args)

    run.__name__ = function
    return run
