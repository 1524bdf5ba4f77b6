"""The round's task bookkeeping: when a round counts as finished, in any order of answers,
and again after a settled task is taken back."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.open_tasks import OpenTasks
from coordinator.adapters.round_tasks import Collection, Pending
from faultfleet.tasks import Failure, FitResult
from faultfleet.wire.messages import FitTaskMessage
from tests.clocks import FakeClock


def _pending(agent: str) -> Pending:
    # The header only names the task's kind here; nothing reads its other fields.
    return Pending(f"task-{agent}", agent, 1, {}, FitTaskMessage.model_construct())


def _result(agent: str) -> FitResult:
    zeros = np.zeros(3, dtype=np.float32)
    return FitResult(agent, "global", zeros, zeros, 1, 0.0)


@pytest.mark.parametrize("order", [(0, 1, 2, 3), (3, 2, 1, 0), (2, 0, 3, 1)])
def test_a_round_is_finished_once_every_task_is_settled_in_any_order(
    order: tuple[int, ...],
) -> None:
    # Prepare: four open tasks
    tasks = [_pending(agent) for agent in "abcd"]
    collection = Collection({p.task_id: p for p in tasks})

    # Execute: settle them one at a time (an answer, a failure, a streamed update),
    # asking after each whether the round is finished
    seen = []
    for step, index in enumerate(order):
        pending = tasks[index]
        if step % 3 == 0:
            pending.result = _result(pending.agent_id)
        elif step % 3 == 1:
            pending.failure = Failure(pending.agent_id, "gone")
        else:
            pending.streamed = True
        seen.append(collection.finished())

    # Assert: finished only after the last one
    assert seen == [False, False, False, True]


def test_an_empty_round_is_finished() -> None:
    assert Collection().finished()


def test_a_task_taken_back_makes_the_round_unfinished_until_it_is_settled_again() -> None:
    # Prepare: a round of three tasks, all settled by streamed updates
    tasks = OpenTasks(
        run_id="run-1",
        deadline_s=60.0,
        metrics=CoordinatorMetrics(CollectorRegistry()),
        round_clock=FakeClock(),
    )
    pending = [_pending(agent) for agent in "abc"]
    tasks._open_round(pending)
    for entry in pending:
        assert tasks.settle_streamed(entry)
    finished_before = tasks._collection.finished()

    # Execute: the ingest worker that folded b's and c's updates goes away
    agents = tasks.reopen(["task-b", "task-c"])
    finished_after_reopen = tasks._collection.finished()
    waiting = tasks.waiting_for()
    tasks.settle_streamed(pending[1])
    finished_after_b = tasks._collection.finished()
    tasks.settle_streamed(pending[2])

    # Assert: the round waits for b and c again, and is finished once both are settled
    assert finished_before
    assert agents == ["b", "c"]
    assert not finished_after_reopen
    assert waiting == ["b", "c"]
    assert not finished_after_b
    assert tasks._collection.finished()


def test_an_agents_unanswered_tasks_are_its_open_ones_in_the_rounds_order() -> None:
    # Prepare: two tasks each for a and b, one more for a, interleaved
    tasks = [_pending(agent) for agent in "ab"]
    tasks += [Pending(f"task-{a}-2", a, 1, {}, FitTaskMessage.model_construct()) for a in "ab"]
    tasks.append(Pending("task-a-3", "a", 1, {}, FitTaskMessage.model_construct()))
    collection = Collection({p.task_id: p for p in tasks})

    # Execute: a's first task is answered, its second is being journaled
    tasks[0].result = _result("a")
    tasks[2].journaling = True

    # Assert: only a's third is still unanswered; b has both; nobody else has any
    assert [p.task_id for p in collection.unanswered("a")] == ["task-a-3"]
    assert [p.task_id for p in collection.unanswered("b")] == ["task-b", "task-b-2"]
    assert collection.unanswered("c") == []
