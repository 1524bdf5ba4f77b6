"""Placing a machine that joins a running federation: the model that fits its data best.

A newcomer — or a member whose labelled data changed — is offered candidate models (over
MQTT: the serving version of every cluster; in the simulator: the strategy's
``join_candidates``) and evaluates each one on its own labelled validation windows, with the
ordinary evaluate task, one model per task so that every candidate's figures come back.
It is placed on the candidate of **lowest mean validation loss** (cross-entropy over its
validation windows); ties go to the higher accuracy, then to the first key in sorted
order. Loss, not accuracy: on a few dozen windows several candidates often reach the same
accuracy (1.0 for every model that knows the machine's classes), while the loss still
tells how sure each model is of the right class; it is also what IFCA's clients choose by.

A machine that holds no labelled window, or whose every evaluation failed (no validation
windows, no answer), is placed by rule: on the candidate serving most machines now (ties:
the first key in sorted order). Such a placement is *unverified*: nothing measured that the
model fits the machine; it is placed again once the machine has labels.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from coordinator.engine.fleet import Fleet
from faultfleet.tasks import EvaluateResult, EvaluateTask, Failure, Split
from faultfleet.types import FloatArray

Basis = Literal["evaluation", "most_members"]


@dataclass(frozen=True)
class CandidateScore:
    """One candidate model evaluated on a machine's validation windows."""

    key: str
    loss: float
    """Mean cross-entropy over the windows, nats."""
    accuracy: float
    num_samples: int


@dataclass(frozen=True)
class Placement:
    """Where a machine goes, and why.

    Attributes
    ----------
    client_id : str
    key : str
        The candidate it is placed on.
    basis : {"evaluation", "most_members"}
        Its own evaluation chose the key, or the rule for machines without labels did.
    scores : tuple of CandidateScore
        Every candidate it scored, best first (empty for ``most_members``).
    note : str
        Why it was placed by rule ("" when by evaluation).
    """

    client_id: str
    key: str
    basis: Basis
    scores: tuple[CandidateScore, ...] = ()
    note: str = ""

    @property
    def verified(self) -> bool:
        """Whether the machine's own labelled data chose the model."""
        return self.basis == "evaluation"


def rank(results: Sequence[EvaluateResult]) -> list[CandidateScore]:
    """Candidates best first: lowest loss, then highest accuracy, then key."""
    scores = [CandidateScore(r.model_key, r.loss, r.accuracy, r.num_samples) for r in results]
    return sorted(scores, key=lambda s: (s.loss, -s.accuracy, s.key))


def most_members(served: Mapping[str, int]) -> str:
    """The key serving most machines (``served``: key → machines); ties: first in order.

    Raises
    ------
    ValueError
        When ``served`` is empty.
    """
    if not served:
        raise ValueError("no candidate model to place a machine on")
    return min(served, key=lambda k: (-served[k], k))


def evaluation_tasks(
    client_ids: Sequence[str], candidates: Mapping[str, FloatArray], split: Split = Split.VAL
) -> list[EvaluateTask]:
    """One evaluate task per machine and candidate, on ``split``."""
    return [
        EvaluateTask(client, {key: weights}, split)
        for client in client_ids
        for key, weights in sorted(candidates.items())
    ]


def placements(
    client_ids: Sequence[str],
    results: Sequence[EvaluateResult],
    failures: Sequence[Failure],
    served: Mapping[str, int],
) -> dict[str, Placement]:
    """Each machine's placement from the answers to :func:`evaluation_tasks`.

    Parameters
    ----------
    served : mapping of str to int
        Candidate key → machines it serves now: the rule for machines without a score.
    """
    scored: dict[str, list[EvaluateResult]] = defaultdict(list)
    for r in results:
        scored[r.client_id].append(r)
    why: dict[str, str] = {}
    for failure in failures:
        why.setdefault(failure.client_id, failure.reason)
    placed: dict[str, Placement] = {}
    for client in client_ids:
        ranking = rank(scored.get(client, []))
        if ranking:
            placed[client] = Placement(client, ranking[0].key, "evaluation", tuple(ranking))
        else:
            note = why.get(client, "it holds no labelled windows")
            placed[client] = Placement(client, most_members(served), "most_members", (), note)
    return placed


def place(
    fleet: Fleet,
    server_round: int,
    client_ids: Sequence[str],
    candidates: Mapping[str, FloatArray],
    served: Mapping[str, int],
    *,
    unlabelled: Collection[str] = (),
) -> dict[str, Placement]:
    """Offer ``candidates`` to ``client_ids`` through ``fleet`` and place each machine.

    Machines in ``unlabelled`` are not asked (they could only fail) and are placed by rule.
    """
    asked = [c for c in client_ids if c not in set(unlabelled)]
    tasks = evaluation_tasks(asked, candidates)
    outcome = fleet.evaluate(server_round, tasks) if tasks else None
    results = outcome.results if outcome is not None else ()
    failures = outcome.failures if outcome is not None else ()
    return placements(client_ids, results, failures, served)
