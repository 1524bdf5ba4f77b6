"""The coordinator's side of ingest workers: one round's summaries and partial sums, merged.

Each ingest worker (:mod:`coordinator.adapters.ingest_worker`) sends an
:class:`~faultfleet.wire.ingest_messages.UpdateSummary` per update it accepted and, when
the round closes, a :class:`~faultfleet.wire.ingest_messages.PartialSum` per model key: its
weighted mean update m_w and weight W_w. :class:`IngestRound` collects them and is a
:class:`~coordinator.strategies.streaming.FoldedRound`, what a streaming strategy takes
(the ``aggregate_stream`` of every strategy that streams): the updates are the
summaries (sketch, norm, samples), and a model's new weights are θ + Σ_w W_w m_w / Σ_w W_w,
the same weighted mean one process folding every update would give (up to float32 rounding
of each worker's mean).

The coordinator decides which summaries count: the first summary of a task (QoS 1 may hand
a redelivered answer to another worker), of an agent the task was sent to when the round's
tasks are given. The others are refused, and :meth:`IngestRound.close_message` names them
to their workers, which take them out of their partial sums before sending them. The round
is complete when each worker's partial sums hold exactly the updates accepted from it.
A driven round (:mod:`coordinator.adapters.ingest_fleet`) also asks its ``admit`` hook,
the coordinator's bookkeeping of the round's tasks, before it counts a summary; a worker
that never answers the close is dropped (:meth:`IngestRound.drop_silent`) with the updates
it summarised, and so is a worker that goes offline (:meth:`IngestRound.drop`). One that
takes the plan again before the round closes (restarted, or reconnected: the plan is
retained) rejoins it with empty sums.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping

import numpy as np

from coordinator.strategies.robust import AggregateReport
from coordinator.strategies.streaming import (
    PartialTotal,
    StreamBounds,
    StreamedUpdate,
    lower_medians,
)
from faultfleet.types import Float64Array, FloatArray
from faultfleet.wire.codec import (
    RejectReason,
    WireError,
    decode_tensors,
    parse_envelope,
    split_frame_view,
)
from faultfleet.wire.ingest_messages import (
    SUMMARY_ADAPTER,
    IngestClose,
    IngestReady,
    PartialSum,
    UpdateSummary,
)
from faultfleet.wire.messages import TensorEncoding


class IngestRound:
    """Summaries and partial sums of one round from every ingest worker.

    Parameters
    ----------
    run_id : str
    server_round : int
    models : mapping of model key to array of shape (n_params,)
        The models the round's plan carried.
    sketch_dim : int
        Length of the sketches the plan asked for (0: none).
    bounds : mapping of model key to StreamBounds
        The plan's bounds (returned for a key without updates).
    max_payload_bytes : int
    tasks : mapping of task id to agent id, optional
        The round's fit tasks: a summary of another task, or of another agent, is refused.
        None takes every task.
    admit : callable, optional
        ``admit(summary)``: whether the first summary of a task counts (False refuses it);
        called under the round's lock, one summary at a time. None admits every one.
    """

    def __init__(
        self,
        run_id: str,
        server_round: int,
        models: Mapping[str, FloatArray],
        *,
        sketch_dim: int,
        bounds: Mapping[str, StreamBounds] | None = None,
        max_payload_bytes: int,
        tasks: Mapping[str, str] | None = None,
        admit: Callable[[UpdateSummary], bool] | None = None,
    ) -> None:
        self.run_id = run_id
        self.admit = admit
        self.server_round = server_round
        self.models = dict(models)
        self.sketch_dim = sketch_dim
        self.bounds = dict(bounds or {})
        self.max_payload_bytes = max_payload_bytes
        self._lock = threading.Lock()
        self.tasks = None if tasks is None else dict(tasks)
        self._updates: dict[str, StreamedUpdate] = {}
        self._by_worker: dict[str, str] = {}
        self._dropped: dict[str, tuple[str, ...]] = {}
        self._accepted: Counter[str] = Counter()
        self._refused: defaultdict[str, list[str]] = defaultdict(list)
        self._closing = -1
        self._ready: set[str] = set()
        self._closed_refusals = 0
        self._partials: dict[tuple[str, str], tuple[PartialSum, dict[str, FloatArray]]] = {}

    def on_message(self, topic: str, payload: bytes, *, worker: str | None = None) -> None:
        """Take one message of ``{root}/ingest/+/summaries`` (of ``worker``'s topic, when
        given: a message naming another worker is refused).

        Raises
        ------
        WireError
            A message that does not parse, of another run or round, or of another worker
            than its topic's, or of a dropped worker.
        """
        header, body = split_frame_view(payload, max_bytes=self.max_payload_bytes)
        message = parse_envelope(SUMMARY_ADAPTER, header)
        if worker is not None and message.worker_id != worker:
            raise WireError(
                RejectReason.UNKNOWN_TASK, f"{message.worker_id!r} wrote on {worker!r}'s topic"
            )
        if (message.run_id, message.server_round) != (self.run_id, self.server_round):
            raise WireError(
                RejectReason.LATE,
                f"summary of round {message.server_round} in round {self.server_round}",
            )
        if isinstance(message, IngestReady):
            self._take_ready(message.worker_id)
            return
        if message.worker_id in self.dropped:
            raise WireError(RejectReason.LATE, f"{message.worker_id!r} was dropped")
        if isinstance(message, UpdateSummary):
            expected = {"sketch": self.sketch_dim} if self.sketch_dim > 0 else {}
            tensors = decode_tensors(
                body, TensorEncoding(), expected, max_bytes=self.max_payload_bytes
            )
            sketch = tensors.get("sketch")
            update = StreamedUpdate(
                message.agent_id,
                message.model_key,
                message.num_samples,
                message.train_loss,
                message.norm,
                sketch,
            )
            self._take(message, update)
            return
        n_params = len(self.models[message.model_key])
        names = {"mean": n_params}
        if message.raw_weight is not None:
            names["raw_mean"] = n_params
        tensors = decode_tensors(body, TensorEncoding(), names, max_bytes=self.max_payload_bytes)
        with self._lock:
            self._partials[(message.worker_id, message.model_key)] = (message, tensors)

    def _take_ready(self, worker: str) -> None:
        """``worker`` took the plan. One dropped before the close (it died or lost its
        connection, and took the retained plan again on coming back, with empty sums)
        rejoins the round; its earlier updates stay out."""
        with self._lock:
            if worker in self._dropped:
                if self._closing >= 0:
                    raise WireError(RejectReason.LATE, f"{worker!r} was dropped")
                del self._dropped[worker]
            self._ready.add(worker)

    def ready(self) -> frozenset[str]:
        """The workers that took this round's plan."""
        with self._lock:
            return frozenset(self._ready)

    def _take(self, message: UpdateSummary, update: StreamedUpdate) -> None:
        """Accept the first summary of a task sent to its agent; refuse the others."""
        tid = message.task_id
        with self._lock:
            if message.worker_id in self._dropped:
                return
            known = self.tasks is None or self.tasks.get(tid) == message.agent_id
            # The hook first: it counts every refusal it makes (a duplicate included).
            admitted = (
                (self.admit is None or self.admit(message)) and known and tid not in self._updates
            )
            if not admitted:
                self._refused[message.worker_id].append(tid)
                return
            self._updates[tid] = update
            self._by_worker[tid] = message.worker_id
            self._accepted[message.worker_id] += 1

    def close_message(self) -> IngestClose:
        """What closes the round: the refused summaries, by worker (all of them; a worker
        retracts each once)."""
        with self._lock:
            refused = {w: tuple(tids) for w, tids in self._refused.items()}
            self._closing += 1
            self._closed_refusals = sum(map(len, refused.values()))
            closing = self._closing
        return IngestClose(
            run_id=self.run_id, server_round=self.server_round, refused=refused, closing=closing
        )

    def must_close_again(self) -> bool:
        """Whether a summary was refused after the last close: its worker folded it, and
        only another close takes it out."""
        with self._lock:
            return sum(map(len, self._refused.values())) > self._closed_refusals

    def complete(self) -> bool:
        """Whether each worker's partial sums, answering the last close, hold exactly the
        updates accepted from it."""
        return not self.silent()

    def silent(self) -> set[str]:
        """Workers whose partial sums, answering the last close, do not (yet) hold exactly
        the updates accepted from them."""
        with self._lock:
            folded: Counter[str] = Counter()
            for (worker, _), (partial, _) in self._partials.items():
                if partial.closing == self._closing:
                    folded[worker] += partial.updates
            return {w for w, n in self._accepted.items() if folded[w] != n}

    def drop_silent(self) -> dict[str, tuple[str, ...]]:
        """Leave the :meth:`silent` workers out of the round: their summaries no longer
        count, their partial sums (now or later) are ignored. Returns the task ids of the
        updates they summarised, by worker."""
        silent = self.silent()
        with self._lock:
            return {w: self._drop(w) for w in silent}

    def drop(self, worker: str) -> tuple[str, ...]:
        """Leave ``worker`` out of the round now (it went offline), as :meth:`drop_silent`
        does; returns the task ids of the updates it summarised, no longer counted."""
        with self._lock:
            self._ready.discard(worker)
            return self._drop(worker)

    def _drop(self, worker: str) -> tuple[str, ...]:
        tids = tuple(t for t, w in self._by_worker.items() if w == worker)
        for tid in tids:
            del self._updates[tid], self._by_worker[tid]
        self._accepted.pop(worker, None)
        if self._closing < 0:  # its refusals were never sent: it will not retract them
            self._refused.pop(worker, None)
        self._dropped[worker] = self._dropped.get(worker, ()) + tids
        for key in [k for k in self._partials if k[0] == worker]:
            del self._partials[key]
        return tids

    def counted(self) -> frozenset[str]:
        """The task ids whose summaries count for the round."""
        with self._lock:
            return frozenset(self._updates)

    @property
    def dropped(self) -> dict[str, tuple[str, ...]]:
        """The workers :meth:`drop_silent` left out, with their tasks."""
        with self._lock:
            return dict(self._dropped)

    # -- FoldedRound -----------------------------------------------------------------------

    def updates(self) -> tuple[StreamedUpdate, ...]:
        with self._lock:
            return tuple(self._updates.values())

    def model_keys(self) -> list[str]:
        return sorted(k for k, part in self.totals().items() if part.report.updates > 0)

    def average(self, key: str, *, index: int = 0) -> FloatArray:
        """θ + Σ_w W_w m_w / Σ_w W_w over the workers' partial sums of ``key``."""
        part = self.totals().get(key)
        if part is None:
            raise KeyError(key)
        step = part.total / part.weight if part.weight > 0 else part.total
        return np.asarray(self.models[key].astype(np.float64) + step, dtype=np.float32)

    def totals(self) -> dict[str, PartialTotal]:
        """Per model key, Σ_w W_w m_w (float64), Σ_w W_w and the rules' tally over the
        partial sums answering the last close; with raw means from every one of them, also
        Σ_w R_w r_w and Σ_w R_w."""
        with self._lock:
            parts = [
                (p, tensors)
                for (p, tensors) in self._partials.values()
                if p.closing == self._closing
            ]
        sums: dict[str, Float64Array] = {}
        weights: dict[str, float] = {}
        reports: dict[str, AggregateReport] = {}
        raw_sums: dict[str, Float64Array | None] = {}  # None: a worker sent no raw mean
        raw_weights: dict[str, float] = {}
        for p, tensors in parts:
            key = p.model_key
            if key not in sums:
                sums[key] = np.zeros(len(self.models[key]), dtype=np.float64)
                weights[key], reports[key] = 0.0, AggregateReport()
            sums[key] += p.weight * tensors["mean"].astype(np.float64)
            weights[key] += p.weight
            reports[key] += AggregateReport(p.updates, p.clipped, p.capped)
            if p.raw_weight is None:
                raw_sums[key] = None
            elif key not in raw_sums:
                raw_sums[key] = p.raw_weight * tensors["raw_mean"].astype(np.float64)
                raw_weights[key] = p.raw_weight
            elif (raw := raw_sums[key]) is not None:
                raw += p.raw_weight * tensors["raw_mean"].astype(np.float64)
                raw_weights[key] += p.raw_weight
        return {
            k: PartialTotal(
                sums[k], weights[k], reports[k], raw_sums.get(k), raw_weights.get(k, 0.0)
            )
            for k in sums
        }

    def report(self, key: str) -> AggregateReport:
        part = self.totals().get(key)
        return AggregateReport() if part is None else part.report

    def next_bounds(self, key: str) -> StreamBounds:
        return lower_medians(self.updates(), key, self.bounds.get(key, StreamBounds()))
