"""The coordinator's end of ingest workers: publish a round's plan, collect the workers'
summaries, close the round and wait for the partial sums.

:class:`IngestCoordinator` turns a streaming strategy's :class:`~coordinator.strategies.
streaming.UpdateStream` (its models, robust policy, bounds and sketcher) into the retained
:class:`~faultfleet.wire.ingest_messages.IngestPlan` every worker folds by, and hands back
an :class:`~coordinator.adapters.ingest_round.IngestRound` that the strategy takes in its
place (``aggregate_stream``). The coordinator sees a summary of a few hundred bytes per
update and one partial sum per worker and model instead of every update.

Started with the ids of its workers, it listens to those workers' summaries topics only,
and a summary must name the worker whose topic it came on. A worker that does not answer
the close within the close's timeout (it died, or lost its connection) is left out of the
round (:meth:`~coordinator.adapters.ingest_round.IngestRound.drop_silent`): the round
closes without its partial sums and the updates it summarised. A worker known to have gone
offline (its last will) is left out at once (:meth:`IngestCoordinator.drop_worker`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import partial

from coordinator.adapters.ingest_round import IngestRound
from coordinator.strategies.streaming import UpdateStream
from faultfleet.clock import SYSTEM_CLOCK, Clock
from faultfleet.wire.codec import WireError, encode_frame, encode_tensors
from faultfleet.wire.ingest_messages import IngestPlan, StreamBoundsNote, UpdateSummary
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
    clock : Clock
        Measures the waits for the workers (injected for tests).
    """

    def __init__(
        self,
        connection: MqttConnection,
        topics: Topics,
        *,
        max_payload_bytes: int,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.connection = connection
        self.topics = topics
        self.max_payload_bytes = max_payload_bytes
        self.clock = clock
        self._changed = threading.Condition()
        self._round: IngestRound | None = None

    def start(self, workers: Sequence[str] | None = None) -> None:
        """Route the summaries of ``workers`` (None: of any worker)."""
        if workers is None:
            self.connection.route(self.topics.all_ingest_summaries(), self._on_summary)
        for worker in workers or ():
            handler = partial(self._on_summary, worker=worker)
            self.connection.route(self.topics.ingest_summaries(worker), handler)

    def open_round(
        self,
        run_id: str,
        stream: UpdateStream,
        *,
        tasks: Mapping[str, str] | None = None,
        admit: Callable[[UpdateSummary], bool] | None = None,
    ) -> IngestRound:
        """Publish the plan of ``stream``'s round (retained, acknowledged) and collect it;
        ``tasks`` and ``admit`` as :class:`IngestRound` takes them.

        Raises
        ------
        ValueError
            A stream under differential privacy (its noise is drawn once, over every update,
            by the coordinator). A stream without a sketcher (FedAvg, fixed clusters) plans
            no sketch: the summaries then carry none.
        """
        if stream.policy.private:
            raise ValueError("ingest workers need a stream without privacy noise")
        sketcher, policy = stream.sketcher, stream.policy
        (n_params,) = {len(model) for model in stream.models.values()}
        plan = IngestPlan(
            run_id=run_id,
            server_round=stream.server_round,
            model_keys=tuple(sorted(stream.models)),
            n_params=n_params,
            clip_factor=policy.clip_factor,
            clip_norm=policy.clip_norm,
            weight_cap=policy.weight_cap,
            bounds={
                k: StreamBoundsNote(norm=b.norm, samples=b.samples)
                for k, b in stream.bounds.items()
            },
            sketch_dim=0 if sketcher is None else sketcher.requested_dim,
            sketch_seed=0 if sketcher is None else sketcher.seed,
            raw_means=stream.keeps_raw_means,
        )
        merged = IngestRound(
            run_id,
            stream.server_round,
            stream.models,
            sketch_dim=0 if sketcher is None else sketcher.dim,
            bounds=stream.bounds,
            max_payload_bytes=self.max_payload_bytes,
            tasks=tasks,
            admit=admit,
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
        deadline = self.clock.monotonic() + timeout_s
        with self._changed:
            while self._round is None or not predicate(self._round):
                left = deadline - self.clock.monotonic()
                if left <= 0:
                    return False
                self.clock.wait(self._changed, left)
            return True

    def close_round(self, timeout_s: float) -> IngestRound:
        """Close the open round and wait for every worker's partial sums; closes again when
        a summary is refused after a close. Workers whose partial sums did not come within
        ``timeout_s`` seconds are left out of the round (see its ``dropped``)."""
        merged = self._round
        if merged is None:
            raise RuntimeError("no ingest round is open")
        deadline = self.clock.monotonic() + timeout_s
        while True:
            message = merged.close_message()
            self.connection.publish_wait(
                self.topics.ingest_plan(), encode_frame(message), retain=True
            )
            left = deadline - self.clock.monotonic()
            settled = self.wait_for(lambda r: r.complete() or r.must_close_again(), left)
            if not settled:
                for worker, tids in merged.drop_silent().items():
                    logger.warning(
                        "round %d: ingest worker %s sent no partial sums within %g s of the "
                        "close; its %d update(s) are left out of the round",
                        merged.server_round,
                        worker,
                        timeout_s,
                        len(tids),
                    )
            if merged.complete() and (not settled or not merged.must_close_again()):
                with self._changed:
                    self._round = None
                return merged

    def drop_worker(self, worker: str) -> tuple[str, ...]:
        """Leave ``worker`` (gone offline) out of the open round at once
        (:meth:`~coordinator.adapters.ingest_round.IngestRound.drop`); returns the task ids
        of the updates it summarised, empty when no round is open. A close waiting for its
        partial sums stops waiting for them."""
        with self._changed:
            merged = self._round
            if merged is None:
                return ()
            tids = merged.drop(worker)
            self._changed.notify_all()
        return tids

    def _on_summary(self, topic: str, payload: bytes, *, worker: str | None = None) -> None:
        with self._changed:
            merged = self._round
        if merged is None:
            return
        try:
            merged.on_message(topic, payload, worker=worker)
        except WireError as error:
            logger.info("refused an ingest summary on %s: %s", topic, error)
        with self._changed:
            self._changed.notify_all()
