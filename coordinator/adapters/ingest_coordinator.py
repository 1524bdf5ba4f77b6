"""The coordinator's end of ingest workers: publish a round's plan, collect the workers'
summaries, close the round and wait for the partial sums.

:class:`IngestCoordinator` turns a streaming strategy's :class:`~coordinator.strategies.
streaming.UpdateStream` (its models, robust policy, bounds and sketcher) into the retained
:class:`~faultfleet.wire.ingest_messages.IngestPlan` every worker folds by, and hands back
an :class:`~coordinator.adapters.ingest_round.IngestRound` that the strategy takes in its
place (``aggregate_stream``). The coordinator sees a summary of a few hundred bytes per
update and one partial sum per worker and model instead of every update.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from coordinator.adapters.ingest_round import IngestRound
from coordinator.strategies.streaming import UpdateStream
from faultfleet.wire.codec import WireError, encode_frame, encode_tensors
from faultfleet.wire.ingest_messages import IngestPlan, StreamBoundsNote
from faultfleet.wire.messages import TensorEncoding
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.topics import Topics

logger = logging.getLogger(__name__)


class IngestCoordinator:
    """Opens and closes ingest workers' rounds over ``connection``.

    Parameters
    ----------
    connection : MqttConnection
        The coordinator's connection; :meth:`start` adds the summaries route.
    topics : Topics
    max_payload_bytes : int
    monotonic : callable returning seconds
        The clock deadlines are measured on.
    """

    def __init__(
        self,
        connection: MqttConnection,
        topics: Topics,
        *,
        max_payload_bytes: int,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.connection = connection
        self.topics = topics
        self.max_payload_bytes = max_payload_bytes
        self.monotonic = monotonic
        self._changed = threading.Condition()
        self._round: IngestRound | None = None

    def start(self) -> None:
        """Route the workers' summaries (before the connection starts)."""
        self.connection.route(self.topics.all_ingest_summaries(), self._on_summary)

    def open_round(
        self, run_id: str, stream: UpdateStream, *, tasks: Mapping[str, str] | None = None
    ) -> IngestRound:
        """Publish the plan of ``stream``'s round (retained, acknowledged) and collect it.

        Raises
        ------
        ValueError
            A stream without a sketcher, or under differential privacy (its noise is drawn
            once, over every update, by the coordinator).
        """
        if stream.sketcher is None or stream.policy.private:
            raise ValueError("ingest workers need a sketched stream without privacy noise")
        sketcher, policy = stream.sketcher, stream.policy
        plan = IngestPlan(
            run_id=run_id,
            server_round=stream.server_round,
            model_keys=tuple(sorted(stream.models)),
            n_params=sketcher.n_params,
            clip_factor=policy.clip_factor,
            clip_norm=policy.clip_norm,
            weight_cap=policy.weight_cap,
            bounds={
                k: StreamBoundsNote(norm=b.norm, samples=b.samples)
                for k, b in stream.bounds.items()
            },
            sketch_dim=sketcher.requested_dim,
            sketch_seed=sketcher.seed,
        )
        merged = IngestRound(
            run_id,
            stream.server_round,
            stream.models,
            sketch_dim=sketcher.dim,
            bounds=stream.bounds,
            max_payload_bytes=self.max_payload_bytes,
            tasks=tasks,
        )
        with self._changed:
            self._round = merged
        body = encode_tensors(stream.models, TensorEncoding())
        self.connection.publish_wait(
            self.topics.ingest_plan(), encode_frame(plan, body), retain=True
        )
        return merged

    def wait_for(self, predicate: Callable[[IngestRound], bool], timeout_s: float) -> bool:
        """Block until ``predicate`` holds for the open round (re-checked on every summary)
        or ``timeout_s`` seconds pass; returns whether it holds."""
        deadline = self.monotonic() + timeout_s
        with self._changed:
            while self._round is None or not predicate(self._round):
                left = deadline - self.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def close_round(self, timeout_s: float) -> IngestRound:
        """Close the open round and wait for every worker's partial sums; closes again when
        a summary is refused after a close.

        Raises
        ------
        TimeoutError
            The partial sums did not come within ``timeout_s`` seconds.
        """
        merged = self._round
        if merged is None:
            raise RuntimeError("no ingest round is open")
        deadline = self.monotonic() + timeout_s
        while True:
            message = merged.close_message()
            self.connection.publish_wait(
                self.topics.ingest_plan(), encode_frame(message), retain=True
            )
            left = deadline - self.monotonic()
            settled = self.wait_for(lambda r: r.complete() or r.must_close_again(), left)
            if not settled:
                raise TimeoutError(
                    f"ingest workers sent no complete partial sums of round "
                    f"{merged.server_round} within {timeout_s:g} s"
                )
            if merged.complete() and not merged.must_close_again():
                with self._changed:
                    self._round = None
                return merged

    def _on_summary(self, topic: str, payload: bytes) -> None:
        with self._changed:
            merged = self._round
        if merged is None:
            return
        try:
            merged.on_message(topic, payload)
        except WireError as error:
            logger.info("refused an ingest summary on %s: %s", topic, error)
        with self._changed:
            self._changed.notify_all()
