"""``faultfleet campaign``: the coordinator's training campaigns, read and steered offline.

``status`` prints the running campaign (or the last) with its trigger, round x of y, the
next scheduled one and the newly labelled windows, then every campaign so far; ``start``
and ``stop`` leave a request in ``STATE_DIR/campaigns/requests/`` that the coordinator
applies within ``[models] request_poll_s`` between campaigns, or before its next round
(at its next start if it is not running), as ``faultfleet models pin`` does with the model
registry. None of them needs the broker. See docs/runtime.md, "Campaigns".
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from coordinator.adapters.campaign_store import CampaignRequest, CampaignState, CampaignStore
from coordinator.runtime.run_summary import load_summary
from faultfleet.errors import UsageError
from faultfleet_apps.fleet_status.render import campaign_text, format_table


def add_campaign_command(commands: Any) -> None:
    """Register ``campaign status|start|stop``."""
    campaign = commands.add_parser(
        "campaign",
        help="show, start or stop the training campaigns of a coordinator",
        description=(
            "The coordinator trains in campaigns: the first at its first start, the next on "
            "its schedule, when the agents report enough newly labelled windows, or when "
            "asked here. These commands work on the coordinator's state directory alone."
        ),
    )
    actions = campaign.add_subparsers(dest="campaign_command", metavar="ACTION", required=True)
    specs = [
        ("status", "the running or last campaign, and every campaign so far", show_campaigns),
        ("start", "start a campaign (after the running one, if one runs)", start_campaign),
        ("stop", "end the running campaign before its next round", stop_campaign),
    ]
    for name, help_text, handler in specs:
        action = actions.add_parser(name, help=help_text, description=help_text)
        action.add_argument(
            "--state-dir", type=Path, required=True, help="the coordinator's state_dir"
        )
        action.set_defaults(handler=handler)
        if name == "status":
            action.add_argument("--json", action="store_true", help="print JSON instead of text")
        if name == "start":
            action.add_argument(
                "--rounds",
                type=_positive,
                metavar="N",
                help="rounds of the campaign (default: [campaigns] rounds, else run.rounds)",
            )
            action.add_argument(
                "--recluster",
                action="store_true",
                help="start the strategy afresh (new models, clusters learnt again) instead "
                "of warm-starting from the current models and clusters",
            )


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of rounds >= 1")
    return value


def _store(state_dir: Path) -> tuple[CampaignStore, CampaignState]:
    store = CampaignStore(state_dir / "campaigns")
    state = store.load()
    if state is None:
        raise UsageError(
            f"{state_dir} holds no campaigns ({store.state_path} is missing); give the "
            "coordinator's state_dir, once the coordinator has started there"
        )
    return store, state


def show_campaigns(args: argparse.Namespace) -> int:
    """Print the campaign state."""
    store, state = _store(args.state_dir)
    summary = load_summary(args.state_dir) or {}
    current = summary.get("campaign")
    pending = {a: r.model_dump(mode="json") for a, r in store.pending().items()}
    document = {
        "campaign": current,
        "server_round": summary.get("server_round"),
        "new_labelled_windows": state.new_labelled_windows,
        "pending": pending,
        "campaigns": [
            {"campaign_id": f"c{r.number}", **r.model_dump(mode="json")} for r in state.campaigns
        ],
    }
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    print("campaign: " + campaign_text(current, time.time()))
    for action, request in pending.items():
        print(f"pending: {action} requested (applied by the coordinator) {request}")
    rows = [
        [
            f"c{r.number}",
            r.trigger.value,
            r.status.value,
            f"{r.start_round + 1}-{r.end_round}",
            time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started_at)),
            "yes" if r.recluster else "",
        ]
        for r in state.campaigns
    ]
    print()
    print(format_table(["campaign", "trigger", "status", "rounds", "started", "recluster"], rows))
    return 0


def start_campaign(args: argparse.Namespace) -> int:
    """Leave a start request for the coordinator."""
    store, state = _store(args.state_dir)
    request = CampaignRequest(
        action="start", rounds=args.rounds, recluster=args.recluster, requested_at=time.time()
    )
    path = store.request(request)
    last = state.last
    after = (
        f"; campaign {last.campaign_id} runs, so the new one starts after it"
        if last is not None and last.running
        else ""
    )
    print(
        f"campaign start requested ({path}){after}; the coordinator starts it within "
        "[models] request_poll_s"
    )
    return 0


def stop_campaign(args: argparse.Namespace) -> int:
    """Leave a stop request for the coordinator."""
    store, state = _store(args.state_dir)
    last = state.last
    if last is None or not last.running:
        raise UsageError(
            "no campaign runs in " + str(args.state_dir) + "; `faultfleet campaign status "
            "--state-dir DIR` shows the last one"
        )
    path = store.request(CampaignRequest(action="stop", requested_at=time.time()))
    print(
        f"stop of campaign {last.campaign_id} requested ({path}); it ends before its next "
        "round, and the models of its last round are published if they were not"
    )
    return 0
