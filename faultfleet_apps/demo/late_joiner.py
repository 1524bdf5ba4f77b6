"""The demo's late machine: it comes online once the federation has clustered and is served.

The last simulated machine is held back when the fleet starts. Once the first campaign has
ended — the machines clustered (FLACC separated, in a run long enough for it) and the
cluster models published through the promotion gate — :func:`join_late` starts its agent
process, as a plant would start the gateway of a machine it just installed, and waits until
the coordinator has placed it (:mod:`coordinator.runtime.newcomers`: it scored every
cluster's serving model on its validation windows) and it diagnoses with the model of the
cluster it was placed on. :class:`LateJoin` is what the report tells: when it came online,
the cluster and version it got and why, and how soon its first diagnosis followed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from faultfleet_apps.demo.monitor import FleetMonitor


@dataclass(frozen=True)
class LateJoin:
    """How the late machine was served.

    Attributes
    ----------
    agent_id : str
    server_round : int
        The federation's round when it came online.
    after_campaign_s : float
        Seconds from the end of the campaign to the coordinator finding it online.
    placement : dict
        The coordinator's placement note (:class:`~faultfleet.wire.campaign_messages.
        PlacementNote` as JSON): cluster, version, basis, scores.
    first_diagnosis_s : float
        Seconds from the coordinator finding it online (``seen_at``: the poll after its
        ``online`` status) to its first diagnosis received; both clocks are this host's.
    first_version, first_cluster
        Model version and cluster of that diagnosis.
    """

    agent_id: str
    server_round: int
    after_campaign_s: float
    placement: dict[str, Any]
    first_diagnosis_s: float
    first_version: int
    first_cluster: str


def join_late(
    agent_id: str,
    start_agent: Callable[[], object],
    monitor: FleetMonitor,
    stop: threading.Event,
    *,
    campaign_ended_at: float,
    timeout_s: float = 180.0,
) -> LateJoin | None:
    """Start the late machine's agent and wait until it diagnoses with its placed model.

    Returns None when ``stop`` is set first.

    Raises
    ------
    RuntimeError
        It was not placed, or did not diagnose, within ``timeout_s`` seconds.
    """
    start_agent()
    deadline = time.monotonic() + timeout_s
    while True:
        if stop.wait(0.2):
            return None
        placement = monitor.placement(agent_id)
        first = monitor.first_diagnosis(agent_id)
        if placement is not None and first is not None:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the late machine {agent_id} was not placed and diagnosing within "
                f"{timeout_s:g} s (placed: {placement is not None}, diagnosing: "
                f"{first is not None}); see the logs"
            )
    received, diagnosis = first
    online = float(placement["seen_at"])
    return LateJoin(
        agent_id=agent_id,
        server_round=monitor.server_round(),
        after_campaign_s=online - campaign_ended_at,
        placement=placement,
        first_diagnosis_s=received - online,
        first_version=diagnosis.model_version,
        first_cluster=diagnosis.cluster_id,
    )


def format_late(
    late: LateJoin, clusters: dict[str, list[str]], group_of: Callable[[str], int]
) -> list[str]:
    """The report's lines about the late machine.

    Parameters
    ----------
    clusters : dict of str to list of str
        The federation's clusters (summary.json): whether the cluster the machine got is
        the one of its hidden group, by the group most of its members belong to.
    group_of : callable
        An agent's hidden group.
    """
    note = late.placement
    scores = note.get("scores") or []
    if note.get("verified") and scores:
        why = (
            f"lowest validation loss {scores[0]['loss']:.3f} (accuracy {scores[0]['accuracy']:.0%})"
        )
        why += (
            f", next {scores[1]['cluster_id']} at {scores[1]['loss']:.3f}"
            if len(scores) > 1
            else ", the only cluster"
        )
    else:
        why = f"the cluster of most members, unverified ({note.get('note')})"
    members = clusters.get(str(note["cluster_id"]), [])
    groups = [group_of(a) for a in members]
    majority = max(set(groups), key=groups.count) if groups else None
    own = group_of(late.agent_id)
    verdict = (
        "its hidden group's cluster"
        if majority == own and len(set(groups)) == 1
        else f"hidden group {own}; the cluster holds groups {sorted(set(groups))}"
    )
    return [
        f"late machine {late.agent_id}: found online {late.after_campaign_s:.0f} s after the "
        f"campaign ended (round {late.server_round}); placed on {note['cluster_id']} "
        f"v{note['model_version']} by {why} — {verdict}",
        f"  first diagnosis {late.first_diagnosis_s:.1f} s after the coordinator found it, with "
        f"{late.first_cluster} v{late.first_version}; it trains with its cluster from the "
        "next campaign",
    ]
