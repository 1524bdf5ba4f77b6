"""The table ``faultfleet status`` prints from a :meth:`FleetView.snapshot` document.

One line for the coordinator (state, run, strategy, round, campaign: id, trigger, round x of
y, status, next scheduled, new labelled windows), the ingest workers' states when there are
any, one row per agent
(state, last seen, cluster — ``(unverified)`` when it was placed without labels —, serving
model version, last diagnosis, fault streak), the recent promotions and the machines placed
when they joined; "—" where a value is not known (yet).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MISSING = "—"


def age(seconds_ago: float) -> str:
    """``"3 s ago"``, ``"5 min ago"``, ``"2 h ago"``, ``"4 d ago"`` (never negative)."""
    seconds = max(0.0, seconds_ago)
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return f"{int(seconds)} s ago"


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns left-aligned to their widest cell, two spaces apart, the header in capitals."""
    cells = [[h.upper() for h in header], *[list(r) for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )


def _when(timestamp: float | None, now: float) -> str:
    return MISSING if timestamp is None else age(now - timestamp)


def _value(value: Any) -> str:
    return MISSING if value is None or value == "" else str(value)


CAMPAIGN_KEYS = {"campaign_id", "trigger", "status", "rounds_done", "start_round", "end_round"}
PROMOTION_KEYS = {"cluster_id", "version", "decision"}


def campaign_text(campaign: Any, now: float) -> str:
    """``c2 (labels) round 3 of 10, running; next scheduled in 6 d; 120 of 500 new labelled
    windows`` for a campaign note; any other value as ``key=value`` pairs."""
    if not isinstance(campaign, dict):
        return _value(campaign)
    if not campaign.keys() >= CAMPAIGN_KEYS:
        return " ".join(f"{k}={v}" for k, v in campaign.items())
    rounds = campaign["end_round"] - campaign["start_round"]
    parts = [
        f"{campaign['campaign_id']} ({campaign['trigger']}) round {campaign['rounds_done']} of "
        f"{rounds}, {campaign['status']}"
    ]
    due = campaign.get("next_scheduled_at")
    if due is not None:
        parts.append(
            "next scheduled "
            + (f"in {age(due - now).removesuffix(' ago')}" if due > now else "now")
        )
    threshold = campaign.get("min_new_labelled_windows") or 0
    if threshold:
        parts.append(
            f"{campaign.get('new_labelled_windows', 0)} of {threshold} new labelled windows"
        )
    return "; ".join(parts)


def _coordinator_line(coordinator: dict[str, Any] | None, now: float) -> str:
    if coordinator is None:
        return f"coordinator: {MISSING} (no retained status: has it ever run on this broker?)"
    return (
        f"coordinator: {_value(coordinator['state'])}   run {_value(coordinator['run_id'])}   "
        f"strategy {_value(coordinator['strategy'])}   round "
        f"{_value(coordinator['server_round'])}   campaign "
        f"{campaign_text(coordinator['campaign'], now)}"
    )


def _agent_cells(row: dict[str, Any], now: float) -> list[str]:
    state = row["state"] + (f" ({row['offline_cause']})" if row["offline_cause"] else "")
    diagnosis = row["last_diagnosis"]
    diagnosis_text = (
        MISSING
        if diagnosis is None
        else f"{diagnosis['class_name']} {diagnosis['probability']:.2f}, "
        f"{age(now - diagnosis['timestamp'])}"
    )
    streak = row["streak"]
    streak_text = MISSING if streak is None else f"{streak['windows']} × {streak['class_name']}"
    version = row["serving_model_version"]
    placement = row.get("placement") or {}
    unverified = " (unverified)" if placement.get("verified") is False else ""
    return [
        row["agent_id"],
        state,
        _when(row["last_seen"], now),
        _value(row["cluster_id"]) + unverified,
        MISSING if version is None else f"v{version}",
        diagnosis_text,
        streak_text,
    ]


def render_table(snapshot: dict[str, Any]) -> str:
    """The text ``faultfleet status`` prints (without ``--json``)."""
    now = snapshot["generated_at"]
    counts = snapshot["counts"]
    lines = [
        _coordinator_line(snapshot["coordinator"], now),
        "agents: " + ", ".join(f"{counts[state]} {state}" for state in counts if counts[state])
        if snapshot["agents"]
        else "agents: none heard of",
    ]
    workers = snapshot["ingest_workers"]
    if workers:
        lines.append(
            "ingest workers: " + ", ".join(f"{w['worker_id']} {w['state']}" for w in workers)
        )
    if snapshot["agents"]:
        header = [
            "agent",
            "state",
            "last seen",
            "cluster",
            "model",
            "last diagnosis",
            "fault streak",
        ]
        rows = [_agent_cells(row, now) for row in snapshot["agents"]]
        lines += ["", format_table(header, rows)]
    promotions = (snapshot["coordinator"] or {}).get("recent_promotions") or []
    lines.append("")
    lines.append("recent promotions: " + (MISSING if not promotions else ""))
    lines += [f"  {promotion_text(p, now)}" for p in promotions]
    placements = (snapshot["coordinator"] or {}).get("placements") or []
    if placements:
        lines += ["", "placed when they joined:"]
        lines += [f"  {placement_text(p, now)}" for p in placements]
    if snapshot["unreadable_messages"]:
        lines.append(f"({snapshot['unreadable_messages']} unreadable message(s) skipped)")
    return "\n".join(lines)


def promotion_text(promotion: Any, now: float) -> str:
    """``cluster-0 v7 promoted 0.912 vs 0.900 (c2, round 12, 3 min ago)`` for a promotion
    note; any other value as ``key value`` pairs."""
    if not isinstance(promotion, dict):
        return str(promotion)
    if not promotion.keys() >= PROMOTION_KEYS:
        return "  ".join(f"{key} {value}" for key, value in promotion.items())
    figures = ""
    candidate, serving = promotion.get("candidate_accuracy"), promotion.get("serving_accuracy")
    if candidate is not None:
        figures = f" {candidate:.3f}" + (f" vs {serving:.3f}" if serving is not None else "")
    where = [
        promotion.get("campaign_id"),
        f"round {promotion['server_round']}" if promotion.get("server_round") else None,
        _when(promotion.get("created_at") or None, now),
    ]
    return (
        f"{promotion['cluster_id']} v{promotion['version']} {promotion['decision']}{figures} "
        f"({', '.join(w for w in where if w and w != MISSING)})"
    ).removesuffix(" ()")


def placement_text(note: Any, now: float) -> str:
    """``m07 on cluster-1 v5: validation loss 0.120, accuracy 0.97 (next cluster-0 at 1.930);
    trains from round 42 (placed 3 min ago)`` for a placement note; other values as
    ``key value`` pairs."""
    if not isinstance(note, dict) or not {"agent_id", "cluster_id", "model_version"} <= set(note):
        return str(note)
    head = f"{note['agent_id']} on {note['cluster_id']} v{note['model_version']}"
    scores = note.get("scores") or []
    if note.get("verified") and scores:
        best = scores[0]
        why = f"validation loss {best['loss']:.3f}, accuracy {best['accuracy']:.2f}"
        if len(scores) > 1:
            why += f" (next {scores[1]['cluster_id']} at {scores[1]['loss']:.3f})"
    else:
        why = f"the cluster of most machines, unverified: {note.get('note') or MISSING}"
    joined = note.get("joined_round")
    trains = f"; trains from round {joined}" if joined is not None else ""
    return f"{head}: {why}{trains} (placed {_when(note.get('placed_at') or None, now)})"
