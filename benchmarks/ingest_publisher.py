"""The publisher process of ``bench_ingest.py`` and the pipe protocol that drives it.

One spawned process that stays up for the whole benchmark: a plain ``MqttConnection`` that
answers fit tasks with pre-built ``fit_update`` frames (QoS 1, one per fake agent, on
``{root}/agents/{agent}/results``), back to back, and reports when its first frame went out
and when the last PUBACK came back. The benchmark sends it commands over a
``multiprocessing`` pipe (:func:`publisher_main`) and reads its replies with
:func:`expect`.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from faultfleet.wire.codec import encode_frame, split_frame
from faultfleet.wire.messages import FitUpdateMessage, TensorEncoding
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import DEFAULT_MAX_PAYLOAD_BYTES, BrokerSettings
from faultfleet.wire.topics import Topics

TOPICS = Topics()
WAIT_S = 600.0


def _answer_frames(
    headers: Sequence[dict[str, Any]], body: bytes, encoding: TensorEncoding
) -> list[tuple[str, bytes]]:
    """One ``fit_update`` frame per task header, all with the same tensor ``body``."""
    frames = []
    for header in headers:
        message = FitUpdateMessage(
            task_id=header["task_id"],
            run_id=header["run_id"],
            server_round=header["server_round"],
            agent_id=header["agent_id"],
            model_key=header["model_keys"][0],
            encoding=encoding,
            num_samples=100,
            train_loss=0.5,
        )
        frames.append((TOPICS.results(header["agent_id"]), encode_frame(message, body)))
    return frames


def publisher_main(pipe: Connection, port: int) -> None:
    """Serve commands from ``pipe`` until ``("stop",)``; runs in a spawned process.

    ``("run", mode, body_path, dtype, compression, agent_ids)``: in mode ``"agents"`` send
    ``("ready",)``, wait for one task per agent and answer them all; in mode ``"raw"``
    answer made-up tasks at once. Then send ``("done", first_publish, last_puback, bytes)``
    (Unix time in seconds, bytes of one frame).
    """
    tasks: queue.Queue[dict[str, Any]] = queue.Queue()

    def on_task(topic: str, payload: bytes) -> None:
        header, _ = split_frame(payload, max_bytes=DEFAULT_MAX_PAYLOAD_BYTES)
        tasks.put(header)

    connection = MqttConnection(
        client_id="bench-ingest-publisher", settings=BrokerSettings(host="127.0.0.1", port=port)
    )
    connection.route(f"{TOPICS.root}/agents/+/tasks", on_task)
    connection.start()
    if not (connection.wait_connected(30) and connection.wait_subscribed(30)):
        pipe.send(("error", f"publisher could not connect to 127.0.0.1:{port}"))
        return
    pipe.send(("ready",))
    while (command := pipe.recv())[0] != "stop":
        _, mode, body_path, dtype, compression, agents = command
        body = Path(body_path).read_bytes()
        encoding = TensorEncoding(dtype=dtype, compression=compression)
        if mode == "agents":
            while not tasks.empty():
                tasks.get_nowait()
            pipe.send(("ready",))
            headers = [tasks.get(timeout=WAIT_S) for _ in agents]
        else:
            made_up = {"run_id": "raw", "server_round": 1, "model_keys": ["global"]}
            headers = [
                {**made_up, "task_id": f"raw{i}", "agent_id": a} for i, a in enumerate(agents)
            ]
        frames = _answer_frames(headers, body, encoding)
        started = time.time()
        for topic, frame in frames[:-1]:
            connection.publish(topic, frame)
        connection.publish_wait(*frames[-1], timeout_s=WAIT_S)
        pipe.send(("done", started, time.time(), len(frames[-1][1])))
    connection.stop()


def expect(pipe: Connection, kind: str) -> tuple[Any, ...]:
    """The publisher's next message, which must be of ``kind``; waits up to WAIT_S."""
    if not pipe.poll(WAIT_S):
        raise TimeoutError(f"the publisher sent no {kind!r} within {WAIT_S:.0f} s")
    message: tuple[Any, ...] = pipe.recv()
    if message[0] != kind:
        raise RuntimeError(f"publisher answered {message!r}, expected {kind!r}")
    return message
