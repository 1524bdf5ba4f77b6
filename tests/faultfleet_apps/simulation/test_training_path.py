"""The simulator's choice between the batched and the sequential path, and their agreement."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from faultfleet.errors import UsageError
from faultfleet.models.zoo import build_model
from faultfleet.tasks import TrainConfig
from faultfleet_apps.simulation.config import SimConfig
from faultfleet_apps.simulation.fleet import InProcessFleet
from faultfleet_apps.simulation.runner import build_federation, make_engine, run_simulation
from faultfleet_apps.simulation.training_path import (
    BATCHED_CPU_MAX_PARAMETERS,
    choose_training_path,
    parameter_count,
)

CPU = torch.device("cpu")
CUDA = torch.device("cuda")

TINY = SimConfig(
    strategy="fedavg",
    rounds=2,
    fraction=0.5,
    clients_per_group=1,
    windows_per_client=(40, 60),
    train=TrainConfig(epochs=2, batch_size=16, learning_rate=1e-3),
    device="cpu",
)


@pytest.mark.parametrize(
    ("preference", "parameters", "device", "expected"),
    [
        ("auto", 60_432, CPU, "batched"),
        ("auto", BATCHED_CPU_MAX_PARAMETERS, CPU, "batched"),
        ("auto", BATCHED_CPU_MAX_PARAMETERS + 1, CPU, "sequential"),
        ("auto", 4_409_036, CPU, "sequential"),
        ("auto", 4_409_036, CUDA, "batched"),
        ("auto", 60_432, CUDA, "batched"),
        ("batched", 4_409_036, CPU, "batched"),
        ("sequential", 60_432, CUDA, "sequential"),
    ],
)
def test_choose_training_path(
    preference: str, parameters: int, device: torch.device, expected: str
) -> None:
    assert choose_training_path(preference, parameters, device) == expected


def test_an_unknown_path_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="training_path must be one of auto, batched"):
        choose_training_path("vectorised", 10, CPU)
    with pytest.raises(UsageError, match="training_path must be one of"):
        SimConfig(training_path="fast")


def test_parameter_count_of_the_zoo_models() -> None:
    assert parameter_count(build_model("compact", (1, 1024), 12, seed=0)) == 60_432
    assert parameter_count(build_model("paper", (1, 1024), 12, seed=0)) == 4_409_036


def test_auto_is_left_out_of_the_settings_document_and_read_back() -> None:
    assert "training_path" not in TINY.to_json()
    assert SimConfig.from_json(TINY.to_json()) == TINY
    forced = replace(TINY, training_path="sequential")
    assert forced.to_json()["training_path"] == "sequential"
    assert SimConfig.from_json(forced.to_json()) == forced


@pytest.mark.parametrize(
    ("model", "path", "batched"),
    [("compact", "auto", True), ("paper", "auto", False), ("compact", "sequential", False)],
)
def test_the_engine_trains_on_the_chosen_path(model: str, path: str, batched: bool) -> None:
    config = replace(TINY, model=model, training_path=path)
    engine = make_engine(config, build_federation(config))
    assert isinstance(engine.fleet, InProcessFleet)
    assert engine.fleet.batched is batched


def test_both_paths_give_the_same_run_to_float_rounding() -> None:
    federation = build_federation(TINY)
    runs = {
        path: run_simulation(replace(TINY, training_path=path), federation=federation)
        for path in ("batched", "sequential")
    }
    batched, sequential = runs["batched"], runs["sequential"]
    for a, b in zip(batched.history, sequential.history, strict=True):
        assert a.train_loss == pytest.approx(b.train_loss, rel=1e-4)
        assert a.accuracy == pytest.approx(b.accuracy, abs=0.02)
        assert (a.bytes_up, a.bytes_down, a.answered) == (b.bytes_up, b.bytes_down, b.answered)
    assert batched.clusters == sequential.clusters
