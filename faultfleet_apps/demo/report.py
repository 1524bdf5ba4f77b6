"""What the fleet demo prints and the report folder it writes.

Beside the clusters found against the hidden groups, both show the coordinator's cluster
quality (``summary.json``'s ``cluster_quality``): the figures a plant without ground truth
would have to go by; then how the machine that came online late was served, and the
promotion gate's decisions with their figures.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from faultfleet.scoring import clustering_scores
from faultfleet_apps.demo.fleet import DemoOutcome, DemoPlan, live_accuracy
from faultfleet_apps.demo.late_joiner import format_late
from faultfleet_apps.fleet_status.render import promotion_text
from faultfleet_apps.plotting import pyplot
from faultfleet_apps.quality_table import format_quality
from faultfleet_apps.simulation.plots import plot_clusters


def true_group(plan: DemoPlan, agent_id: str) -> int:
    """The hidden group of simulated agent ``mNN`` (machine NN of the mixed-fault scenario)."""
    return int(agent_id.lstrip("m")) // plan.clients_per_group


def _clusters(outcome: DemoOutcome) -> dict[str, list[str]]:
    clusters = outcome.summary.get("clusters", {})
    return {str(k): list(v) for k, v in clusters.items()} if isinstance(clusters, dict) else {}


def _float_map(outcome: DemoOutcome, key: str) -> dict[str, float]:
    values = outcome.summary.get(key, {})
    return {str(k): float(v) for k, v in values.items()} if isinstance(values, dict) else {}


def _quality(outcome: DemoOutcome) -> dict[str, Any] | None:
    quality = outcome.summary.get("cluster_quality")
    return quality if isinstance(quality, dict) else None


def found_labels(outcome: DemoOutcome) -> dict[str, int]:
    """Agent → index of the cluster that serves it."""
    return {
        agent: index
        for index, (_, members) in enumerate(sorted(_clusters(outcome).items()))
        for agent in members
    }


def format_outcome(plan: DemoPlan, outcome: DemoOutcome) -> str:
    """The summary printed at the end of the demo."""
    clusters = _clusters(outcome)
    found = found_labels(outcome)
    truth = {agent: true_group(plan, agent) for agent in found}
    scores = clustering_scores(truth, found)
    accuracy = _float_map(outcome, "accuracy_by_cluster")
    live = live_accuracy(outcome.live)
    rate = len(outcome.live) / outcome.live_seconds if outcome.live_seconds > 0 else 0.0
    lines = [
        f"\nclusters found: {scores.num_clusters} (truth: {plan.groups} groups), adjusted Rand "
        f"index {scores.ari:.2f}, purity {scores.purity:.2f}",
        f"{'cluster':<12}{'agents':>7}  {'true groups':<14}{'test acc.':>10}{'live acc.':>11}",
    ]
    for cid, members in sorted(clusters.items()):
        groups = ",".join(str(g) for g in sorted({truth[a] for a in members}))
        test = f"{accuracy[cid]:.1%}" if cid in accuracy else "-"
        live_text = f"{live[cid][0]:.1%}" if cid in live else "-"
        lines.append(f"{cid:<12}{len(members):>7}  {groups:<14}{test:>10}{live_text:>11}")
    overall = outcome.summary.get("accuracy")
    if isinstance(overall, float):
        lines.append(f"mean test accuracy over agents: {overall:.1%}")
    lines.extend(format_quality(_quality(outcome)))
    for late in outcome.late:
        lines.extend(format_late(late, clusters, lambda agent: true_group(plan, agent)))
    promotions = outcome.summary.get("recent_promotions")
    if isinstance(promotions, list) and promotions:
        lines.append("promotion gate (newest last; candidate vs serving validation accuracy):")
        lines += [f"  {promotion_text(p, time.time())}" for p in promotions]
    lines.append(
        f"live diagnosis: {len(outcome.live)} windows in {outcome.live_seconds:.1f} s = "
        f"{rate:.0f} diagnoses per second across {plan.machines} agents, ONNX Runtime model "
        f"version {outcome.summary.get('model_version')}"
    )
    lines.append(f"broker: {outcome.broker_kind}; whole fleet run {outcome.wall_seconds:.0f} s")
    if outcome.security:
        lines.append(f"security: {outcome.security}")
    return "\n".join(lines)


def write_report(plan: DemoPlan, outcome: DemoOutcome) -> Path:
    """``report/``: summary.json, clusters.png, accuracy.png; returns the folder."""
    folder = plan.out / "report"
    folder.mkdir(parents=True, exist_ok=True)
    found = found_labels(outcome)
    truth = {agent: true_group(plan, agent) for agent in found}
    scores = clustering_scores(truth, found)
    live = live_accuracy(outcome.live)
    predicted = Counter(d.class_name for d in outcome.live)
    document: dict[str, Any] = {
        "coordinator": outcome.summary,
        "clustering": {
            "num_clusters": scores.num_clusters,
            "ari": scores.ari,
            "purity": scores.purity,
            "confidence": (_quality(outcome) or {}).get("confidence"),
        },
        "true_groups": truth,
        "live": {
            "diagnoses": len(outcome.live),
            "seconds": outcome.live_seconds,
            "diagnoses_per_second": len(outcome.live) / outcome.live_seconds
            if outcome.live_seconds
            else 0.0,
            "accuracy_by_cluster": {c: a for c, (a, _) in live.items()},
            "by_class": dict(predicted),
        },
        "late_machines": [asdict(late) for late in outcome.late],
        "broker": outcome.broker_kind,
        "security": outcome.security,
        "wall_seconds": outcome.wall_seconds,
    }
    (folder / "summary.json").write_text(
        json.dumps(document, indent=2, sort_keys=True), encoding="utf-8"
    )
    plot_clusters(
        truth,
        found,
        dict.fromkeys(found, 1),
        folder / "clusters.png",
        title="Clusters found over MQTT",
    )
    _plot_cluster_accuracy(
        _float_map(outcome, "accuracy_by_cluster"), live, folder / "accuracy.png"
    )
    return folder


def _plot_cluster_accuracy(
    test: dict[str, float], live: dict[str, tuple[float, int]], path: Path
) -> None:
    plt = pyplot()
    clusters = sorted(set(test) | set(live))
    figure, axes = plt.subplots(figsize=(max(4.0, 0.9 * len(clusters) + 2), 4.0))
    xs = range(len(clusters))
    axes.bar(
        [x - 0.2 for x in xs],
        [100 * test.get(c, 0.0) for c in clusters],
        0.4,
        label="test split (torch)",
    )
    axes.bar(
        [x + 0.2 for x in xs],
        [100 * live.get(c, (0.0, 0))[0] for c in clusters],
        0.4,
        label="live windows (ONNX Runtime)",
    )
    axes.set_xticks(list(xs), clusters, rotation=30, ha="right")
    axes.set_ylabel("accuracy (%)")
    axes.set_ylim(0, 100)
    axes.legend(loc="lower right")
    axes.set_title("Accuracy per cluster")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
