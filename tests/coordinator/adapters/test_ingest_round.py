"""The coordinator's merge of ingest workers' summaries and partial sums."""

from __future__ import annotations

import numpy as np
import pytest

from coordinator.adapters.ingest_round import IngestRound
from coordinator.strategies.robust import AggregationPolicy
from coordinator.strategies.streaming import UpdateStream
from faultfleet.tasks import FitResult
from faultfleet.wire.codec import WireError, encode_frame, encode_tensors
from faultfleet.wire.ingest_messages import IngestReady, PartialSum, UpdateSummary
from faultfleet.wire.messages import TensorEncoding

BASE = np.zeros(6, dtype=np.float32)
SKETCH = np.ones(3, dtype=np.float32) / np.sqrt(3)


def merged() -> IngestRound:
    tasks = {"t1": "a1", "t2": "a2", "t3": "a3"}
    return IngestRound(
        "r1", 2, {"global": BASE}, sketch_dim=3, max_payload_bytes=1 << 16, tasks=tasks
    )


def summary(worker: str, task: str, agent: str) -> bytes:
    message = UpdateSummary(
        run_id="r1",
        server_round=2,
        worker_id=worker,
        task_id=task,
        agent_id=agent,
        model_key="global",
        num_samples=10,
        train_loss=0.1,
        norm=1.0,
    )
    return encode_frame(message, encode_tensors({"sketch": SKETCH}, TensorEncoding()))


def partial(worker: str, mean: float, weight: float, updates: int, closing: int) -> bytes:
    message = PartialSum(
        run_id="r1",
        server_round=2,
        worker_id=worker,
        model_key="global",
        weight=weight,
        updates=updates,
        closing=closing,
    )
    body = {"mean": np.full(6, mean, dtype=np.float32)}
    return encode_frame(message, encode_tensors(body, TensorEncoding()))


def test_a_second_summary_of_a_task_and_one_of_another_agent_are_refused() -> None:
    round_ = merged()

    for worker, task, agent in [("w1", "t1", "a1"), ("w2", "t1", "a1"), ("w2", "t2", "a9")]:
        round_.on_message("s", summary(worker, task, agent))

    assert [u.client_id for u in round_.updates()] == ["a1"]
    assert round_.close_message().refused == {"w2": ("t1", "t2")}


def test_the_partial_sums_merge_into_the_weighted_mean() -> None:
    # Prepare: w1 folded 1 update (weight 10, mean +1), w2 two (weight 30, mean -1)
    round_ = merged()
    for worker, task, agent in [("w1", "t1", "a1"), ("w2", "t2", "a2"), ("w2", "t3", "a3")]:
        round_.on_message("s", summary(worker, task, agent))
    close = round_.close_message()

    # Execute
    round_.on_message("s", partial("w1", 1.0, 10.0, 1, close.closing))
    halfway = round_.complete()
    round_.on_message("s", partial("w2", -1.0, 30.0, 2, close.closing))

    # Assert: (10 × 1 + 30 × -1) / 40 = -0.5
    assert not halfway
    assert round_.complete()
    np.testing.assert_allclose(round_.average("global"), np.full(6, -0.5), atol=1e-7)
    assert round_.report("global").updates == 3


def test_a_summary_refused_after_the_close_asks_for_another() -> None:
    # Prepare: the close went out; then w2's copy of t1 arrives, which w2 folded
    round_ = merged()
    round_.on_message("s", summary("w1", "t1", "a1"))
    first = round_.close_message()
    round_.on_message("s", summary("w2", "t1", "a1"))
    round_.on_message("s", partial("w1", 1.0, 10.0, 1, first.closing))
    round_.on_message("s", partial("w2", 1.0, 10.0, 1, first.closing))

    # Execute
    again = round_.must_close_again()
    second = round_.close_message()
    round_.on_message("s", partial("w1", 1.0, 10.0, 1, second.closing))
    stale = round_.complete()  # w2's answer to the first close does not count
    round_.on_message("s", partial("w2", 0.0, 0.0, 0, second.closing))

    # Assert
    assert again
    assert not round_.must_close_again()
    assert second.refused == {"w2": ("t1",)}
    assert second.closing == first.closing + 1
    assert stale is True  # w2 had nothing accepted: only w1's count matters
    np.testing.assert_allclose(round_.average("global"), np.ones(6), atol=1e-7)


def test_one_worker_gives_what_one_process_folds() -> None:
    rng = np.random.default_rng(0)
    stream = UpdateStream(2, {"global": BASE}, AggregationPolicy(), {})
    for i in range(5):
        weights = rng.standard_normal(6).astype(np.float32)
        stream.add(FitResult(f"a{i}", "global", weights, None, 3 + i, 0.1, base=BASE))
    mean, weight = stream.partial("global")
    round_ = IngestRound("r1", 2, {"global": BASE}, sketch_dim=3, max_payload_bytes=1 << 16)

    message = PartialSum(
        run_id="r1", server_round=2, worker_id="w1", model_key="global", weight=weight, updates=5
    )
    round_.close_message()
    round_.on_message("s", encode_frame(message, encode_tensors({"mean": mean}, TensorEncoding())))

    np.testing.assert_allclose(round_.average("global"), stream.average("global"), atol=1e-6)


def worker_partial(worker: str, stream: UpdateStream) -> bytes:
    """What a worker sends at the close for ``stream``'s fold of ``global``."""
    mean, weight = stream.partial("global")
    raw = stream.raw_partial("global")
    message = PartialSum(
        run_id="r1",
        server_round=2,
        worker_id=worker,
        model_key="global",
        weight=weight,
        updates=stream.report("global").updates,
        clipped=stream.report("global").norm_clipped,
        raw_weight=None if raw is None else raw[1],
    )
    tensors = {"mean": mean} if raw is None else {"mean": mean, "raw_mean": raw[0]}
    return encode_frame(message, encode_tensors(tensors, TensorEncoding()))


def test_two_workers_raw_means_merge_into_the_one_process_mean_of_the_updates_as_sent() -> None:
    # Prepare: updates under a fixed clip of 1.0, one of them loud (norm 50): the folded mean
    # and the mean of the updates as sent (CFL's ε₁) differ
    rng = np.random.default_rng(1)
    policy = AggregationPolicy(clip_norm=1.0)
    results = []
    for i in range(6):
        weights = (rng.standard_normal(6) * (50.0 if i == 2 else 0.2)).astype(np.float32)
        results.append(FitResult(f"a{i}", "global", weights, None, 2 + i, 0.1, base=BASE))

    def folded(members: list[FitResult]) -> UpdateStream:
        stream = UpdateStream(2, {"global": BASE}, policy, {}, raw_means=True)
        for result in members:
            stream.add(result)
        return stream

    one_process = folded(results)

    # Execute: two workers fold three updates each; the coordinator's stream absorbs them
    round_ = IngestRound("r1", 2, {"global": BASE}, sketch_dim=3, max_payload_bytes=1 << 16)
    round_.close_message()
    round_.on_message("s", worker_partial("w1", folded(results[:3])))
    round_.on_message("s", worker_partial("w2", folded(results[3:])))
    coordinator = UpdateStream(2, {"global": BASE}, policy, {}, raw_means=True)
    coordinator.absorb((), round_.totals())

    # Assert: the clipped average and the raw mean's norm are the one process's
    expected = one_process.mean_update_norm("global")
    assert expected > 2 * float(np.linalg.norm(one_process.partial("global")[0]))
    assert coordinator.mean_update_norm("global") == pytest.approx(expected, rel=1e-6)
    np.testing.assert_allclose(
        coordinator.average("global"), one_process.average("global"), atol=1e-6
    )


def test_partial_sums_without_raw_means_are_refused_by_a_stream_that_keeps_them() -> None:
    # Prepare: a worker asked for no raw means
    plain = UpdateStream(2, {"global": BASE}, AggregationPolicy(clip_norm=1.0), {})
    plain.add(FitResult("a1", "global", np.ones(6, np.float32), None, 3, 0.1, base=BASE))
    round_ = IngestRound("r1", 2, {"global": BASE}, sketch_dim=3, max_payload_bytes=1 << 16)
    round_.close_message()
    round_.on_message("s", worker_partial("w1", plain))
    keeping = UpdateStream(
        2, {"global": BASE}, AggregationPolicy(clip_norm=1.0), {}, raw_means=True
    )

    # Execute / Assert
    assert keeping.keeps_raw_means
    assert not plain.keeps_raw_means
    with pytest.raises(ValueError, match="raw means"):
        keeping.absorb((), round_.totals())

    # ... and so are they when only one of two workers carries them, whichever came first
    def one_update(raw_means: bool) -> UpdateStream:
        stream = UpdateStream(
            2, {"global": BASE}, AggregationPolicy(clip_norm=1.0), {}, raw_means=raw_means
        )
        stream.add(FitResult("a2", "global", np.full(6, 2, np.float32), None, 1, 0.1, base=BASE))
        return stream

    for first, second in ((True, False), (False, True)):
        mixed = IngestRound("r1", 2, {"global": BASE}, sketch_dim=3, max_payload_bytes=1 << 16)
        mixed.close_message()
        mixed.on_message("s", worker_partial("w1", one_update(first)))
        mixed.on_message("s", worker_partial("w2", one_update(second)))
        assert mixed.totals()["global"].raw_total is None


def ready(worker: str) -> bytes:
    return encode_frame(IngestReady(run_id="r1", server_round=2, worker_id=worker))


def test_a_worker_dropped_mid_round_loses_its_summaries_and_rejoins_with_empty_sums() -> None:
    # Prepare: w1 summarised t1, w2 t2
    round_ = merged()
    for worker in ("w1", "w2"):
        round_.on_message("s", ready(worker))
    round_.on_message("s", summary("w1", "t1", "a1"))
    round_.on_message("s", summary("w2", "t2", "a2"))

    # Execute: w2 goes offline; a late summary of it arrives; it comes back (takes the
    # plan again) and summarises t1's repeated answer, which w1 already counted
    dropped = round_.drop("w2")
    late = round_.counted()
    round_.on_message("s", ready("w2"))
    round_.on_message("s", summary("w2", "t2", "a2"))
    round_.on_message("s", summary("w2", "t1", "a1"))

    # Assert: t2 counted again, through the rejoined w2; its refusal of t1 goes to the close
    assert dropped == ("t2",)
    assert late == {"t1"}
    assert round_.ready() == {"w1", "w2"}
    assert round_.counted() == {"t1", "t2"}
    assert round_.close_message().refused == {"w2": ("t1",)}
    assert round_.dropped == {}


def test_a_worker_dropped_after_the_close_cannot_rejoin() -> None:
    round_ = merged()
    round_.on_message("s", summary("w1", "t1", "a1"))
    round_.close_message()

    assert round_.drop("w1") == ("t1",)
    with pytest.raises(WireError, match="dropped"):
        round_.on_message("s", ready("w1"))
    assert round_.complete()
    assert round_.dropped == {"w1": ("t1",)}


def test_a_round_planned_without_sketches_takes_summaries_without_one() -> None:
    # Prepare: FedAvg's round: the plan has no sketch
    round_ = IngestRound("r1", 2, {"global": BASE}, sketch_dim=0, max_payload_bytes=1 << 16)
    bare = UpdateSummary(
        run_id="r1",
        server_round=2,
        worker_id="w1",
        task_id="t1",
        agent_id="a1",
        model_key="global",
        num_samples=10,
        train_loss=0.1,
        norm=1.0,
    )

    # Execute
    round_.on_message("s", encode_frame(bare, encode_tensors({}, TensorEncoding())))

    # Assert: taken without a sketch; one that carries a sketch anyway is refused
    (update,) = round_.updates()
    assert (update.client_id, update.sketch) == ("a1", None)
    with pytest.raises(WireError, match="expected tensors"):
        round_.on_message("s", summary("w1", "t2", "a2"))
