"""``RunSummary.to_json``: the summary written after every round, without a deep copy."""

from __future__ import annotations

import json
from dataclasses import asdict, fields

from coordinator.runtime.run_summary import RunSummary


def test_the_json_form_is_what_asdict_gave_without_copying_the_lists() -> None:
    # Prepare: every field set
    summary = RunSummary(
        "run-1",
        "flacc",
        server_round=8,
        rounds=40,
        agents=["m00", "m01"],
        clusters={"cluster-0": ["m00", "m01"]},
        accuracy_by_agent={"m00": 0.9},
        accuracy_by_cluster={"cluster-0": 0.9},
        accuracy=0.9,
        model_version=3,
        rounds_retried=1,
        finished=True,
        cluster_quality={"merges": [{"first": ["m00"], "second": ["m01"], "score": 0.7}]},
        campaign={"id": "c1"},
        recent_promotions=[{"cluster": "cluster-0"}],
        placements=[{"agent": "m01"}],
        privacy={"epsilon": 1.0},
    )

    # Execute
    document = summary.to_json()

    # Assert: the same document, field for field, and the merges not copied
    assert sorted(document) == sorted(f.name for f in fields(RunSummary))
    assert json.dumps(document, sort_keys=True) == json.dumps(asdict(summary), sort_keys=True)
    assert document["cluster_quality"] is summary.cluster_quality
