"""Sending a round's unanswered tasks again to an agent that came back online.

After a broker restart the tasks, or their answers, may be lost; the agent reconnecting
announces itself again, and :meth:`~coordinator.adapters.mqtt_answers.AnswerCollector.resend`
sends its unanswered tasks once more, each unchanged but for its ``issued_at`` (so its task
id is the same; the agent answers a repeated task once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from coordinator.adapters.metrics import CoordinatorMetrics
from faultfleet.wire.codec import encode_frame
from faultfleet.wire.messages import AnyTaskMessage
from faultfleet.wire.mqtt import MqttConnection

logger = logging.getLogger(__name__)


def send_again(
    connection: MqttConnection,
    topic: str,
    frames: Sequence[tuple[AnyTaskMessage, bytes]],
    clock: Callable[[], float],
    metrics: CoordinatorMetrics,
) -> int:
    """Publish every (header, body) of ``frames`` on ``topic`` with a fresh ``issued_at``
    (Unix seconds from ``clock``); returns how many went out. A task that cannot be queued
    is logged and skipped: its first copy may still arrive."""
    sent = sent_bytes = 0
    for header, body in frames:
        again = encode_frame(header.model_copy(update={"issued_at": clock()}), body)
        try:
            sent_bytes += connection.publish(topic, again)
        except (ValueError, RuntimeError) as error:
            logger.warning("could not send task %s again: %s", header.task_id, error)
            continue
        sent += 1
    if sent:
        metrics.tasks_resent.inc(sent)
        metrics.payload_sent_bytes.inc(sent_bytes)
        logger.info(
            "round %d: %s is online; sent its %d unanswered task(s) again",
            frames[0][0].server_round,
            frames[0][0].agent_id,
            sent,
        )
    return sent
