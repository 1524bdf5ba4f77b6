"""``faultfleet models``: the coordinator's model registry, read and steered offline.

``list`` prints every cluster's versions with their promotion decisions; ``show`` one
version's record (digest, parent, run, training metrics, the gate's figures); ``pin``,
``unpin`` and ``rollback`` leave a request in the registry that the coordinator applies
between rounds or while serving (at its next start if it is not running): a pin or rollback
publishes the chosen version again as a new version number. All of them read or write only
``--state-dir``; none needs the broker. See docs/runtime.md, "Model registry".
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from coordinator.adapters.model_registry import ModelRecord, ModelRegistry, Request
from faultfleet.errors import UsageError


def add_models_command(commands: Any) -> None:
    """Register ``models list|show|pin|unpin|rollback``."""
    models = commands.add_parser(
        "models",
        help="list, inspect, pin or roll back the cluster model versions of a coordinator",
        description=(
            "The coordinator keeps every cluster model version in STATE_DIR/models with "
            "the figures behind its promotion. These commands work on the state directory "
            "alone; pins and rollbacks are published by the coordinator."
        ),
    )
    actions = models.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    specs = [
        ("list", "every cluster's versions and promotion decisions", list_models),
        ("show", "one version's record", show_model),
        ("pin", "serve this version (default: the serving one) and stop promotions", request),
        ("unpin", "let the gate promote new versions of the cluster again", request),
        ("rollback", "publish an earlier version of a cluster again", request),
    ]
    for name, help_text, handler in specs:
        action = actions.add_parser(name, help=help_text, description=help_text)
        action.add_argument(
            "--state-dir", type=Path, required=True, help="the coordinator's state_dir"
        )
        if name != "list":
            action.add_argument("cluster", help="cluster id (as `faultfleet models list` shows)")
        if name in ("show", "rollback"):
            action.add_argument("version", type=int, help="version number")
        if name == "pin":
            action.add_argument("version", type=int, nargs="?", help="version (default: serving)")
        if name in ("list", "show"):
            action.add_argument("--json", action="store_true", help="print JSON instead of text")
        action.set_defaults(handler=handler)


def _registry(state_dir: Path) -> ModelRegistry:
    root = state_dir / "models"
    if not root.is_dir():
        raise UsageError(
            f"{state_dir} holds no model registry ({root} is missing); give the coordinator's "
            "state_dir"
        )
    return ModelRegistry(root)


def _record_row(record: ModelRecord, serving: int | None, pinned: bool) -> dict[str, Any]:
    gate = record.gate
    return {
        "version": record.version,
        "serving": record.version == serving,
        "pinned": pinned and record.version == serving,
        "decision": gate.decision,
        "candidate_accuracy": gate.candidate_accuracy,
        "serving_accuracy": gate.serving_accuracy,
        "compared_with": gate.serving_version,
        "parent_version": record.parent_version,
        "restores": record.restores,
        "origin": record.origin,
        "run_id": record.run_id,
        "campaign_id": record.campaign_id,
        "server_round": record.server_round,
        "created_at": record.created_at,
        "sha256": record.sha256,
        "reason": gate.reason,
    }


def list_models(args: argparse.Namespace) -> int:
    """Print every cluster with its versions, newest last."""
    registry = _registry(args.state_dir)
    table = registry.serving()
    pending = registry.pending()
    clusters: dict[str, Any] = {}
    for cid in registry.clusters():
        entry = table.clusters.get(cid)
        serving = entry.version if entry else None
        pinned = bool(entry and entry.pinned)
        clusters[cid] = {
            "serving_version": serving,
            "pinned": pinned,
            "agents": sorted(a for a, c in table.agents.items() if c == cid),
            "pending": pending[cid].model_dump(mode="json") if cid in pending else None,
            "versions": [
                _record_row(registry.record(cid, v), serving, pinned)
                for v in registry.versions(cid)
            ],
        }
    if args.json:
        print(json.dumps({"clusters": clusters}, indent=2))
        return 0
    print(f"{'cluster':<16} {'version':>7} {'decision':<9} {'cand.':>6} {'serv.':>6}  note")
    for cid, cluster in clusters.items():
        for row in cluster["versions"]:
            print(
                f"{cid:<16} {row['version']:>7} {row['decision']:<9} "
                f"{_ratio(row['candidate_accuracy']):>6} {_ratio(row['serving_accuracy']):>6}  "
                + _note(row)
            )
        if cluster["pending"]:
            print(f"{cid:<16} pending {cluster['pending']['action']} (applied by the coordinator)")
    return 0


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _note(row: dict[str, Any]) -> str:
    notes = []
    if row["serving"]:
        notes.append("SERVING" + (" (pinned)" if row["pinned"] else ""))
    if row["restores"] is not None:
        notes.append(f"= v{row['restores']}")
    if row["compared_with"] is not None:
        notes.append(f"vs v{row['compared_with']}")
    return ", ".join(notes)


def show_model(args: argparse.Namespace) -> int:
    """Print one version's record."""
    registry = _registry(args.state_dir)
    if args.version not in registry.versions(args.cluster):
        raise UsageError(f"cluster {args.cluster!r} has no version {args.version}")
    record = registry.record(args.cluster, args.version)
    folder = registry.folder(args.cluster, args.version)
    if args.json:
        data = record.model_dump(mode="json")
        data["onnx_file"] = str(folder / "model.onnx")
        print(json.dumps(data, indent=2))
        return 0
    for key, value in record.model_dump(mode="json", exclude={"gate"}).items():
        print(f"{key + ':':<16} {value}")
    for key, value in record.gate.model_dump(mode="json").items():
        print(f"{'gate.' + key + ':':<16} {value}")
    print(f"{'onnx file:':<16} {folder / 'model.onnx'}")
    return 0


def request(args: argparse.Namespace) -> int:
    """Leave a pin, unpin or rollback request for the coordinator."""
    registry = _registry(args.state_dir)
    action: str = args.models_command
    version: int | None = getattr(args, "version", None)
    entry = registry.serving().clusters.get(args.cluster)
    if entry is None:
        raise UsageError(
            f"no version serves cluster {args.cluster!r}; see `faultfleet models list`"
        )
    if version is not None:
        if version not in registry.versions(args.cluster):
            raise UsageError(f"cluster {args.cluster!r} has no version {version}")
        registry.record(args.cluster, version)  # a corrupt record fails here, naming the file
    asked = Request.model_validate(
        {"action": action, "version": version, "requested_at": time.time()}
    )
    path = registry.request(args.cluster, asked)
    print(
        f"{action} of cluster {args.cluster}"
        + (f" to v{version}" if version is not None else "")
        + f" requested ({path}); the coordinator publishes it between rounds or within "
        "[models] request_poll_s while serving"
    )
    return 0
