"""``MergeHistory``: FLACC's merges kept as a forest give back exactly the merges an explicit
record of every client list holds, through joins, departures, hand-set entities and saving,
in memory that grows with the merges, not with their sizes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.strategies.agglomeration import MergeDecision
from coordinator.strategies.evidence import Merge
from coordinator.strategies.flacc import FLACC
from coordinator.strategies.merge_history import MergeHistory
from tests.coordinator.strategies.test_pairwise_strategies import run


class ExplicitRecord:
    """What FLACC kept before: entities of client positions, every merge with its ids."""

    def __init__(self, ids: list[str]) -> None:
        self.ids = list(ids)
        self.registrations = list(range(len(ids)))  # a client back under its id is new
        self.registered = len(ids)
        self.entities: list[tuple[int, ...]] = [(i,) for i in range(len(ids))]
        self.merges: list[Merge] = []
        self.merged: list[list[int]] = []  # the registrations of each merge

    def merge(self, a: int, b: int, server_round: int, value: float) -> MergeDecision:
        first, second = self.entities[a], self.entities[b]
        self.merges.append(
            Merge(
                server_round,
                tuple(self.ids[i] for i in first),
                tuple(self.ids[i] for i in second),
                value,
                0.0,
            )
        )
        self.merged.append([self.registrations[i] for i in first + second])
        self.entities[a] = tuple(sorted(first + second))
        del self.entities[b]
        return MergeDecision(first, second, value, value, None, None, True)

    def leave(self, gone: set[int]) -> list[int]:
        kept = [i for i in range(len(self.ids)) if i not in gone]
        new = {old: new for new, old in enumerate(kept)}
        self.ids = [self.ids[i] for i in kept]
        self.registrations = [self.registrations[i] for i in kept]
        after = [tuple(new[i] for i in e if i in new) for e in self.entities]
        self.entities = [e for e in after if e]
        return kept

    def join(self, ids: list[str]) -> None:
        m = len(self.ids)
        self.ids += ids
        self.registrations += list(range(self.registered, self.registered + len(ids)))
        self.registered += len(ids)
        self.entities += [(m + i,) for i in range(len(ids))]

    def move(self, client: int, to: int) -> None:
        """A client changes entity without a merge (as a client joining a separated
        federation lands in a cluster): the history must not trust its tree for either."""
        source = next(k for k, e in enumerate(self.entities) if client in e)
        if source == to:
            return
        target = self.entities[to]
        self.entities[source] = tuple(i for i in self.entities[source] if i != client)
        self.entities[to] = tuple(sorted((*target, client)))
        self.entities = [e for e in self.entities if e]

    def labels(self) -> np.ndarray[Any, Any]:
        labels = np.zeros(len(self.ids), dtype=np.int64)
        for label, entity in enumerate(self.entities):
            labels[list(entity)] = label
        return labels

    def weakest(self) -> dict[int, float]:
        """Per label, the lowest similarity of the merges one of whose clients is still
        registered (the same registration: a client that left and came back is a new
        entity, whatever its id) and now carries the label."""
        position = {r: i for i, r in enumerate(self.registrations)}
        labels, weakest = self.labels(), dict[int, float]()
        for merge, merged in zip(self.merges, self.merged, strict=True):
            present = next((r for r in merged if r in position), None)
            if present is not None:
                label = int(labels[position[present]])
                weakest[label] = min(weakest.get(label, np.inf), merge.similarity)
        return weakest


def replay(seed: int, steps: int, save_every: int = 0) -> tuple[ExplicitRecord, MergeHistory]:
    """Random merges (several a round), departures, arrivals and moves, played on both."""
    rng = np.random.default_rng(seed)
    record = ExplicitRecord([f"c{i:03d}" for i in range(int(rng.integers(2, 12)))])
    history = MergeHistory(record.ids)
    fresh = len(record.ids)
    server_round = 1
    for step in range(steps):
        action = rng.random()
        if action < 0.5 and len(record.entities) >= 2:
            decisions = []
            for _ in range(int(rng.integers(1, 4))):
                if len(record.entities) < 2:
                    break
                a, b = sorted(rng.choice(len(record.entities), 2, replace=False).tolist())
                decisions.append(record.merge(a, b, server_round, float(rng.integers(-4, 5)) / 4))
            refused = MergeDecision((0,), (1,), -1.0, -1.0, None, None, False)
            history.record(server_round, [*decisions, refused], 0.0)
            server_round += int(rng.integers(0, 2))
        elif action < 0.7 and len(record.ids) >= 2:
            gone = set(rng.choice(len(record.ids), int(rng.integers(1, 3)), replace=False).tolist())
            history.leave(record.leave(gone))
        elif action < 0.9:
            # a new client, or one that left coming back under its old id
            old = f"c{int(rng.integers(0, fresh)):03d}"
            ids = [f"c{fresh:03d}"] + ([old] if old not in record.ids else [])
            fresh += 1
            record.join(ids)
            history.join(ids)
        elif len(record.entities) >= 2:
            record.move(int(rng.integers(len(record.ids))), int(rng.integers(len(record.entities))))
        if save_every and step % save_every == 0:
            meta, arrays = history.state()
            history = MergeHistory.load(meta, arrays, len(record.ids))
    return record, history


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(0, 40), save_every=st.sampled_from([0, 3]))
def test_the_forest_gives_back_every_merge_an_explicit_record_holds(
    seed: int, steps: int, save_every: int
) -> None:
    # Execute
    record, history = replay(seed, steps, save_every)

    # Assert
    assert history.merges() == tuple(record.merges)
    assert len(history) == len(record.merges)
    last = record.merges[-1].round if record.merges else None
    assert history.last_round == last
    if last is not None:
        assert history.merges_of_round(last) == tuple(m for m in record.merges if m.round == last)
    assert history.weakest(record.labels()) == record.weakest()


def test_a_cluster_grown_one_client_at_a_time_costs_one_node_per_merge() -> None:
    # Prepare: 2,000 clients joined one by one to one cluster: an explicit record holds
    # 2 + 3 + … + 2,000 = 2,000,999 client ids
    record = ExplicitRecord([f"c{i:04d}" for i in range(2000)])
    history = MergeHistory(record.ids)

    # Execute
    for _ in range(1999):
        history.record(1, [record.merge(0, 1, 1, 0.5)], 0.0)
    _, arrays = history.state()

    # Assert: one node per client and per merge, and the merges all there
    assert sum(len(m.first) + len(m.second) for m in record.merges) == 2_000_999
    assert len(arrays["kind"]) == 2000 + 1999
    assert sum(a.size for a in arrays.values()) < 12 * 4000
    assert history.merges()[-1] == record.merges[-1]
    assert history.merges_of_round(1)[1000] == record.merges[1000]


def test_explicit_merges_keep_their_clients_and_order() -> None:
    # Prepare: merges as an earlier version saved them, naming a client no longer there
    merges = [Merge(2, ("c2", "gone"), ("c0",), 0.4, 0.0), Merge(3, ("c1",), ("c3",), 0.7, 0.1)]

    # Execute
    history = MergeHistory.from_merges(["c0", "c1", "c2", "c3"], merges)
    meta, arrays = history.state()
    loaded = MergeHistory.load(meta, arrays, 4)

    # Assert
    assert history.merges() == loaded.merges() == tuple(merges)
    assert loaded.weakest(np.array([0, 1, 0, 1])) == {0: 0.4, 1: 0.7}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a: a.pop("merge_node"), "lacks 'merge_node'"),
        (lambda a: a.update(similarity=np.zeros(5)), "unequal lengths"),
        (lambda a: a.update(root_of=np.array([0, 99])), "points outside"),
        (lambda a: a.update(leaf_of=np.array([0])), "covers 1 clients, the state 2"),
        (lambda a: a.update(a=np.array([0, 1, 2])), "malformed node \\(2\\)"),
        (lambda a: a.update(a=np.array([0, 5, 0])), "malformed node \\(1\\)"),
        (lambda a: a.update(kind=np.array([0, 0, 7], dtype=np.int8)), "malformed node"),
    ],
)
def test_a_damaged_saved_history_is_refused_with_what_is_wrong(change: Any, message: str) -> None:
    # Prepare
    history = MergeHistory(["a", "b"])
    history.record(1, [MergeDecision((0,), (1,), 0.5, 0.5, None, None, True)], 0.0)
    meta, arrays = history.state()
    change(arrays)

    # Execute / Assert
    with pytest.raises(ValueError, match=message):
        MergeHistory.load(meta, arrays, 2)


def flacc(pairwise: str) -> FLACC:
    return FLACC(fraction=0.5, pairwise=pairwise, sketch_epsilon=0.25, n_merge=3)


@pytest.mark.parametrize("pairwise", ["exact", "sketch"])
def test_flacc_saves_its_merges_as_a_forest_and_reads_an_earlier_versions_list(
    pairwise: str,
) -> None:
    # Prepare: a FLACC run that merged, its state, and the state as an earlier version
    # saved it (every merge with its clients)
    strategy = run(flacc(pairwise))
    merges = strategy.merges
    state = strategy.state_dict()
    old = strategy.state_dict()
    old.meta["extra"].pop("merge_history")
    old.meta["extra"]["merges"] = [
        {
            "round": m.round,
            "first": list(m.first),
            "second": list(m.second),
            "similarity": m.similarity,
            "threshold": m.threshold,
        }
        for m in merges
    ]
    old.arrays = {k: v for k, v in old.arrays.items() if not k.startswith("extra/merges/")}

    # Execute
    restored = run(flacc(pairwise), rounds=0)
    restored.load_state_dict(state)
    earlier = run(flacc(pairwise), rounds=0)
    earlier.load_state_dict(old)

    # Assert
    assert merges, "the run should have merged"
    assert "merges" not in state.meta["extra"]
    assert restored.merges == earlier.merges == merges
    assert restored.cluster_evidence().weakest_merges == strategy.cluster_evidence().weakest_merges
    assert earlier.cluster_evidence().weakest_merges == strategy.cluster_evidence().weakest_merges
