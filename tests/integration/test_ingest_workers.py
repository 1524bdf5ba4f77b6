"""Ingest workers sharing the results topic through an MQTT 5 shared subscription (Mosquitto):
every update is checked, journaled and summarised by exactly one worker, and the partial
sums merge into the mean one process would fold."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np

from coordinator.adapters.ingest_coordinator import IngestCoordinator
from coordinator.adapters.ingest_worker import IngestWorker
from coordinator.adapters.journal import RoundJournal
from coordinator.strategies.flacc import FLACC
from coordinator.strategies.robust import AggregationPolicy
from coordinator.strategies.sketch import UpdateSketcher
from coordinator.strategies.streaming import UpdateStream
from faultfleet.tasks import FitResult
from faultfleet.wire.codec import encode_frame, encode_tensors
from faultfleet.wire.messages import FitUpdateMessage, TensorEncoding
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from tests.integration.wire_clients import TOPICS

N_PARAMS = 500
AGENTS = [f"a{i:02d}" for i in range(40)]
BASE = np.linspace(-1, 1, N_PARAMS).astype(np.float32)
SKETCH = UpdateSketcher(N_PARAMS, 61, seed=4)


def trained(index: int) -> np.ndarray:
    rng = np.random.default_rng(index)
    return (BASE + 0.1 * rng.standard_normal(N_PARAMS)).astype(np.float32)


def update_frame(index: int) -> bytes:
    message = FitUpdateMessage(
        task_id=f"t{index:03d}",
        run_id="r1",
        server_round=3,
        agent_id=AGENTS[index],
        model_key="global",
        num_samples=10 + index,
        train_loss=0.5,
    )
    return encode_frame(message, encode_tensors({"weights": trained(index)}, TensorEncoding()))


@contextmanager
def connected(settings: BrokerSettings, client_id: str, *, mqtt5: bool) -> Iterator[MqttConnection]:
    connection = MqttConnection(client_id=client_id, settings=settings, mqtt5=mqtt5)
    try:
        yield connection
    finally:
        connection.stop()


def test_two_workers_share_the_updates_and_their_sums_merge_exactly(
    broker_settings: BrokerSettings, tmp_path: Path
) -> None:
    # Prepare: two workers on a shared subscription, each holding at most three updates
    # between receiving and journaling them, the coordinator's end
    budget = 3 * len(update_frame(0))
    opened = UpdateStream(3, {"global": BASE}, AggregationPolicy(), {}, SKETCH)
    with ExitStack() as stack:
        workers = []
        for name in ("w1", "w2"):
            connection = stack.enter_context(connected(broker_settings, name, mqtt5=True))
            worker = IngestWorker(
                connection,
                TOPICS,
                worker_id=name,
                journal=RoundJournal(tmp_path / name),
                max_payload_bytes=1 << 20,
                max_held_bytes=budget,
            )
            worker.start()
            stack.callback(worker.close)
            connection.start()
            assert connection.wait_subscribed(30)
            workers.append(worker)
        link = stack.enter_context(connected(broker_settings, "coordinator", mqtt5=False))
        coordinator = IngestCoordinator(link, TOPICS, max_payload_bytes=1 << 20)
        coordinator.start()
        link.start()
        assert link.wait_subscribed(30)
        agents = stack.enter_context(connected(broker_settings, "agents", mqtt5=False))
        agents.start()
        assert agents.wait_connected(30)

        # Execute: the plan, 40 updates (one sent twice), the close
        tasks = {f"t{i:03d}": a for i, a in enumerate(AGENTS)}
        merged = coordinator.open_round("r1", opened, tasks=tasks)
        assert coordinator.wait_for(lambda r: r.ready() == {"w1", "w2"}, 30)
        for index in [*range(len(AGENTS)), 5]:
            agents.publish(TOPICS.results(AGENTS[index]), update_frame(index))
        summarised = coordinator.wait_for(lambda r: len(r.updates()) == len(AGENTS), 60)
        assert summarised
        assert coordinator.close_round(60) is merged

    # Assert: each update counted once, both workers busy, the journals hold them all
    accepted = [w.counts["accepted"] - w.counts["retracted"] for w in workers]
    journaled = [set(RoundJournal(tmp_path / n).accepted()) for n in ("w1", "w2")]
    assert sum(accepted) == len(AGENTS)
    assert min(accepted) > 0
    assert sum(w.counts["retracted"] + w.counts["duplicate"] for w in workers) == 1
    # ... as the workers' metrics count them: the duplicate refused by reason, or retracted
    for worker in workers:
        registry = worker.metrics.registry
        messages = "faultfleet_ingest_messages_total"
        for outcome in ("accepted", "retracted"):
            counted = registry.get_sample_value(messages, {"outcome": outcome})
            assert counted == worker.counts[outcome]
        rejected = registry.get_sample_value(
            "faultfleet_updates_rejected_total", {"reason": "duplicate"}
        )
        assert rejected == worker.counts["duplicate"]
        assert registry.get_sample_value("faultfleet_ingest_round") == 3
    assert journaled[0] | journaled[1] == {f"t{i:03d}" for i in range(len(AGENTS))}
    # ... within their budgets, every byte given back
    assert [w.held.held for w in workers] == [0, 0]
    assert all(0 < w.held.peak <= budget for w in workers)
    # ... and the merged mean is the one-process fold of the same updates
    results = [
        FitResult(a, "global", trained(i), None, 10 + i, 0.5, base=BASE)
        for i, a in enumerate(AGENTS)
    ]
    single = UpdateStream(3, {"global": BASE}, AggregationPolicy(), {}, SKETCH)
    for result in results:
        single.add(result)
    np.testing.assert_allclose(merged.average("global"), single.average("global"), atol=1e-6)
    sketches = {u.client_id: u.sketch for u in merged.updates()}
    for update in single.updates():
        mine, theirs = sketches[update.client_id], update.sketch
        assert mine is not None
        assert theirs is not None
        np.testing.assert_allclose(mine, theirs, atol=1e-6)
    assert merged.report("global").updates == len(AGENTS)

    # ... which a streaming strategy takes as it takes its own stream
    strategy = FLACC(pairwise="sketch", partners=8, sketch_epsilon=0.9)
    strategy.initialize(AGENTS, lambda _: BASE.copy())
    strategy.aggregate_stream(3, merged, ())
    np.testing.assert_allclose(strategy.models["global"], single.average("global"), atol=1e-6)
