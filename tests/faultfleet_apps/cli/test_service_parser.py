"""``faultfleet agent``, ``coordinator`` and ``ingest-worker`` parse with their own module's
commands only; the agent's command line loads neither torch, the coordinator nor the
simulator's extras, and the ingest worker's neither torch, scikit-learn, SciPy nor the
strategies."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from faultfleet_apps.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[3]

AGENT_COMMAND_LINE = """
import json, sys
from faultfleet_apps.cli.main import build_parser
args = build_parser("agent").parse_args(["agent", "--config", "a.toml", "--machines", "0-3"])
import faultfleet_apps.cli.agent_run
heavy = ("torch", "sklearn", "coordinator", "matplotlib", "tqdm", "faultfleet_apps.simulation")
print(json.dumps([name for name in heavy if name in sys.modules]))
"""

INGEST_WORKER_COMMAND_LINE = """
import json, sys
from faultfleet_apps.cli.main import build_parser
args = build_parser("ingest-worker").parse_args(["ingest-worker", "--config", "w.toml"])
import coordinator.runtime.ingest_service
heavy = ("torch", "sklearn", "scipy", "matplotlib", "tqdm", "faultfleet_apps.simulation",
         "coordinator.strategies.registry")
print(json.dumps([name for name in heavy if name in sys.modules]))
"""


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    chosen: argparse.ArgumentParser = commands.choices[command]
    return chosen


@pytest.mark.parametrize("command", ["agent", "coordinator", "ingest-worker"])
def test_the_service_parser_is_the_full_parsers_subcommand(command: str) -> None:
    full, lean = _subparser(build_parser(), command), _subparser(build_parser(command), command)

    assert lean.format_help() == full.format_help()


@pytest.mark.parametrize(
    "command_line",
    [AGENT_COMMAND_LINE, INGEST_WORKER_COMMAND_LINE],
    ids=["agent", "ingest-worker"],
)
def test_the_service_command_lines_load_none_of_what_they_do_not_use(command_line: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", command_line],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )

    assert json.loads(result.stdout) == []


def test_the_agents_trim_interval_defaults_to_a_minute_and_refuses_a_negative() -> None:
    parser = build_parser("agent")

    default = parser.parse_args(["agent", "--config", "a.toml"])
    off = parser.parse_args(["agent", "--config", "a.toml", "--malloc-trim-s", "0"])

    assert (default.malloc_trim_s, off.malloc_trim_s) == (60.0, 0.0)
    with pytest.raises(SystemExit):
        parser.parse_args(["agent", "--config", "a.toml", "--malloc-trim-s", "-1"])
