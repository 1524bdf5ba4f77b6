"""FLACC's merges as a forest over client registrations, not as lists of client ids.

A :class:`~coordinator.strategies.evidence.Merge` names every client of the two entities it
joined. Kept that way, a fleet's merges hold the sum of the merged entities' sizes: a
cluster grown a few clients at a time repeats its members at every step, O(m²) ids in all
(2.5 million after eight rounds of 10,000 clients, a 26 MB checkpoint written after every
round and 2.4 s to build it). :class:`MergeHistory` keeps each merge as a node whose two
operands are earlier nodes — a client's registration (a leaf), an earlier merge, or, where
an entity is not the product of the merges recorded here (a state saved by an earlier
version, entities set by hand), a group listing its leaves — so memory and checkpoints grow
with the clients and merges, O(m). A merge's client lists are rebuilt from its subtree on
demand, leaving out the clients that had left before it was made: leaves remember when
their client left on one clock with the merges. The rebuilt merges are those an explicit
record would hold, client ids in registration order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from coordinator.strategies.agglomeration import MergeDecision
from coordinator.strategies.evidence import Merge
from faultfleet.types import IntArray

LEAF, MERGE, GROUP = 0, 1, 2
"""Kinds of node: a client's registration, a merge of two nodes, a listed group of leaves."""

NEVER = np.iinfo(np.int64).max
"""The leaving time of a client that has not left."""

JsonDict = dict[str, Any]


class MergeHistory:
    """Every merge of a FLACC run, in O(clients + merges) memory (module docstring).

    Parameters
    ----------
    client_ids : sequence of str
        The registered clients, in registration order (their positions are the entities'
        client indices).
    """

    def __init__(self, client_ids: Sequence[str]) -> None:
        self._kind: list[int] = []
        self._a: list[int] = []  # leaf: index into _clients; merge: first; group: start
        self._b: list[int] = []  # merge: second operand; group: end; leaf: unused
        self._time: list[int] = []  # leaf: when its client left; merge: when it was made
        self._clients: list[str] = []
        self._group_leaves: list[int] = []
        self._merge_node: list[int] = []
        self._round: list[int] = []
        self._similarity: list[float] = []
        self._threshold: list[float] = []
        self._clock = 0
        self._leaf_of = np.zeros(0, dtype=np.int64)  # per client position: its leaf
        self._root_of = np.zeros(0, dtype=np.int64)  # per client position: its entity's node
        self._present: dict[int, int] = {}  # clients per entity node
        self._impure: set[int] = set()  # nodes some of whose clients are now elsewhere
        self.join(client_ids)

    def __len__(self) -> int:
        return len(self._merge_node)

    # -- registrations ---------------------------------------------------------------------

    def join(self, client_ids: Sequence[str]) -> None:
        """Clients appended to the registration order, each an entity of its own."""
        leaves = [self._leaf(c) for c in client_ids]
        new = np.asarray(leaves, dtype=np.int64)
        self._leaf_of = np.concatenate([self._leaf_of, new])
        self._root_of = np.concatenate([self._root_of, new])
        self._present.update(dict.fromkeys(leaves, 1))

    def leave(self, kept: Sequence[int]) -> None:
        """Only the clients at old positions ``kept`` (in order) remain; they are renumbered
        ``0 … len(kept) − 1``, as :meth:`~coordinator.strategies.base.Strategy.remove_clients`
        does."""
        keep = np.zeros(len(self._leaf_of), dtype=bool)
        keep[np.asarray(kept, dtype=np.int64)] = True
        self._clock += 1
        for position in np.flatnonzero(~keep).tolist():
            self._time[int(self._leaf_of[position])] = self._clock
            self._drop(int(self._root_of[position]), 1)
        self._leaf_of = self._leaf_of[keep]
        self._root_of = self._root_of[keep]

    # -- recording -------------------------------------------------------------------------

    def record(
        self, server_round: int, decisions: Sequence[MergeDecision], threshold: float
    ) -> None:
        """The merges among ``decisions`` of round ``server_round`` (entities as client
        positions; those that did not merge are left out), each having cleared
        ``threshold`` (FLACC's α0, eq. 16)."""
        for decision in decisions:
            if decision.merge:
                first = np.fromiter(decision.first, np.int64, len(decision.first))
                second = np.fromiter(decision.second, np.int64, len(decision.second))
                node = self._merge(
                    server_round,
                    self._operand(first),
                    self._operand(second),
                    decision.alpha_min_cross,
                    threshold,
                )
                self._root_of[first] = node
                self._root_of[second] = node

    def add(self, merge: Merge) -> None:
        """``merge`` as recorded explicitly (a state saved by an earlier version, a test):
        its two client lists are kept as groups, in their order, whatever the current
        entities (which it leaves as they are). An id not registered now gets a leaf of its
        own that never leaves."""
        position = {c: i for i, c in enumerate(self._clients_now())}
        groups = []
        for members in (merge.first, merge.second):
            leaves = [
                int(self._leaf_of[position[c]]) if c in position else self._leaf(c) for c in members
            ]
            groups.append(self._group(leaves))
        self._merge(merge.round, groups[0], groups[1], merge.similarity, merge.threshold)

    # -- reading ---------------------------------------------------------------------------

    def merges(self) -> tuple[Merge, ...]:
        """Every merge, oldest first, with the client ids of both entities at the time."""
        subtrees = _Subtrees(self)
        return tuple(self._rebuild(k, subtrees) for k in range(len(self)))

    def merges_of_round(self, server_round: int) -> tuple[Merge, ...]:
        """The merges of ``server_round``, oldest first."""
        found = []
        for k in range(len(self) - 1, -1, -1):
            if self._round[k] < server_round:
                break
            if self._round[k] == server_round:
                found.append(k)
        subtrees = _Subtrees(self)
        return tuple(self._rebuild(k, subtrees) for k in reversed(found))

    @property
    def last_round(self) -> int | None:
        """The round of the latest merge; None before the first."""
        return self._round[-1] if self._round else None

    def weakest(self, labels: IntArray) -> dict[int, float]:
        """Per label of ``labels`` (one per client position), the lowest similarity of a
        merge at least one of whose clients is still registered and carries that label.

        A merge's clients share one entity unless something moved them without a merge;
        as an explicit record would be read, the first registered client of the merge's
        first group (else of its second) names the label."""
        position = np.full(len(self._kind), -1, dtype=np.int64)
        position[self._leaf_of] = np.arange(len(self._leaf_of))
        # the first registered client under each node; children are older than parents
        first = [-1] * len(self._kind)
        for node, kind in enumerate(self._kind):
            if kind == LEAF:
                first[node] = int(position[node])
                continue
            if kind == MERGE:
                under = (first[self._a[node]], first[self._b[node]])
            else:
                under = tuple(position[self._group_leaves[self._a[node] : self._b[node]]].tolist())
            first[node] = min((p for p in under if p >= 0), default=-1)
        weakest: dict[int, float] = {}
        for node, similarity in zip(self._merge_node, self._similarity, strict=True):
            named = first[self._a[node]]
            named = named if named >= 0 else first[self._b[node]]
            if named >= 0:
                label = int(labels[named])
                weakest[label] = min(weakest.get(label, np.inf), similarity)
        return weakest

    # -- saving ----------------------------------------------------------------------------

    def state(self) -> tuple[JsonDict, dict[str, np.ndarray[Any, Any]]]:
        """(metadata, arrays) from which :meth:`load` rebuilds this history."""
        meta: JsonDict = {"clients": list(self._clients), "clock": self._clock}
        arrays: dict[str, np.ndarray[Any, Any]] = {
            "kind": np.asarray(self._kind, dtype=np.int8),
            "a": np.asarray(self._a, dtype=np.int64),
            "b": np.asarray(self._b, dtype=np.int64),
            "time": np.asarray(self._time, dtype=np.int64),
            "group_leaves": np.asarray(self._group_leaves, dtype=np.int64),
            "merge_node": np.asarray(self._merge_node, dtype=np.int64),
            "round": np.asarray(self._round, dtype=np.int64),
            "similarity": np.asarray(self._similarity, dtype=np.float64),
            "threshold": np.asarray(self._threshold, dtype=np.float64),
            "leaf_of": self._leaf_of.copy(),
            "root_of": self._root_of.copy(),
            "impure": np.asarray(sorted(self._impure), dtype=np.int64),
        }
        return meta, arrays

    @classmethod
    def load(
        cls, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray[Any, Any]], clients: int
    ) -> MergeHistory:
        """The history :meth:`state` saved, for ``clients`` registered clients.

        Raises
        ------
        ValueError
            Arrays missing, of unequal lengths, or pointing outside the history.
        """
        history = cls(())
        try:
            kind = np.asarray(arrays["kind"], dtype=np.int64)
            columns = [np.asarray(arrays[k], dtype=np.int64) for k in ("a", "b", "time")]
            merge_node = np.asarray(arrays["merge_node"], dtype=np.int64)
            per_merge = [arrays[k] for k in ("round", "similarity", "threshold")]
            group_leaves = np.asarray(arrays["group_leaves"], dtype=np.int64)
            leaf_of = np.asarray(arrays["leaf_of"], dtype=np.int64)
            root_of = np.asarray(arrays["root_of"], dtype=np.int64)
            impure = np.asarray(arrays["impure"], dtype=np.int64)
            names = [str(c) for c in meta["clients"]]
            clock = int(meta["clock"])
        except KeyError as missing:
            raise ValueError(f"saved merge history lacks {missing}") from None
        nodes = len(kind)
        merges = len(merge_node)
        if any(len(c) != nodes for c in columns) or any(len(c) != merges for c in per_merge):
            raise ValueError("saved merge history has columns of unequal lengths")
        if len(leaf_of) != clients or len(root_of) != clients:
            raise ValueError(
                f"saved merge history covers {len(leaf_of)} clients, the state {clients}"
            )
        references = np.concatenate([merge_node, group_leaves, leaf_of, root_of, impure])
        if references.size and (references.min() < 0 or references.max() >= nodes):
            raise ValueError("saved merge history points outside its nodes")
        first, second = columns[0], columns[1]
        older = np.arange(nodes)
        merged, leaf, grouped = kind == MERGE, kind == LEAF, kind == GROUP
        broken = (
            ~(merged | leaf | grouped)
            | (merged & ((first < 0) | (first >= older) | (second < 0) | (second >= older)))
            | (leaf & ((first < 0) | (first >= len(names))))
            | (grouped & ((first < 0) | (second < first) | (second > len(group_leaves))))
        )
        if broken.any():
            raise ValueError(
                f"saved merge history has a malformed node ({int(np.argmax(broken))}): its "
                "kind, operands, client or group lie outside the history; the state file is "
                "damaged — restore an earlier checkpoint"
            )
        history._kind = kind.tolist()
        history._a, history._b, history._time = (c.tolist() for c in columns)
        history._clients = names
        history._group_leaves = group_leaves.tolist()
        history._merge_node = merge_node.tolist()
        history._round = np.asarray(per_merge[0], dtype=np.int64).tolist()
        history._similarity = np.asarray(per_merge[1], dtype=np.float64).tolist()
        history._threshold = np.asarray(per_merge[2], dtype=np.float64).tolist()
        history._clock = clock
        history._leaf_of, history._root_of = leaf_of, root_of
        roots, counts = np.unique(root_of, return_counts=True)
        history._present = dict(zip(roots.tolist(), counts.tolist(), strict=True))
        history._impure = set(impure.tolist())
        return history

    @classmethod
    def from_merges(cls, client_ids: Sequence[str], merges: Sequence[Merge]) -> MergeHistory:
        """A history of explicitly recorded ``merges`` (:meth:`add`), for ``client_ids``."""
        history = cls(client_ids)
        for merge in merges:
            history.add(merge)
        return history

    # -- internals -------------------------------------------------------------------------

    def _node(self, kind: int, a: int, b: int, time: int) -> int:
        self._kind.append(kind)
        self._a.append(a)
        self._b.append(b)
        self._time.append(time)
        return len(self._kind) - 1

    def _leaf(self, client_id: str) -> int:
        self._clients.append(client_id)
        return self._node(LEAF, len(self._clients) - 1, -1, NEVER)

    def _group(self, leaves: Sequence[int]) -> int:
        start = len(self._group_leaves)
        self._group_leaves.extend(leaves)
        return self._node(GROUP, start, len(self._group_leaves), self._clock)

    def _clients_now(self) -> list[str]:
        return [self._clients[self._a[leaf]] for leaf in self._leaf_of.tolist()]

    def _drop(self, root: int, count: int) -> None:
        left = self._present.pop(root) - count
        if left:
            self._present[root] = left

    def _operand(self, positions: IntArray) -> int:
        """The node of the entity of clients ``positions``: its recorded root when exactly
        its clients are under it, else a new group of its clients' leaves. Entities that
        changed without a merge (clients placed in a separated federation's clusters,
        entities set by hand) are caught by their clients' roots: not all the same, another
        number of clients than the root holds, or a root some of whose clients moved on."""
        roots = self._root_of[positions]
        root = int(roots[0])
        if (
            root not in self._impure
            and self._present.get(root) == len(positions)
            and (len(positions) == 1 or bool((roots == root).all()))
        ):
            return root
        for old, count in zip(*np.unique(roots, return_counts=True), strict=True):
            self._drop(int(old), int(count))
            self._impure.add(int(old))  # its subtree no longer matches an entity
        group = self._group(self._leaf_of[positions].tolist())
        self._root_of[positions] = group
        self._present[group] = len(positions)
        return group

    def _merge(
        self, server_round: int, first: int, second: int, similarity: float, threshold: float
    ) -> int:
        """A merge node of ``first`` and ``second``; the caller moves their clients to it."""
        self._clock += 1
        node = self._node(MERGE, first, second, self._clock)
        self._merge_node.append(node)
        self._round.append(int(server_round))
        self._similarity.append(float(similarity))
        self._threshold.append(float(threshold))
        joined = self._present.pop(first, 0) + self._present.pop(second, 0)
        if joined:  # an explicit merge (:meth:`add`) leaves the entities as they are
            self._present[node] = joined
        return node

    def _rebuild(self, k: int, subtrees: _Subtrees) -> Merge:
        node = self._merge_node[k]
        time = self._time[node]
        return Merge(
            self._round[k],
            subtrees.members(self._a[node], time),
            subtrees.members(self._b[node], time),
            self._similarity[k],
            self._threshold[k],
        )


class _Subtrees:
    """The leaves under nodes of ``history``, found breadth-first with numpy and remembered
    for the merges read together: a cluster grown by many merges is read once, each merge
    adding its new part to the leaves of the node it grew (a Python walk of every leaf of
    every merge took 5 s for the 672 merges of one round at 20,000 clients).
    """

    def __init__(self, history: MergeHistory) -> None:
        self.kind = np.asarray(history._kind, dtype=np.int64)
        self.a = np.asarray(history._a, dtype=np.int64)
        self.b = np.asarray(history._b, dtype=np.int64)
        self.time = np.asarray(history._time, dtype=np.int64)
        self.group_leaves = np.asarray(history._group_leaves, dtype=np.int64)
        self.clients = np.asarray(history._clients, dtype=object)
        self.found: dict[int, IntArray] = {}
        self.remembered = np.zeros(len(self.kind), dtype=bool)

    def members(self, node: int, time: int) -> tuple[str, ...]:
        """Client ids of the leaves under ``node`` whose client had not left at ``time``,
        in registration order (a group: in its own order)."""
        leaves = self.leaves(node)
        leaves = leaves[self.time[leaves] > time]
        return tuple(self.clients[self.a[leaves]].tolist())

    def leaves(self, node: int) -> IntArray:
        """Every leaf under ``node``: sorted (registration order) under a merge, in the
        group's order for a group."""
        known = self.found.get(node)
        if known is not None:
            return known
        if self.kind[node] == GROUP:
            leaves = self.group_leaves[self.a[node] : self.b[node]]
        else:
            parts: list[IntArray] = []
            frontier = np.array([node], dtype=np.int64)
            while frontier.size:
                seen = self.remembered[frontier]
                parts.extend(self.found[f] for f in frontier[seen].tolist())
                frontier = frontier[~seen]
                kind = self.kind[frontier]
                parts.append(frontier[kind == LEAF])
                for group in frontier[kind == GROUP].tolist():
                    parts.append(self.group_leaves[self.a[group] : self.b[group]])
                merged = frontier[kind == MERGE]
                frontier = np.concatenate([self.a[merged], self.b[merged]])
            leaves = np.sort(np.concatenate(parts))
        self.found[node] = leaves
        self.remembered[node] = True
        return leaves
