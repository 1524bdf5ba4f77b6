"""Cluster quality on hand-checkable similarity matrices, and its invariants."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.strategies import quality as quality_module
from coordinator.strategies.base import Merge
from coordinator.strategies.evidence import ClusterEvidence
from coordinator.strategies.quality import BORDERLINE, RunQuality, assess
from coordinator.strategies.quality_maths import (
    average_linkage_split,
    block_sums,
    merge_score,
    row_totals,
)


def blocks(groups: list[int], within: float, cross: float) -> np.ndarray:
    """Similarity ``within`` inside a group, ``cross`` between groups, NaN diagonal."""
    g = np.asarray(groups)
    matrix = np.where(g[:, None] == g[None, :], within, cross).astype(np.float64)
    np.fill_diagonal(matrix, np.nan)
    return matrix


def evidence(
    similarity: np.ndarray | None,
    labels: list[int],
    *,
    unrelated: float | None = None,
    merges: tuple[Merge, ...] = (),
    learned: bool = True,
) -> ClusterEvidence:
    ids = tuple(f"c{i}" for i in range(len(labels)))
    return ClusterEvidence(
        ids, tuple(labels), similarity, "test", learned=learned, unrelated=unrelated, merges=merges
    )


def by_label(quality: RunQuality) -> dict[int, tuple[float | None, ...]]:
    return {
        c.label: (c.cohesion, c.margin, c.contrast, c.weakest_link, c.score)
        for c in quality.clusters
    }


def test_two_clean_groups_score_one() -> None:
    # Prepare: two groups of two, 0.8 inside, 0.2 across
    s = blocks([0, 0, 1, 1], 0.8, 0.2)

    # Execute
    quality = assess(evidence(s, [0, 0, 1, 1]))

    # Assert: cohesion 0.8, nearest 0.2, margin 0.6 = contrast, weakest link 0.8 → score 1
    for cluster in quality.clusters:
        assert cluster.cohesion == pytest.approx(0.8)
        assert cluster.nearest_similarity == pytest.approx(0.2)
        assert cluster.margin == pytest.approx(0.6)
        assert cluster.contrast == pytest.approx(0.6)
        assert cluster.weakest_link == pytest.approx(0.8)
        assert cluster.score == pytest.approx(1.0)
        assert not cluster.borderline
    assert quality.confidence == pytest.approx(1.0)
    assert quality.min_margin == pytest.approx(0.6)
    assert quality.borderline_clusters == 0


def test_a_cluster_joining_two_groups_scores_zero() -> None:
    # Prepare: three groups of two; the first two share a cluster
    s = blocks([0, 0, 1, 1, 2, 2], 0.8, 0.1)

    # Execute
    quality = assess(evidence(s, [0, 0, 0, 0, 1, 1]))

    # Assert: cohesion (2·0.8 + 4·0.1)/6 = 1/3, its halves join at 0.1 = the nearest cluster
    joined = quality.clusters[0]
    assert joined.cohesion == pytest.approx(1 / 3)
    assert joined.weakest_link == pytest.approx(0.1)
    assert joined.margin == pytest.approx(1 / 3 - 0.1)
    assert joined.score == pytest.approx(0.0)
    assert joined.borderline
    assert quality.clusters[1].score == pytest.approx(1.0)
    assert quality.confidence == pytest.approx(0.0)
    assert quality.borderline_clusters == 1


def test_a_group_split_in_two_scores_zero() -> None:
    # Prepare: group 0 has three members, split as {c0, c1} and {c2}
    s = blocks([0, 0, 0, 1, 1, 1], 0.8, 0.1)

    # Execute
    quality = assess(evidence(s, [0, 0, 1, 2, 2, 2]))

    # Assert: the pair's nearest cluster is as alike as the pair itself: margin 0
    pair = quality.clusters[0]
    assert pair.nearest == 1
    assert pair.margin == pytest.approx(0.0)
    assert pair.score == pytest.approx(0.0)
    assert quality.clusters[1].score is None  # a single client has no cohesion
    assert quality.clusters[2].score == pytest.approx(1.0)
    assert quality.confidence == pytest.approx(0.0)


def test_scores_between_hand_computed_shares() -> None:
    # Prepare: cluster A = {c0, c1, c2} with pairs 0.9, 0.5, 0.5 (c2 the odd one);
    # cluster B = {c3, c4} with 0.7; every pair across 0.1, except c2–c3 at 0.3
    s = np.full((5, 5), 0.1)
    s[0, 1] = s[1, 0] = 0.9
    s[0, 2] = s[2, 0] = s[1, 2] = s[2, 1] = 0.5
    s[3, 4] = s[4, 3] = 0.7
    s[2, 3] = s[3, 2] = 0.3
    np.fill_diagonal(s, np.nan)

    # Execute
    quality = assess(evidence(s, [0, 0, 0, 1, 1]))

    # Assert (A): w = 1.9/3, across = (5·0.1 + 0.3)/6 = 0.8/6, link {c0,c1}|{c2} = 0.5
    a = quality.clusters[0]
    w, x = 1.9 / 3, 0.8 / 6
    assert a.cohesion == pytest.approx(w)
    assert a.margin == pytest.approx(w - x)
    assert a.contrast == pytest.approx(w - x)
    assert a.weakest_link == pytest.approx(0.5)
    assert a.score == pytest.approx((0.5 - x) / (w - x))
    # (B): w = 0.7, margin 0.7 − 0.8/6; a pair's weakest link is its cohesion
    b = quality.clusters[1]
    assert b.score == pytest.approx(1.0)
    assert quality.confidence == pytest.approx(a.score)


def test_unknown_pairs_are_left_out_of_every_mean() -> None:
    # Prepare: clean blocks, then forget one within pair and one cross pair
    s = blocks([0, 0, 0, 1, 1, 1], 0.8, 0.2)
    s[0, 1] = s[1, 0] = np.nan
    s[0, 3] = s[3, 0] = np.nan

    # Execute
    quality = assess(evidence(s, [0, 0, 0, 1, 1, 1]))

    # Assert
    assert [c.cohesion for c in quality.clusters] == pytest.approx([0.8, 0.8])
    assert [c.nearest_similarity for c in quality.clusters] == pytest.approx([0.2, 0.2])
    assert quality.confidence == pytest.approx(1.0)


def test_a_single_cluster_is_measured_against_unrelated_clients() -> None:
    # Prepare: two groups in one cluster; cosines 0.6 inside a group, 0 across
    s = blocks([0, 0, 0, 1, 1, 1], 0.6, 0.0)

    # Execute
    without = assess(evidence(s, [0] * 6))
    with_reference = assess(evidence(s, [0] * 6, unrelated=0.0))
    clean = assess(evidence(blocks([0] * 4, 0.6, 0.0), [0] * 4, unrelated=0.0))

    # Assert
    assert without.confidence is None
    assert with_reference.clusters[0].nearest is None
    assert with_reference.clusters[0].weakest_link == pytest.approx(0.0)
    assert with_reference.confidence == pytest.approx(0.0)
    assert clean.confidence == pytest.approx(1.0)


def test_given_clusters_have_confidence_one_and_none_without_evidence() -> None:
    given_clusters = assess(evidence(None, [0, 0, 1], learned=False))
    no_evidence = assess(evidence(None, [0, 0, 1]))

    assert (given_clusters.basis, given_clusters.confidence) == ("given", 1.0)
    assert (no_evidence.basis, no_evidence.confidence) == ("none", None)
    assert [c.size for c in no_evidence.clusters] == [2, 1]


def test_merges_of_the_asked_round_are_scored() -> None:
    # Prepare: groups {c0,c1}, {c2,c3}, {c4,c5}; round 7 merged the first two groups,
    # round 6 merged c4 and c5
    s = blocks([0, 0, 1, 1, 2, 2], 0.8, 0.1)
    wrong = Merge(7, ("c0", "c1"), ("c2", "c3"), 0.1, 0.0)
    right = Merge(6, ("c4",), ("c5",), 0.8, 0.0)

    # Execute
    quality = assess(evidence(s, [0, 0, 0, 0, 1, 1], merges=(right, wrong)), server_round=7)

    # Assert: only round 7's merge; it joins at the level of the rest: score 0
    assert [m.merge for m in quality.merges] == [wrong]
    assert quality.merges[0].score == pytest.approx(0.0)
    assert quality.borderline_merges == quality.merges
    document = quality.to_json()
    assert document["merges"][0]["borderline"] is True
    assert document["confidence"] == pytest.approx(0.0)


def test_merge_score_by_hand() -> None:
    s = blocks([0, 0, 0, 1, 1], 0.8, 0.2)
    totals = row_totals(s)

    def score(first: list[int], second: list[int]) -> float | None:
        return merge_score(s, np.asarray(first), np.asarray(second), totals)

    # right: {c0,c1} + {c2}: between 0.8, joined cohesion 0.8, rest {c3,c4} 0.2 → 1
    assert score([0, 1], [2]) == pytest.approx(1.0)
    # wrong: {c0,c1} + {c3,c4}: between 0.2, cohesion (2·0.8+4·0.2)/6 = 0.4, rest {c2} 0.2 → 0
    assert score([0, 1], [3, 4]) == pytest.approx(0.0)
    # two single clients cannot be judged
    assert score([0], [1]) is None


def test_average_linkage_split_by_hand_and_with_unknown_pairs() -> None:
    # Prepare: 0–1 0.9, 2–3 0.8, the rest 0.1; then 0–2 and 1–2 unknown
    s = np.full((4, 4), 0.1)
    s[0, 1] = s[1, 0] = 0.9
    s[2, 3] = s[3, 2] = 0.8
    np.fill_diagonal(s, np.nan)
    members = np.arange(4)

    # Execute
    split = average_linkage_split(s, members)
    s[0, 2] = s[2, 0] = s[1, 2] = s[2, 1] = np.nan
    partial = average_linkage_split(s, members)
    s[[0, 1], 3] = s[3, [0, 1]] = np.nan
    disconnected = average_linkage_split(s, members)

    # Assert
    assert split is not None
    assert partial is not None
    assert sorted(map(list, split)) == [[0, 1], [2, 3]]
    assert sorted(map(list, partial)) == [[0, 1], [2, 3]]
    assert disconnected is None


def test_borderline_bar() -> None:
    assert BORDERLINE == 0.5


# -- invariants ------------------------------------------------------------------------------

group_sizes = st.lists(st.integers(min_value=2, max_value=5), min_size=2, max_size=5)


@given(
    sizes=group_sizes,
    within=st.floats(min_value=0.2, max_value=0.9),
    gap=st.floats(min_value=0.1, max_value=1.0),
)
def test_perfectly_separated_blocks_give_confidence_one(
    sizes: list[int], within: float, gap: float
) -> None:
    groups = [g for g, n in enumerate(sizes) for _ in range(n)]

    quality = assess(evidence(blocks(groups, within, within - gap), groups))

    assert quality.confidence == pytest.approx(1.0)
    assert quality.borderline_clusters == 0


@given(
    sizes=group_sizes,
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    noise=st.floats(min_value=0.0, max_value=0.03),
)
def test_well_separated_noisy_blocks_give_high_confidence(
    sizes: list[int], seed: int, noise: float
) -> None:
    groups = [g for g, n in enumerate(sizes) for _ in range(n)]
    rng = np.random.default_rng(seed)
    s = blocks(groups, 0.6, 0.0)
    jitter = rng.normal(0.0, noise, s.shape)
    s = s + (jitter + jitter.T) / 2

    quality = assess(evidence(s, groups))

    assert quality.confidence is not None
    assert quality.confidence > 0.8


@given(
    sizes=group_sizes,
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    scale=st.floats(min_value=0.1, max_value=10.0),
    offset=st.floats(min_value=-1.0, max_value=1.0),
)
def test_figures_follow_client_order_and_ignore_unit_and_offset(
    sizes: list[int], seed: int, scale: float, offset: float
) -> None:
    # Prepare: a noisy similarity, a clustering that merges the first two groups
    groups = [g for g, n in enumerate(sizes) for _ in range(n)]
    labels = [max(g - 1, 0) for g in groups]
    rng = np.random.default_rng(seed)
    noise = rng.normal(0.0, 0.1, (len(groups), len(groups)))
    s = blocks(groups, 0.6, 0.1) + (noise + noise.T) / 2
    np.fill_diagonal(s, np.nan)
    order = rng.permutation(len(groups))

    # Execute
    base = assess(evidence(s, labels))
    permuted = assess(evidence(s[np.ix_(order, order)], [labels[i] for i in order]))
    affine = assess(evidence(scale * s + offset, labels))

    # Assert: per-cluster scores (by members) and the confidence are unchanged
    def scores(q: RunQuality, ids: list[str]) -> dict[frozenset[str], float | None]:
        return {frozenset(ids[int(m[1:])] for m in c.members): c.score for c in q.clusters}

    plain_ids = [f"c{i}" for i in range(len(groups))]
    permuted_ids = [f"c{i}" for i in order]
    expected = scores(base, plain_ids)
    got = scores(permuted, permuted_ids)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-9)
    assert permuted.confidence == pytest.approx(base.confidence, abs=1e-9)
    assert affine.confidence == pytest.approx(base.confidence, abs=1e-9)


def test_assessing_runs_with_the_collector_off_and_leaves_it_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Prepare: record the collector's state when the cluster sums are taken
    states: list[bool] = []

    def recording(*args: Any) -> Any:
        states.append(gc.isenabled())
        return block_sums(*args)

    monkeypatch.setattr(quality_module, "block_sums", recording)
    gc.enable()

    # Execute
    quality = assess(evidence(blocks([0, 0, 1, 1], 0.8, 0.2), [0, 0, 1, 1]))

    # Assert
    assert quality.confidence == pytest.approx(1.0)
    assert states == [False]
    assert gc.isenabled()
