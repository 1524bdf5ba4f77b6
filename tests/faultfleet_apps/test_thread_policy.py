"""The thread policy: explicit requests win, otherwise the cores are shared, never over."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from faultfleet_apps.thread_policy import (
    SINGLE_THREAD_MAX_PARAMETERS,
    TrainingThreads,
    apply_thread_policy,
    decide_training_threads,
    requested_threads,
    torch_threads,
    usable_cores,
    worker_plan,
)


@pytest.fixture
def restore_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("cores", "workers", "requested", "expected"),
    [
        (2, 1, None, 2),
        (16, 1, None, 16),
        (16, 4, None, 4),
        (16, 3, None, 5),  # 3 × 5 = 15 <= 16: rounded down, never over
        (2, 2, None, 1),
        (2, 5, None, 1),  # more workers than cores: one thread each, the least there is
        (2, 1, 4, 4),  # an explicit request wins
        (16, 4, 1, 1),
    ],
)
def test_torch_threads(cores: int, workers: int, requested: int | None, expected: int) -> None:
    assert torch_threads(cores=cores, workers=workers, requested=requested) == expected


@pytest.mark.parametrize("cores", [1, 2, 3, 8, 16, 64])
@pytest.mark.parametrize("workers", [1, 2, 3, 4, 7])
def test_shared_cores_are_never_oversubscribed_unless_there_are_more_workers(
    cores: int, workers: int
) -> None:
    threads = torch_threads(cores=cores, workers=workers)
    assert threads >= 1
    assert threads * workers <= max(cores, workers)


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("cores", {"cores": 0}),
        ("workers", {"cores": 2, "workers": 0}),
        ("requested threads", {"cores": 2, "requested": 0}),
    ],
)
def test_torch_threads_rejects_counts_below_one(name: str, kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=f"{name} must be at least 1"):
        torch_threads(**kwargs)


@pytest.mark.parametrize(
    ("option", "environ", "expected"),
    [
        (3, {"OMP_NUM_THREADS": "1"}, 3),  # --threads beats the environment
        (None, {"OMP_NUM_THREADS": "1"}, 1),
        (None, {"OMP_NUM_THREADS": " 4 "}, 4),
        (None, {}, None),
        (None, {"OMP_NUM_THREADS": ""}, None),
        (None, {"OMP_NUM_THREADS": "0"}, None),  # not a request: ignored
        (None, {"OMP_NUM_THREADS": "two"}, None),
        (None, {"OMP_NUM_THREADS": "4,2"}, None),  # OpenMP's nested form: ignored
    ],
)
def test_requested_threads(option: int | None, environ: dict[str, str], expected: int) -> None:
    assert requested_threads(option, environ) == expected


def test_requested_threads_rejects_zero() -> None:
    with pytest.raises(ValueError, match="threads must be at least 1, got 0"):
        requested_threads(0, {})


@pytest.mark.parametrize(
    ("cores", "jobs", "threads", "expected"),
    [
        (2, None, None, (2, 1)),  # one single-threaded worker per core
        (16, None, None, (16, 1)),
        (16, None, 4, (4, 4)),
        (2, None, 4, (1, 4)),
        (16, 4, None, (4, 4)),
        (16, 32, None, (32, 1)),
        (2, 3, 2, (3, 2)),  # both given: kept
    ],
)
def test_worker_plan(
    cores: int, jobs: int | None, threads: int | None, expected: tuple[int, int]
) -> None:
    assert worker_plan(cores=cores, jobs=jobs, threads=threads) == expected


def test_usable_cores_is_at_least_one_and_at_most_the_machine() -> None:
    assert 1 <= usable_cores() <= (os.cpu_count() or 1)


@pytest.mark.usefixtures("restore_threads")
def test_apply_sets_torch_threads_from_the_option_then_the_environment() -> None:
    assert apply_thread_policy(3, environ={"OMP_NUM_THREADS": "1"}) == 3
    assert torch.get_num_threads() == 3
    assert apply_thread_policy(None, environ={"OMP_NUM_THREADS": "2"}) == 2
    assert torch.get_num_threads() == 2
    shared = apply_thread_policy(None, workers=usable_cores(), environ={})
    assert shared == 1
    assert torch.get_num_threads() == 1


@pytest.mark.usefixtures("restore_threads")
def test_an_oversubscribing_request_is_kept_and_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cores = usable_cores()
    with caplog.at_level("WARNING", logger="faultfleet_apps.thread_policy"):
        assert apply_thread_policy(cores + 1, environ={}) == cores + 1
    assert "oversubscribe" in caplog.text


def test_small_models_train_on_one_thread_unless_threads_were_requested() -> None:
    decided = TrainingThreads(threads=4, requested=False)
    asked = TrainingThreads(threads=4, requested=True)

    assert decided.for_model(60_432) == 1  # compact
    assert decided.for_model(SINGLE_THREAD_MAX_PARAMETERS) == 1
    assert decided.for_model(SINGLE_THREAD_MAX_PARAMETERS + 1) == 4
    assert decided.for_model(4_409_036) == 4  # paper
    assert asked.for_model(60_432) == 4
    assert TrainingThreads(threads=1, requested=False).for_model(10**7) == 1
    with pytest.raises(ValueError, match="threads must be at least 1"):
        TrainingThreads(threads=0, requested=False)


def test_decide_training_threads_says_whether_threads_were_requested() -> None:
    shared = decide_training_threads(None, workers=usable_cores(), environ={})
    from_environment = decide_training_threads(None, environ={"OMP_NUM_THREADS": "3"})
    from_option = decide_training_threads(2, environ={"OMP_NUM_THREADS": "3"})

    assert shared == TrainingThreads(threads=1, requested=False)
    assert from_environment == TrainingThreads(threads=3, requested=True)
    assert from_option == TrainingThreads(threads=2, requested=True)
