"""The peer benchmark's workload as a Flower simulation (Ray backend, Flower's Message API).

Written as a Flower user would write it (Flower's PyTorch quickstart): a ``ClientApp``
whose train handler loads its partition, trains the received weights with the same plain
loop as the bare runner (:func:`peers_workload.train_plain`) and answers the new weights
with ``num-examples``; a ``ServerApp`` running Flower's own ``FedAvg`` strategy. Two things
are set so that Flower does exactly the benchmark's work:

* the clients sampled in each round, with their training seeds, are the workload's
  (faultfleet's draws): a ``FedAvg`` subclass sends round r's train messages to the nodes
  of those partitions, learnt from one query message per node before round 1;
* there is no federated evaluation during the run (``fraction_evaluate = 0``); after the
  last round every node evaluates the final global model on its test split once.

Ray runs one ``ClientAppActor`` per core the process may use (``num_cpus = 1`` per
client), each with the torch threads of the thread policy
(:mod:`faultfleet_apps.thread_policy`: one here, since actors fill the cores).

Imports of ``flwr`` happen in :func:`run_flower`, so the other runners work without it.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from peers_workload import (
    Record,
    Workload,
    accuracy_plain,
    initial_model,
    load_client,
    load_workload,
    train_plain,
)

from faultfleet_apps.thread_policy import torch_threads, usable_cores

_CACHE: dict[int, Any] = {}
"""Per actor process: the partition's tensors, loaded on first use."""


def _partition(folder: Path, workload: Workload, index: int) -> Any:
    if index not in _CACHE:
        client = load_client(folder, workload, index)
        _CACHE[index] = (
            client,
            torch.from_numpy(client.train.x),
            torch.from_numpy(client.train.y),
        )
    return _CACHE[index]


def run_flower(folder: Path, started: float) -> Record:
    """The workload as a Flower simulation; ``started`` is the process's start (epoch s)."""
    # Flower is optional: imported here, so that the other runners work without it.
    from flwr.app import (  # noqa: PLC0415
        ArrayRecord,
        ConfigRecord,
        Context,
        Message,
        MessageType,
        MetricRecord,
        RecordDict,
    )
    from flwr.clientapp import ClientApp  # noqa: PLC0415
    from flwr.serverapp import Grid, ServerApp  # noqa: PLC0415
    from flwr.serverapp.strategy import FedAvg  # noqa: PLC0415
    from flwr.simulation import run_simulation  # noqa: PLC0415

    workload = load_workload(folder)
    actors = usable_cores()
    threads = torch_threads(cores=actors, workers=actors)
    model_state = initial_model(folder, workload).state_dict()
    record: Record = {"round_s": []}

    def node_partition(context: Context) -> int:
        torch.set_num_threads(threads)
        return int(context.node_config["partition-id"])

    def query(message: Message, context: Context) -> Message:
        content = RecordDict({"node": ConfigRecord({"partition": node_partition(context)})})
        return Message(content, reply_to=message)

    def train(message: Message, context: Context) -> Message:
        index = node_partition(context)
        client, x, y = _partition(folder, workload, index)
        model = initial_model(folder, workload)
        model.load_state_dict(message.content["arrays"].to_torch_state_dict())
        seed = int(message.content["config"]["seed"])
        loss = train_plain(model, x, y, workload, seed)
        metrics = MetricRecord({"train_loss": loss, "num-examples": len(client.train)})
        content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics})
        return Message(content, reply_to=message)

    def evaluate(message: Message, context: Context) -> Message:
        client, _, _ = _partition(folder, workload, node_partition(context))
        model = initial_model(folder, workload)
        model.load_state_dict(message.content["arrays"].to_torch_state_dict())
        accuracy = accuracy_plain(model, client.test.x, client.test.y)
        metrics = MetricRecord({"accuracy": accuracy, "num-examples": len(client.test)})
        return Message(RecordDict({"metrics": metrics}), reply_to=message)

    node_of: dict[int, int] = {}
    """Node id of every partition, from the query before round 1."""
    round_began = [0.0]

    class ScheduledFedAvg(FedAvg):  # type: ignore[misc]
        """FedAvg training the workload's clients of each round, with their seeds."""

        def configure_train(
            self, server_round: int, arrays: Any, config: Any, grid: Any
        ) -> list[Any]:
            round_began[0] = time.perf_counter()
            return [
                Message(
                    RecordDict({"arrays": arrays, "config": ConfigRecord({"seed": seed})}),
                    message_type=MessageType.TRAIN,
                    dst_node_id=node_of[index],
                )
                for index, seed in workload.schedule[server_round - 1]
            ]

        def aggregate_train(self, server_round: int, replies: Any) -> Any:
            aggregated = super().aggregate_train(server_round, replies)
            record["round_s"].append(time.perf_counter() - round_began[0])
            return aggregated

    def main(grid: Grid, context: Context) -> None:
        while len(nodes := list(grid.get_node_ids())) < len(workload.clients):
            time.sleep(0.05)  # the simulated nodes register one after the other
        probes = [
            Message(RecordDict(), message_type=MessageType.QUERY, dst_node_id=node)
            for node in nodes
        ]
        strategy = ScheduledFedAvg(fraction_evaluate=0.0, min_available_nodes=len(nodes))
        for reply in grid.send_and_receive(probes):
            partition = int(reply.content["node"]["partition"])
            node_of[partition] = reply.metadata.src_node_id
        record["startup_s"] = time.time() - started
        result = strategy.start(
            grid=grid, initial_arrays=ArrayRecord(model_state), num_rounds=workload.rounds
        )
        began = time.perf_counter()
        final = RecordDict({"arrays": result.arrays})
        asks = [
            Message(final, message_type=MessageType.EVALUATE, dst_node_id=node) for node in nodes
        ]
        accuracies = [float(r.content["metrics"]["accuracy"]) for r in grid.send_and_receive(asks)]
        record["eval_s"] = time.perf_counter() - began
        record["final_accuracy"] = float(np.mean(accuracies))

    client_app = ClientApp()
    client_app.query()(query)
    client_app.train()(train)
    client_app.evaluate()(evaluate)
    server_app = ServerApp()
    server_app.main()(main)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=len(workload.clients),
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {"num_cpus": actors, "include_dashboard": False},
        },
    )
    if "final_accuracy" not in record:
        raise RuntimeError("the Flower simulation ended before its final evaluation")
    return record
