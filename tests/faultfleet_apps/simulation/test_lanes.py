"""Compute lanes: the split of a round's clients, the lanes' threads, and answers that do not
depend on them beyond float rounding."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from torch import nn

from faultfleet.tasks import EvaluateTask, FitResult, GradientTask, LossesTask, Split
from faultfleet_apps.simulation.fleet import InProcessFleet
from faultfleet_apps.simulation.lanes import Lanes, partition
from faultfleet_apps.simulation.stacked_forward import stacked_step_function
from faultfleet_apps.simulation.training_path import compute_lanes
from tests.edge_agent.test_training import tiny_cnn
from tests.faultfleet_apps.simulation.test_fleet import CPU, federation, fitted_to, start
from tests.faultfleet_apps.simulation.test_wire_codec import assert_identical, fit_tasks


@pytest.fixture
def two_torch_threads() -> Iterator[None]:
    """The calling thread computes on two torch threads for the test (one otherwise)."""
    torch.set_num_threads(2)
    try:
        yield
    finally:
        torch.set_num_threads(1)


def test_partition_balances_the_loads_longest_first() -> None:
    loads = {0: 50, 1: 40, 2: 30, 3: 30, 4: 20, 5: 10}

    lanes = partition(loads, 2)

    # 50 → lane 0, 40 → 1, 30 → 1 (40 < 50), 30 → 0 (80 > 70), 20 → 1, 10 → 0
    assert lanes == [[0, 3, 5], [1, 2, 4]]
    assert [sum(loads[p] for p in lane) for lane in lanes] == [90, 90]


def test_partition_uses_every_position_once_and_no_empty_lane() -> None:
    rng = np.random.default_rng(3)
    loads = {
        int(p): int(n) for p, n in zip(rng.permutation(40), rng.integers(0, 600, 40), strict=True)
    }

    for count in (1, 2, 3, 7, 40, 64):
        lanes = partition(loads, count)

        assert len(lanes) == min(count, 40)
        assert all(lanes)
        assert all(lane == sorted(lane) for lane in lanes)
        assert sorted(p for lane in lanes for p in lane) == sorted(loads)
        totals = [sum(loads[p] for p in lane) for lane in lanes]
        assert max(totals) - min(totals) <= max(loads.values())
        assert partition(dict(reversed(list(loads.items()))), count) == lanes


def test_partition_of_nothing_and_bad_arguments() -> None:
    assert partition({}, 3) == []
    with pytest.raises(ValueError, match="lanes must be at least 1"):
        partition({0: 1}, 0)
    with pytest.raises(ValueError, match=r"positions \[2\] are negative"):
        partition({0: 1, 2: -1}, 2)


def test_lanes_run_side_by_side_on_one_torch_thread_each(two_torch_threads: None) -> None:
    lanes = Lanes(nn.Linear(2, 2), 2)
    seen: dict[int, tuple[int, int, nn.Module]] = {}
    both_started = threading.Barrier(2, timeout=10)

    def work(model: nn.Module, positions: list[int]) -> dict[int, int]:
        both_started.wait()  # fails unless the two lanes run at the same time
        seen[positions[0]] = (threading.get_ident(), torch.get_num_threads(), model)
        return {p: p * 10 for p in positions}

    answers = lanes.run({0: 5, 1: 4, 2: 3}, work)

    assert answers == {0: 0, 1: 10, 2: 20}
    idents = {ident for ident, _, _ in seen.values()}
    assert len(idents) == 2
    assert threading.get_ident() not in idents
    assert [threads for _, threads, _ in seen.values()] == [1, 1]
    assert seen[0][2] is lanes.models[0]
    assert seen[1][2] is lanes.models[1]
    assert lanes.models[0] is not lanes.models[1]
    assert torch.get_num_threads() == 2  # the caller's setting is back


def test_one_lane_computes_in_the_calling_thread(two_torch_threads: None) -> None:
    model = nn.Linear(2, 2)
    lanes = Lanes(model, 1)
    seen: list[tuple[int, int, nn.Module]] = []

    def work(lane_model: nn.Module, positions: list[int]) -> dict[int, int]:
        seen.append((threading.get_ident(), torch.get_num_threads(), lane_model))
        return dict.fromkeys(positions, 1)

    assert lanes.run({0: 1, 1: 1}, work) == {0: 1, 1: 1}
    assert seen == [(threading.get_ident(), 2, model)]


def test_prepare_runs_for_every_lane_model_in_the_calling_thread_first() -> None:
    prepared: list[tuple[int, nn.Module]] = []

    lanes = Lanes(nn.Linear(2, 2), 3, prepare=lambda m: prepared.append((threading.get_ident(), m)))

    assert [m for _, m in prepared] == lanes.models
    assert {ident for ident, _ in prepared} == {threading.get_ident()}
    alone: list[nn.Module] = []
    Lanes(nn.Linear(2, 2), 1, prepare=alone.append)
    assert alone == []  # one lane computes in the caller: nothing can run beside it


def test_a_model_is_traced_once_and_its_step_function_kept() -> None:
    model = tiny_cnn()

    first = stacked_step_function(model)

    assert first is not None
    assert stacked_step_function(model) is first
    assert stacked_step_function(tiny_cnn()) is not first


def test_an_error_in_a_lane_reaches_the_caller_after_every_lane_ended() -> None:
    lanes = Lanes(nn.Linear(2, 2), 2)
    finished: list[int] = []

    def work(model: nn.Module, positions: list[int]) -> dict[int, int]:
        if 0 in positions:
            raise RuntimeError("lane diverged")
        finished.append(positions[0])
        return {}

    with pytest.raises(RuntimeError, match="lane diverged"):
        lanes.run({0: 2, 1: 1}, work)
    assert finished == [1]
    with pytest.raises(ValueError, match="lanes must be at least 1"):
        Lanes(nn.Linear(2, 2), 0)


def all_kinds_of_task() -> list[tuple[str, list[object]]]:
    models = {"one": start(), "two": fitted_to("c")}
    return [
        ("fit", list(fit_tasks())),
        ("evaluate", [EvaluateTask(c, models, Split.VAL) for c in ("a", "c", "nobody", "d")]),
        ("losses", [LossesTask(c, models) for c in ("b", "d", "a")]),
        ("gradients", [GradientTask(c, models, 5, 9) for c in ("a", "c", "b")]),
    ]


def test_sequential_answers_do_not_depend_on_the_lanes() -> None:
    # one torch thread everywhere: a client's computation is the same in any lane
    one = InProcessFleet(federation(), tiny_cnn(), device=CPU, batched=False)
    three = InProcessFleet(federation(), tiny_cnn(), device=CPU, batched=False, lanes=3)

    for method, tasks in all_kinds_of_task():
        expected = getattr(one, method)(1, tasks)
        actual = getattr(three, method)(1, tasks)

        assert actual.failures == expected.failures, method
        assert len(actual.results) == len(expected.results) > 0
        for a, e in zip(actual.results, expected.results, strict=True):
            assert_identical(a, e)


def test_batched_answers_in_lanes_agree_to_rounding_and_repeat_exactly() -> None:
    one = InProcessFleet(federation(), tiny_cnn(), device=CPU)
    two = InProcessFleet(federation(), tiny_cnn(), device=CPU, lanes=2)

    for method, tasks in all_kinds_of_task():
        expected = getattr(one, method)(1, tasks)
        actual = getattr(two, method)(1, tasks)
        again = getattr(two, method)(1, tasks)

        assert actual.failures == expected.failures, method
        for a, e, r in zip(actual.results, expected.results, again.results, strict=True):
            assert_identical(r, a)  # the same lanes give the same answers
            assert a.client_id == e.client_id
            if isinstance(e, FitResult):
                assert a.model_key == e.model_key
                np.testing.assert_allclose(a.weights, e.weights, rtol=0, atol=1e-5)


def test_compute_lanes_is_one_per_thread_on_the_cpu_only() -> None:
    assert compute_lanes(torch.device("cpu"), 4) == 4
    assert compute_lanes(torch.device("cuda"), 4) == 1
    with pytest.raises(ValueError, match="threads must be at least 1"):
        compute_lanes(torch.device("cpu"), 0)
