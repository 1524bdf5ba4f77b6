"""The cluster-quality text of ``faultfleet sim`` and the demo report."""

from __future__ import annotations

import numpy as np

from coordinator.strategies.base import Merge
from coordinator.strategies.evidence import ClusterEvidence
from coordinator.strategies.quality import MergeQuality, assess
from faultfleet_apps.quality_table import SHOWN, format_quality


def blocks(groups: list[int], within: float, cross: float) -> np.ndarray:
    g = np.asarray(groups)
    matrix = np.where(g[:, None] == g[None, :], within, cross).astype(np.float64)
    np.fill_diagonal(matrix, np.nan)
    return matrix


def document(groups: list[int], labels: list[int], merges: tuple[Merge, ...] = ()) -> dict:  # type: ignore[type-arg]
    ids = tuple(f"m{i:02d}" for i in range(len(groups)))
    evidence = ClusterEvidence(
        ids, tuple(labels), blocks(groups, 0.8, 0.1), "update cosines", merges=merges
    )
    return assess(evidence, server_round=5).to_json()


def test_a_borderline_cluster_and_merge_are_named() -> None:
    # Prepare: groups of two; the first two groups share cluster 0, merged in round 5
    merge = Merge(5, ("m00", "m01"), ("m02", "m03"), 0.1, 0.0)
    doc = document([0, 0, 1, 1, 2, 2], [0, 0, 0, 0, 1, 1], (merge,))

    # Execute
    lines = format_quality(doc)

    # Assert
    assert lines[0] == (
        "cluster quality: confidence 0.000, min margin 0.233, 1 borderline cluster(s) of 2, "
        "1 borderline merge(s) of 1"
    )
    assert lines[1] == "  similarity: update cosines"
    assert lines[3].split()[:2] == ["0", "4"]
    assert lines[3].endswith("borderline")
    assert lines[-2] == "  weakest merge n/a: this strategy does not build clusters by merging"
    assert lines[-1] == (
        "  borderline merge in round 5: 2 + 2 clients at similarity 0.100, score 0.000"
    )


def test_a_merge_listed_in_part_is_counted_by_its_sizes() -> None:
    # Prepare: a summary naming the first clients of a merge of 70 and 60
    merge = Merge(5, tuple(f"a{i}" for i in range(70)), tuple(f"b{i}" for i in range(60)), 0.1, 0.0)
    listed = MergeQuality(merge, 0.2).to_json(listed=3)
    doc = {"basis": "learned", "merges": [listed], "clusters": []}

    # Execute
    lines = format_quality(doc)

    # Assert
    assert listed["first"] == ["a0", "a1", "a2"]
    assert lines[-1] == (
        "  borderline merge in round 5: 70 + 60 clients at similarity 0.100, score 0.200"
    )


def test_given_none_and_missing_documents_are_one_line() -> None:
    given = {"basis": "given"}
    none = {"basis": "none", "measure": "none: no similarity"}

    assert format_quality(given) == [
        "cluster quality: the clusters are given, not learned (confidence 1)"
    ]
    assert format_quality(none) == ["cluster quality: no figures (none: no similarity)"]
    assert format_quality(None) == ["cluster quality: not recorded"]


def test_many_clusters_are_cut_to_the_lowest_scores_and_singles_counted() -> None:
    groups = [g for g in range(SHOWN + 3) for _ in range(2)] + [99]
    doc = document(groups, groups)

    lines = format_quality(doc)

    assert lines[-3] == "  … 3 more clusters"
    assert lines[-2] == "  1 cluster(s) of one client (no cohesion, no score)"
    assert len(lines) == 3 + SHOWN + 3
