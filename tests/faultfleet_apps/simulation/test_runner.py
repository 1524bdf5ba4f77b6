"""Simulated runs end to end on a tiny federation: results, resumption, determinism."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

from coordinator.strategies.robust import DEFAULT_POLICY, AggregationPolicy
from faultfleet.tasks import TrainConfig
from faultfleet_apps.simulation.config import SimConfig, profile
from faultfleet_apps.simulation.runner import build_federation, run_simulation
from signal_pipeline.federation import Federation

TINY = SimConfig(
    strategy="flacc",
    rounds=4,
    fraction=0.5,
    clients_per_group=1,
    windows_per_client=(40, 60),
    train=TrainConfig(epochs=1, batch_size=16, learning_rate=1e-3),
    strategy_options={"n_sep": 2},
    device="cpu",
)


@pytest.fixture(scope="module")
def federation():  # type: ignore[no-untyped-def]
    return build_federation(TINY)


def test_results_document_has_every_field(federation) -> None:  # type: ignore[no-untyped-def]
    result = run_simulation(TINY, federation=federation)
    document = json.loads(json.dumps(result.to_json(), allow_nan=False))
    assert document["scenario"] == "mixed-fault"
    assert document["strategy"] == "flacc"
    assert document["seed"] == 0
    assert document["config"]["train"]["epochs"] == 1
    assert set(document["final"]) == {"accuracy", "num_clusters", "ari", "purity"}
    assert 0.0 <= document["final"]["accuracy"] <= 1.0
    assert set(document["clusters"]) == {c.client_id for c in federation.clients}
    history = document["history"]
    assert [h["round"] for h in history] == [1, 2, 3, 4]
    for record in history:
        for key in ("accuracy", "num_clusters", "ari", "bytes_up", "bytes_down", "seconds"):
            assert record[key] is not None
        assert record["bytes_down"] > 0
        assert record["bytes_up"] > 0
        assert set(record["quality"]) == {
            "confidence",
            "min_margin",
            "borderline_clusters",
            "merges",
        }
    quality = document["cluster_quality"]
    assert quality["basis"] == "learned"
    assert quality["measure"].startswith("cosine similarity of weight updates (FLACC eq. 19)")
    assert sorted(member for c in quality["clusters"] for member in c["members"]) == sorted(
        document["clusters"]
    )
    merged_in_history = [m for h in history for m in h["quality"]["merges"]]
    assert quality["merges"] == merged_in_history
    assert quality["confidence"] is None or 0.0 <= quality["confidence"] <= 1.0
    assert document["aggregation"] == {
        "policy": asdict(DEFAULT_POLICY),
        "norm_clipped": sum(h["norm_clipped"] for h in history),
        "weight_capped": sum(h["weight_capped"] for h in history),
    }
    assert document["privacy"] is None


def test_same_seed_gives_the_same_run(federation) -> None:  # type: ignore[no-untyped-def]
    config = replace(TINY, rounds=2)
    first = run_simulation(config, federation=federation).to_json()
    second = run_simulation(config, federation=federation).to_json()
    for document in (first, second):
        document.pop("wall_seconds")
        for record in document["history"]:
            record.pop("seconds")
    assert first == second


@pytest.mark.parametrize(("stop", "eval_every"), [(1, 1), (3, 1), (3, 2)])
def test_resumed_run_equals_uninterrupted(
    federation: Federation, tmp_path: Path, stop: int, eval_every: int
) -> None:
    config = replace(TINY, eval_every=eval_every)
    uninterrupted = run_simulation(config, federation=federation).to_json()
    run_simulation(config, federation=federation, checkpoint_dir=tmp_path, stop_after=stop)
    resumed = run_simulation(
        config, federation=federation, checkpoint_dir=tmp_path, resume=True
    ).to_json()
    for document in (uninterrupted, resumed):
        document.pop("wall_seconds")
        for record in document["history"]:
            record.pop("seconds")
    assert resumed == uninterrupted


def test_a_resumed_private_run_draws_the_noise_an_uninterrupted_one_does(
    federation: Federation, tmp_path: Path
) -> None:
    private = AggregationPolicy(noise_multiplier=0.5, clip_norm=0.5)
    config = replace(TINY, rounds=3, aggregation=private)
    uninterrupted = run_simulation(config, federation=federation).to_json()
    run_simulation(config, federation=federation, checkpoint_dir=tmp_path, stop_after=2)
    resumed = run_simulation(
        config, federation=federation, checkpoint_dir=tmp_path, resume=True
    ).to_json()
    for document in (uninterrupted, resumed):
        document.pop("wall_seconds")
        for record in document["history"]:
            record.pop("seconds")
    assert resumed == uninterrupted
    assert resumed["privacy"]["rounds"] == 3


def test_settings_without_any_averaging_rule_read_as_before_the_rules() -> None:
    plain = replace(TINY, aggregation=AggregationPolicy())

    assert "aggregation" not in plain.to_json()
    assert SimConfig.from_json(plain.to_json()) == plain
    assert TINY.to_json()["aggregation"] == asdict(DEFAULT_POLICY)
    assert SimConfig.from_json(TINY.to_json()) == TINY


def test_resume_refuses_a_checkpoint_of_other_settings(federation, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run_simulation(TINY, federation=federation, checkpoint_dir=tmp_path, stop_after=1)
    with pytest.raises(ValueError, match="different settings"):
        run_simulation(
            replace(TINY, fraction=1.0), federation=federation, checkpoint_dir=tmp_path, resume=True
        )


def test_profiles_apply_overrides_and_strategy_options() -> None:
    quick = profile("quick", strategy="flacc", rounds=3)
    assert quick.rounds == 3
    assert quick.strategy_options == {"n_sep": 5}
    paper = profile("paper", strategy="ifca", strategy_options={"n_clusters": 6})
    assert paper.fraction == 0.25
    assert paper.train == TrainConfig(optimizer="adam", learning_rate=5e-4, epochs=5, batch_size=32)
    assert paper.strategy_options == {"n_clusters": 6}
    with pytest.raises(ValueError, match="unknown profile 'fast'"):
        profile("fast")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("rounds", 0, "rounds must be >= 1"),
        ("fraction", 1.5, r"sim: fraction must be a finite number in \(0, 1\], got 1.5"),
        ("scenario", "rotated", "unknown scenario 'rotated'"),
        ("device", "tpu", "device must be"),
    ],
)
def test_bad_settings_name_the_field(field: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replace(TINY, **{field: value})
