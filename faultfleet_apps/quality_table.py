"""Cluster quality as text: what ``faultfleet sim`` and the demo report print.

Reads the JSON form of :class:`coordinator.strategies.quality.RunQuality` (``results.json``'s
``cluster_quality``, ``summary.json``'s ``cluster_quality``), so it prints what was written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SHOWN = 12
"""At most this many clusters are listed, lowest score first."""


def format_quality(document: Mapping[str, Any] | None) -> list[str]:
    """Lines describing a cluster-quality document; one line when there is nothing to judge."""
    if not document:
        return ["cluster quality: not recorded"]
    basis = document.get("basis")
    if basis == "given":
        return ["cluster quality: the clusters are given, not learned (confidence 1)"]
    if basis == "none":
        return [f"cluster quality: no figures ({document.get('measure')})"]
    clusters: Sequence[Mapping[str, Any]] = document.get("clusters", [])
    merges: Sequence[Mapping[str, Any]] = document.get("merges", [])
    borderline_merges = [m for m in merges if m.get("borderline")]
    settled = "" if document.get("settled", True) else " (clusters not final yet)"
    lines = [
        f"cluster quality{settled}: confidence {_number(document.get('confidence'))}, "
        f"min margin {_number(document.get('min_margin'))}, "
        f"{document.get('borderline_clusters', 0)} borderline cluster(s) of {len(clusters)}, "
        f"{len(borderline_merges)} borderline merge(s) of {len(merges)}",
        f"  similarity: {document.get('measure')}",
    ]
    scored = [c for c in clusters if c.get("size", 0) >= 2]
    scored.sort(key=lambda c: (c.get("score") is None, c.get("score") or 0.0, c["cluster"]))
    if scored:
        lines.append(
            f"  {'cluster':>7} {'size':>5} {'cohesion':>9} {'margin':>8} {'nearest':>8} "
            f"{'weakest link':>13} {'weakest merge':>14} {'score':>6}"
        )
    for cluster in scored[:SHOWN]:
        flag = "  borderline" if cluster.get("borderline") else ""
        lines.append(
            f"  {cluster['cluster']:>7} {cluster['size']:>5} "
            f"{_number(cluster.get('cohesion')):>9} {_number(cluster.get('margin')):>8} "
            f"{_label(cluster.get('nearest')):>8} {_number(cluster.get('weakest_link')):>13} "
            f"{_number(cluster.get('weakest_merge')):>14} {_number(cluster.get('score')):>6}"
            f"{flag}"
        )
    if len(scored) > SHOWN:
        lines.append(f"  … {len(scored) - SHOWN} more clusters")
    singles = len(clusters) - len(scored)
    if singles:
        lines.append(f"  {singles} cluster(s) of one client (no cohesion, no score)")
    if scored and document.get("merge_measure", "").startswith("n/a"):
        lines.append(f"  weakest merge {document['merge_measure']}")
    for merge in borderline_merges:
        lines.append(
            f"  borderline merge in round {merge['round']}: {_size(merge, 'first')} + "
            f"{_size(merge, 'second')} clients at similarity {_number(merge.get('similarity'))}, "
            f"score {_number(merge.get('score'))}"
        )
    return lines


def _size(merge: Mapping[str, Any], group: str) -> int:
    """A merge's group size: given, or (results written before sizes were) its listed ids."""
    size = merge.get(f"{group}_size")
    return int(size) if isinstance(size, int) else len(merge[group])


def _number(value: object) -> str:
    return "n/a" if not isinstance(value, int | float) else f"{float(value):.3f}"


def _label(value: object) -> str:
    return "-" if value is None else str(value)
