"""Which merges of a run joined machines of different true groups, read from ``results.json``.

An agglomerative strategy records every merge (``cluster_quality.merges`` of the results
document: its round and the client ids of the two clusters, ``first`` and ``second``), and
the document holds the ground truth (``true_groups``: client id → group). The ground truth
is a partition of the machines, also when groups share condition labels (the
``label-groups`` fleets): two machines are in one true group when they were built in the
same group, whatever labels other groups hold.

Let G₁ and G₂ be the sets of true groups of the machines on either side of a merge. The
merge is

``pure``
    when G₁ = G₂ holds one group: machines of one group come together;
``joins``
    when each side holds a group the other lacks (G₁ ⊄ G₂ and G₂ ⊄ G₁): the merge puts
    machines of true groups together that neither side had mixed — a *wrong merge*;
``grows-mixed``
    otherwise: one side's groups contain the other's and there are several, so the merge
    adds machines to a cluster that already mixed those groups (the error was an earlier
    ``joins``).

A strategy that builds its clusters by merging, from single machines, ends with a cluster
mixing two groups only after at least one ``joins`` merge (a ``pure`` or ``grows-mixed``
merge never adds a group to both sides' sets); :func:`wrong_merge_rounds` lists their
rounds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

MergeKind = Literal["pure", "joins", "grows-mixed"]


@dataclass(frozen=True)
class MergeVerdict:
    """One recorded merge and what it did to the true groups.

    Attributes
    ----------
    round : int
        The server round whose aggregation made the merge.
    first_groups, second_groups : tuple of int
        True groups of the machines on each side, sorted.
    kind : {"pure", "joins", "grows-mixed"}
        See the module docstring.
    """

    round: int
    first_groups: tuple[int, ...]
    second_groups: tuple[int, ...]
    kind: MergeKind

    @property
    def wrong(self) -> bool:
        """Whether this merge joined true groups (``kind == "joins"``)."""
        return self.kind == "joins"


def _groups_of(side: Iterable[str], true_groups: Mapping[str, int]) -> frozenset[int]:
    side = list(side)
    unknown = [client for client in side if client not in true_groups]
    if unknown:
        raise ValueError(f"merge names clients {unknown} that have no true group")
    if not side:
        raise ValueError("a merge side holds no client")
    return frozenset(true_groups[client] for client in side)


def merge_kind(
    first: Iterable[str], second: Iterable[str], true_groups: Mapping[str, int]
) -> MergeKind:
    """What merging the clusters ``first`` and ``second`` (client ids) does.

    Raises
    ------
    ValueError
        A side is empty or names a client without a true group.
    """
    one, two = _groups_of(first, true_groups), _groups_of(second, true_groups)
    if one - two and two - one:
        return "joins"
    if len(one | two) == 1:
        return "pure"
    return "grows-mixed"


def recorded_merges(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The merges of a results document, in round order.

    ``cluster_quality.merges`` (every merge of the run), or where a document has no
    cluster quality, the merges of its per-round history.
    """
    quality = document.get("cluster_quality") or {}
    merges = quality.get("merges")
    if merges is None:
        history = document.get("history", [])
        merges = [m for r in history for m in r.get("quality", {}).get("merges", [])]
    return sorted(merges, key=lambda m: int(m["round"]))


def audit_merges(document: Mapping[str, Any]) -> tuple[MergeVerdict, ...]:
    """Every recorded merge of a ``results.json`` document, judged on its ``true_groups``."""
    truth: Mapping[str, int] = document["true_groups"]
    verdicts = []
    for merge in recorded_merges(document):
        first = _groups_of(merge["first"], truth)
        second = _groups_of(merge["second"], truth)
        verdicts.append(
            MergeVerdict(
                int(merge["round"]),
                tuple(sorted(first)),
                tuple(sorted(second)),
                merge_kind(merge["first"], merge["second"], truth),
            )
        )
    return tuple(verdicts)


def wrong_merge_rounds(verdicts: Sequence[MergeVerdict]) -> tuple[int, ...]:
    """Rounds of the merges that joined true groups (one entry per such merge)."""
    return tuple(v.round for v in verdicts if v.wrong)
