"""``faultfleet label``: label an agent's diagnosed live windows after a maintenance finding.

Appends a time range and its label to the agent's labels file (``[labels] file``, by
default ``state_dir/labels.csv``; :mod:`edge_agent.labels_file`). The agent reads the file
every ``[labels] rescan_s``, takes the windows it diagnosed in that range from the ones it
kept (``[labels] keep_windows_bytes``), reports the new labelled-window count, and trains on
them from the next campaign. Works on the agent's host, running or not; no broker.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from edge_agent.labels_file import LabelRange, append_label, parse_time, read_labels
from edge_agent.settings import AgentSettings
from faultfleet.wire.settings import load_settings


def add_label_command(commands: Any) -> None:
    """Register ``label``."""
    label = commands.add_parser(
        "label",
        help="label the live windows an agent diagnosed in a time range (a maintenance finding)",
        description=(
            "Add FROM, TO and LABEL to the agent's labels file; the windows the agent "
            "diagnosed in that range join its training data at the next campaign. Times: "
            "ISO 8601 (2026-05-04T08:00, local time, or with an offset) or Unix seconds."
        ),
    )
    label.add_argument("--config", type=Path, required=True, help="the agent's TOML file")
    label.add_argument("--from", dest="start", required=True, metavar="TIME", help="start")
    label.add_argument("--to", dest="end", required=True, metavar="TIME", help="end (excluded)")
    label.add_argument("--label", type=int, required=True, metavar="N", help="class index")
    label.add_argument("--note", default="", help="a note kept in the file (e.g. a work order)")
    label.set_defaults(handler=run_label)


def run_label(args: argparse.Namespace) -> int:
    """``faultfleet label``."""
    settings = load_settings(AgentSettings, args.config)
    entry = LabelRange(parse_time(args.start), parse_time(args.end), args.label, args.note)
    path = settings.labels_file
    read_labels(path)  # a file people broke by hand fails here, naming the line
    append_label(path, entry)
    print(
        f"windows of {settings.agent_id} from {args.start} to {args.end} labelled {args.label} "
        f"in {path}; the agent reads it within {settings.labels.rescan_s:g} s and trains on them "
        "from the next campaign"
    )
    if settings.labels.keep_windows_bytes == 0:
        print(
            "faultfleet: warning: [labels] keep_windows_bytes = 0: the agent keeps no diagnosed "
            "windows, so this range labels nothing until it does",
            file=sys.stderr,
        )
    return 0
