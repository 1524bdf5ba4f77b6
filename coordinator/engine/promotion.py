"""The promotion gate: does a cluster's new model version reach its agents?

A candidate version of a cluster model is compared with the version that serves the
cluster now, both evaluated by the cluster's agents on their held-out labelled data (the
evaluate task on the validation split, :class:`~faultfleet.tasks.EvaluateTask`). The gate
compares the two on the agents that answered for both (a paired comparison: an agent that
answered for one only would bias the means), each side scored as the mean over agents of
each agent's accuracy (FLACC §V-B) with the highest and lowest dropped
(:func:`~faultfleet.scoring.trimmed_client_accuracy`: with 3 to 10 agents, the best and the
worst one). The accuracies are the agents' own reports: trimmed, one agent reporting 1.0
for a candidate (or 0.0 for the serving version) cannot carry the decision.

The candidate is promoted when its score is not below the serving version's by more than
``margin`` (a ratio from 0 to 1); a cluster with no serving version promotes its first
candidate (its agents need a model). A candidate no agent could score is rejected: nothing
says it is not worse. Pure logic: no files, no broker, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from faultfleet.scoring import trimmed_client_accuracy
from faultfleet.tasks import EvaluateResult


class Decision(StrEnum):
    """What the gate (or an operator) decided about a candidate version."""

    PROMOTED = "promoted"
    """Published to the cluster's agents."""
    REJECTED = "rejected"
    """Worse than the serving version beyond the margin, or not evaluated: kept, unpublished."""
    PINNED = "pinned"
    """Not compared: the cluster is pinned to a version by an operator; kept, unpublished."""
    ROLLBACK = "rollback"
    """An operator's rollback or pin published an earlier version again."""


@dataclass(frozen=True)
class GateFigures:
    """The federated validation figures behind one decision.

    ``candidate_accuracy`` and ``serving_accuracy`` are ratios from 0 to 1 over the
    ``agents`` that answered for both versions; None when not measured.
    """

    decision: Decision
    reason: str
    margin: float
    candidate_accuracy: float | None = None
    serving_accuracy: float | None = None
    serving_version: int | None = None
    agents: tuple[str, ...] = ()
    num_samples: int = 0
    """Validation windows behind the candidate's score, summed over ``agents``."""


def decide(
    candidate: Sequence[EvaluateResult],
    serving: Sequence[EvaluateResult] | None,
    *,
    margin: float,
    serving_version: int | None = None,
) -> GateFigures:
    """Promote or reject a candidate from the agents' evaluations of it and of the serving version.

    Parameters
    ----------
    candidate : sequence of EvaluateResult
        The cluster's agents' evaluations of the candidate (one per agent that answered).
    serving : sequence of EvaluateResult or None
        Their evaluations of the serving version; None when the cluster has none yet.
    margin : float
        How much lower (a ratio from 0 to 1) the candidate's accuracy may be.
    serving_version : int, optional
        Recorded in the figures.

    Raises
    ------
    ValueError
        If ``margin`` is not a ratio from 0 to 1.
    """
    if not (math.isfinite(margin) and 0.0 <= margin <= 1.0):
        raise ValueError(f"margin {margin!r} must be a ratio from 0 to 1")
    if serving is None:
        return GateFigures(Decision.PROMOTED, "first version of the cluster", margin)
    by_agent = {r.client_id: r for r in serving}
    paired = sorted(r.client_id for r in candidate if r.client_id in by_agent)
    if not paired:
        return GateFigures(
            Decision.REJECTED,
            "no agent evaluated both the candidate and the serving version",
            margin,
            serving_version=serving_version,
        )
    cand = {r.client_id: r for r in candidate}
    new = trimmed_client_accuracy([cand[a].accuracy for a in paired])
    old = trimmed_client_accuracy([by_agent[a].accuracy for a in paired])
    promoted = new >= old - margin
    reason = (
        f"accuracy {new:.4f} vs serving {old:.4f}: "
        + ("within" if promoted else "below by more than")
        + f" the margin {margin:g}"
    )
    return GateFigures(
        Decision.PROMOTED if promoted else Decision.REJECTED,
        reason,
        margin,
        candidate_accuracy=new,
        serving_accuracy=old,
        serving_version=serving_version,
        agents=tuple(paired),
        num_samples=sum(cand[a].num_samples for a in paired),
    )
