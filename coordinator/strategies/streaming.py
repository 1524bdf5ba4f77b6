"""Streaming aggregation: a round's updates folded into running sums as they arrive.

A strategy that averages by model key (FLACC's global model, then one model per entity; CFL's
clusters) needs no list of the round's updates: :class:`UpdateStream` adds each update, as it
arrives, to a float64 running sum of its model key and keeps a few numbers of it (client,
key, samples, loss, ‖Δθ‖ and a sketch for the similarities, :mod:`.sketch`). Memory is one
sum per model key plus d numbers per update, whatever the fleet size; at 2,500 updates of
the compact model the list of updates alone would hold 600 MB, of the paper model 44 GB.

The robust policy (:mod:`.robust`) under streaming. Its rules compare an update with the
round's other updates, which have not all arrived when it is folded:

- **Adaptive norm clipping** bounds ‖Δθ_i‖ by ``clip_factor`` × the lower median norm of
  the *previous* round's updates of the same model key (:class:`StreamBounds`, kept in the
  strategy's state). Update norms drift slowly from round to round (they follow the
  learning rate and the loss), and a median is moved by no minority, so the lagged median
  bounds an outlier as the current one would. A model's first round (no previous median;
  a new cluster inherits its parent's) is folded without the adaptive bound; a fixed
  ``clip_norm`` still applies. The alternative, a second pass over the updates once their
  norms are known, needs every update twice: from the journal on disk in a deployment,
  held in memory otherwise.
- **Weight cap** caps a sample count at ``weight_cap`` × the previous round's lower median
  count, likewise.
- **Trimmed mean** needs every update at once; a streaming strategy refuses it.
- **Differential privacy** streams as it is: each update clipped to C, equal weights, the
  noise added to the average at the end.

With every rule off the result is the sample-weighted mean, accumulated in float64 in
arrival order, so it equals the exact path's up to float64 rounding (the exact path sums in
client order); the tests compare the two.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from coordinator.strategies.pairwise import SKETCH_FLEET
from coordinator.strategies.parameters import Param
from coordinator.strategies.robust import (
    AggregateReport,
    AggregationPolicy,
    RoundTally,
    lower_median,
)
from coordinator.strategies.sketch import UpdateSketcher
from faultfleet.errors import UsageError
from faultfleet.tasks import Failure, FitResult
from faultfleet.types import Float64Array, FloatArray


@dataclass(frozen=True)
class StreamBounds:
    """What the adaptive rules of the next round of a model key measure against: the lower
    medians of the last round's update norms and sample counts (None: not measured)."""

    norm: float | None = None
    samples: float | None = None


@dataclass(frozen=True)
class StreamedUpdate:
    """What a streaming round keeps of one update."""

    client_id: str
    model_key: str
    num_samples: int
    train_loss: float
    norm: float
    """‖Δθ_i‖, before clipping."""
    sketch: FloatArray | None
    """Unit sketch of Δθ_i, shape (d,), or None without a sketcher."""


@dataclass(frozen=True)
class PartialTotal:
    """Updates of one model key folded elsewhere (by ingest workers): Σ w_i s_i Δθ_i as
    float64 of shape (n_params,), Σ w_i, and what the rules did; with raw means, also
    Σ n_i Δθ_i of the updates as sent and Σ n_i."""

    total: Float64Array
    weight: float
    report: AggregateReport = field(default_factory=AggregateReport)
    raw_total: Float64Array | None = None
    raw_weight: float = 0.0


class UpdateStream:
    """The updates of one round, folded into one running sum per model key.

    Parameters
    ----------
    server_round : int
    models : mapping of model key to array of shape (n_params,)
        The models the round's tasks carried; an update of another key is refused.
    policy : AggregationPolicy
    bounds : mapping of model key to StreamBounds
        Last round's medians; keys absent have none.
    sketcher : UpdateSketcher, optional
        Sketches each update's Δθ for the similarities.
    noise_seed : int or None
        Seeds differential privacy's noise, as :class:`~.robust.Averaging` does.
    raw_means : bool
        Also keep, per model key, the sample-weighted sum of the updates as they were sent
        (before the policy's clipping, caps or privacy) for :meth:`mean_update_norm`, where
        the policy changes updates; a second running sum per model key (CFL's ε₁).

    :meth:`add` may be called from several threads at once.
    """

    def __init__(
        self,
        server_round: int,
        models: Mapping[str, FloatArray],
        policy: AggregationPolicy,
        bounds: Mapping[str, StreamBounds],
        sketcher: UpdateSketcher | None = None,
        noise_seed: int | None = None,
        *,
        raw_means: bool = False,
    ) -> None:
        if policy.trim_fraction > 0:
            raise UsageError(
                "a streaming strategy cannot take a trimmed mean (it needs every update at "
                "once); set trim_fraction = 0 or use exact similarity (pairwise = 'exact')"
            )
        self.server_round = server_round
        self.models = dict(models)
        self.policy = policy
        self.bounds = dict(bounds)
        self.sketcher = sketcher
        self.noise_seed = noise_seed
        self._lock = threading.Lock()
        self._sums: dict[str, Float64Array] = {}
        self._weights: dict[str, float] = {}
        self._reports: dict[str, AggregateReport] = {}
        self._updates: list[StreamedUpdate] = []
        self._seen: set[tuple[str, str]] = set()
        self._raw_sums: dict[str, Float64Array] | None = (
            {} if raw_means and changes_updates(policy) else None
        )
        """Σ n_i Δθ_i per model key, where the policy makes it differ from :attr:`_sums`."""
        self._raw_weights: dict[str, float] = {}

    def add(self, result: FitResult) -> StreamedUpdate:
        """Fold ``result`` into its model's sum; returns what is kept of it.

        Raises
        ------
        ValueError
            A model key the round did not send, a wrong shape, or a second update of the
            same client and model.
        """
        base = self.models.get(result.model_key)
        if base is None:
            raise ValueError(
                f"update of {result.client_id!r} for unknown model {result.model_key!r}"
            )
        if result.weights.shape != base.shape:
            raise ValueError(
                f"client {result.client_id!r} sent weights of shape {result.weights.shape}, "
                f"expected {base.shape}"
            )
        delta = np.subtract(result.weights, base, dtype=np.float32)
        norm = vector_norm(delta)
        sketch = self.sketcher.unit_sketch(delta) if self.sketcher is not None else None
        weight, scale, capped = self._weight_and_scale(result, norm)
        raw = self._raw_term(result, delta)
        delta *= np.float32(weight * scale)  # in place: no other update-sized array
        update = StreamedUpdate(
            result.client_id, result.model_key, result.num_samples, result.train_loss, norm, sketch
        )
        with self._lock:
            if (result.client_id, result.model_key) in self._seen:
                raise ValueError(
                    f"client {result.client_id!r} answered more than once for model "
                    f"{result.model_key!r}"
                )
            self._seen.add((result.client_id, result.model_key))
            total = self._sum_of(result.model_key, base)
            np.add(total, delta, out=total)  # delta widened to float64 chunk by chunk
            self._weights[result.model_key] = self._weights.get(result.model_key, 0.0) + weight
            self._fold_raw(result, raw, base, 1.0)
            report = AggregateReport(1, int(scale < 1.0), int(capped))
            self._reports[result.model_key] = (
                self._reports.get(result.model_key, AggregateReport()) + report
            )
            self._updates.append(update)
        return update

    def retract(self, result: FitResult) -> None:
        """Take a folded update out again: subtract the term :meth:`add` added (the same
        weight and clip factor: the bounds do not change within a round). An ingest worker
        retracts an update the coordinator refused (another worker's copy came first).

        Raises
        ------
        ValueError
            ``result``'s client and model were not folded.
        """
        key = (result.client_id, result.model_key)
        delta = np.subtract(result.weights, self.models[result.model_key], dtype=np.float32)
        norm = vector_norm(delta)
        weight, scale, capped = self._weight_and_scale(result, norm)
        raw = self._raw_term(result, delta)
        delta *= np.float32(weight * scale)
        with self._lock:
            if key not in self._seen:
                raise ValueError(f"no update of {key[0]!r} for {key[1]!r} to retract")
            self._seen.discard(key)
            total = self._sums[result.model_key]
            np.subtract(total, delta, out=total)
            self._weights[result.model_key] -= weight
            self._fold_raw(result, raw, self.models[result.model_key], -1.0)
            old = self._reports[result.model_key]
            self._reports[result.model_key] = AggregateReport(
                old.updates - 1, old.norm_clipped - int(scale < 1.0), old.weight_capped - capped
            )
            self._updates = [u for u in self._updates if (u.client_id, u.model_key) != key]

    def absorb(self, updates: Sequence[StreamedUpdate], totals: Mapping[str, PartialTotal]) -> None:
        """Take updates folded elsewhere as if :meth:`add` had folded them here: ingest
        workers' summaries and merged partial sums (:mod:`coordinator.adapters.ingest_round`).

        Raises
        ------
        ValueError
            A model key the round did not send, a second update of a client and model, or
            partial sums without the raw means this stream keeps.
        """
        raw_sums = self._raw_sums
        if raw_sums is not None and any(
            p.raw_total is None for p in totals.values() if p.report.updates
        ):
            raise ValueError(
                "this stream keeps the updates' raw means, which these partial sums do not "
                "carry (their workers were not asked for them)"
            )
        with self._lock:
            for update in updates:
                pair = (update.client_id, update.model_key)
                if pair in self._seen or update.model_key not in self.models:
                    raise ValueError(f"cannot take the update of {pair[0]!r} for {pair[1]!r}")
                self._seen.add(pair)
                self._updates.append(update)
            for key, part in totals.items():
                if part.report.updates == 0:
                    continue
                base = self.models.get(key)
                if base is None:
                    raise ValueError(f"partial sums of unknown model {key!r}")
                self._sum_of(key, base)[...] += part.total
                self._weights[key] = self._weights.get(key, 0.0) + part.weight
                if raw_sums is not None and part.raw_total is not None:
                    raw = raw_sums.get(key)
                    if raw is None:
                        raw = raw_sums[key] = np.zeros(base.shape, np.float64)
                    raw += part.raw_total
                    self._raw_weights[key] = self._raw_weights.get(key, 0.0) + part.raw_weight
                self._reports[key] = self._reports.get(key, AggregateReport()) + part.report

    def _raw_term(self, result: FitResult, delta: FloatArray) -> FloatArray | None:
        """n_i Δθ_i for the raw sum (a new array), or None when none is kept."""
        if self._raw_sums is None:
            return None
        return np.multiply(delta, np.float32(result.num_samples), dtype=np.float32)

    def _fold_raw(
        self, result: FitResult, raw: FloatArray | None, base: FloatArray, sign: float
    ) -> None:
        """Add (``sign`` 1) or take out (−1) a raw term. Call it holding the lock."""
        if self._raw_sums is None or raw is None:
            return
        key = result.model_key
        total = self._raw_sums.get(key)
        if total is None:
            total = self._raw_sums[key] = np.zeros(base.shape, np.float64)
        if sign > 0:
            np.add(total, raw, out=total)
        else:
            np.subtract(total, raw, out=total)
        self._raw_weights[key] = self._raw_weights.get(key, 0.0) + sign * result.num_samples

    def mean_update_norm(self, key: str) -> float:
        """‖Σ n_i Δθ_i / Σ n_i‖ over the updates of ``key`` as they were sent, before the
        policy's rules (kept with ``raw_means``; without rules that change updates it is
        the norm of the averaged move). 0.0 when every sample count is 0.

        Raises
        ------
        KeyError
            No update of ``key`` was folded.
        ValueError
            The stream keeps no raw means but its policy changes updates.
        """
        with self._lock:
            if self._raw_sums is not None:
                total, weight = self._raw_sums[key], self._raw_weights[key]
            elif changes_updates(self.policy):
                raise ValueError("the stream keeps no raw means (raw_means=False)")
            else:
                total, weight = self._sums[key], self._weights[key]
            mean = total / weight if weight > 0 else np.zeros_like(total)
        return vector_norm(mean)

    def _sum_of(self, key: str, base: FloatArray) -> Float64Array:
        """Model ``key``'s running sum, started at zero the first time (not with setdefault,
        whose default would be allocated with every update). Call it holding the lock."""
        total = self._sums.get(key)
        if total is None:
            total = self._sums[key] = np.zeros(base.shape, np.float64)
        return total

    def _weight_and_scale(self, result: FitResult, norm: float) -> tuple[float, float, bool]:
        """An update's weight (its capped sample count; 1 under privacy) and clip factor."""
        policy, bounds = self.policy, self.bounds.get(result.model_key, StreamBounds())
        if policy.private:
            c = policy.clip_norm
            return 1.0, (c / norm if norm > c else 1.0), False
        weight, capped = float(result.num_samples), False
        if weight < 0:
            raise ValueError(f"sample counts must be >= 0, got {result.num_samples}")
        if policy.weight_cap > 0 and bounds.samples is not None:
            cap = policy.weight_cap * bounds.samples
            capped, weight = weight > cap, min(weight, cap)
        limits = [policy.clip_norm] if policy.clip_norm > 0 else []
        if policy.clip_factor > 0 and bounds.norm is not None:
            limits.append(policy.clip_factor * bounds.norm)
        bound = min(limits) if limits else math.inf
        return weight, (bound / norm if norm > bound else 1.0), capped

    def updates(self) -> tuple[StreamedUpdate, ...]:
        """What is kept of every update folded so far, in arrival order."""
        with self._lock:
            return tuple(self._updates)

    def model_keys(self) -> list[str]:
        """Model keys with at least one update."""
        with self._lock:
            return sorted(self._sums)

    def average(self, key: str, *, index: int = 0) -> FloatArray:
        """The model ``key``'s new weights: θ + Σ w_i s_i Δθ_i / Σ w_i (all weights 0: the
        plain mean), plus DP-FedAvg's noise under privacy (``index``: the average's place
        in the round, which seeds its noise).

        Raises
        ------
        KeyError
            No update of ``key`` was folded.
        """
        with self._lock:
            total, weight = self._sums[key], self._weights[key]
            count = self._reports[key].updates
        base = self.models[key].astype(np.float64)
        if self.policy.private:
            rng = np.random.default_rng(
                None if self.noise_seed is None else [self.noise_seed, self.server_round, index]
            )
            c = self.policy.clip_norm
            noise = rng.normal(0.0, self.policy.noise_multiplier * c / count, size=base.shape)
            return np.asarray(base + total / count + noise, dtype=np.float32)
        if weight <= 0:
            raise ValueError(f"every update of {key!r} weighs 0; nothing to average")
        return np.asarray(base + total / weight, dtype=np.float32)

    def partial(self, key: str) -> tuple[FloatArray, float]:
        """(Σ w_i s_i Δθ_i / Σ w_i as float32, Σ w_i) of ``key``: what an ingest worker
        sends, and :meth:`average` adds to θ."""
        with self._lock:
            total, weight = self._sums[key], self._weights[key]
        mean = total / weight if weight > 0 else np.zeros_like(total)
        return np.asarray(mean, dtype=np.float32), weight

    @property
    def keeps_raw_means(self) -> bool:
        """Whether the stream keeps the updates' raw means (``raw_means`` and a policy that
        changes updates)."""
        return self._raw_sums is not None

    def raw_partial(self, key: str) -> tuple[FloatArray, float] | None:
        """(Σ n_i Δθ_i / Σ n_i as float32, Σ n_i) of ``key``'s updates as sent, what an ingest
        worker sends beside :meth:`partial`; None when no raw means are kept."""
        with self._lock:
            if self._raw_sums is None:
                return None
            total, weight = self._raw_sums[key], self._raw_weights[key]
        mean = total / weight if weight > 0 else np.zeros_like(total)
        return np.asarray(mean, dtype=np.float32), weight

    def report(self, key: str) -> AggregateReport:
        """What the rules did to the updates of ``key``."""
        with self._lock:
            return self._reports.get(key, AggregateReport())

    def next_bounds(self, key: str) -> StreamBounds:
        """The medians this round measured for ``key``: the next round's bounds."""
        return lower_medians(self.updates(), key, self.bounds.get(key, StreamBounds()))


def vector_norm(vector: FloatArray | Float64Array) -> float:
    """‖vector‖ from one dot product in the vector's own precision (what a stream keeps as an
    update's norm)."""
    return math.sqrt(max(float(np.dot(vector, vector)), 0.0))


def unit_sketches(updates: Sequence[StreamedUpdate]) -> list[FloatArray]:
    """The kept unit sketches of streamed updates, in their order.

    Raises
    ------
    ValueError
        An update was folded without a sketcher.
    """
    sketches = [u.sketch for u in updates]
    if any(s is None for s in sketches):
        raise ValueError("a streamed update has no sketch")
    return [s for s in sketches if s is not None]


def changes_updates(policy: AggregationPolicy) -> bool:
    """Whether ``policy`` may change an update's weight or size (clipping, a weight cap,
    privacy): whether a stream's average can differ from the sample-weighted mean."""
    return policy.private or policy.clip_norm > 0 or policy.clip_factor > 0 or policy.weight_cap > 0


def fold_all(stream: UpdateStream, results: Sequence[FitResult]) -> UpdateStream:
    """``stream`` with every result of ``results`` folded in, in the order given."""
    for result in results:
        stream.add(result)
    return stream


class FoldedRound(Protocol):
    """A round's updates, folded: an :class:`UpdateStream`, or the summaries and partial
    sums of ingest workers merged (:mod:`coordinator.adapters.ingest_round`)."""

    def updates(self) -> tuple[StreamedUpdate, ...]:
        """What is kept of every update."""
        ...

    def model_keys(self) -> list[str]:
        """Model keys with at least one update."""
        ...

    def average(self, key: str, *, index: int = 0) -> FloatArray:
        """The model ``key``'s new weights."""
        ...

    def report(self, key: str) -> AggregateReport:
        """What the rules did to the updates of ``key``."""
        ...

    def next_bounds(self, key: str) -> StreamBounds:
        """The medians measured for ``key``: the next round's bounds."""
        ...


STREAMING = Param(
    "streaming",
    "str",
    "auto",
    "fold each update into the average as it arrives instead of holding the round's "
    f"updates: 'on', 'off', or from {SKETCH_FLEET} registered clients on ('auto'); "
    "streaming, the adaptive clip and weight cap take the previous round's medians",
    "ours; coordinator/strategies/streaming.py",
    choices=("auto", "on", "off"),
)
"""Whether a strategy that only averages (FedAvg) streams its rounds; strategies that
compare updates stream under ``pairwise = "sketch"``."""


def streams(mode: str, n_clients: int) -> bool:
    """Whether :data:`STREAMING` ``mode`` streams in a federation of ``n_clients``."""
    if mode == "auto":
        return n_clients >= SKETCH_FLEET
    if mode not in ("on", "off"):
        raise ValueError(f"streaming must be one of auto, on, off, got {mode!r}")
    return mode == "on"


def fold_averages(
    models: dict[str, FloatArray],
    bounds: dict[str, StreamBounds],
    stream: FoldedRound,
    server_round: int,
) -> RoundTally:
    """Every model key of ``stream`` averaged into ``models`` and its medians into
    ``bounds`` (the next round's), in key order (each average's place seeds its privacy
    noise); returns what the averaging did (:attr:`~.base.Strategy.averaged_`)."""
    tally = RoundTally(server_round)
    for index, key in enumerate(stream.model_keys()):
        models[key] = stream.average(key, index=index)
        bounds[key] = stream.next_bounds(key)
        tally = RoundTally(server_round, tally.averages + 1, tally.report + stream.report(key))
    return tally


def bounds_state(bounds: Mapping[str, StreamBounds]) -> dict[str, dict[str, float | None]]:
    """``bounds`` as JSON, for a strategy's saved state."""
    return {key: asdict(b) for key, b in bounds.items()}


def load_bounds(saved: Mapping[str, Mapping[str, float | None]]) -> dict[str, StreamBounds]:
    """What :func:`bounds_state` wrote (an empty mapping for a state saved without)."""
    return {key: StreamBounds(**b) for key, b in saved.items()}


def lower_medians(
    updates: Sequence[StreamedUpdate], key: str, fallback: StreamBounds
) -> StreamBounds:
    """The lower medians of the norms and sample counts of ``key``'s updates (``fallback``
    when it has none)."""
    kept = [u for u in updates if u.model_key == key]
    if not kept:
        return fallback
    norms = np.array([u.norm for u in kept])
    counts = np.array([float(u.num_samples) for u in kept])
    return StreamBounds(lower_median(norms), lower_median(counts))


@runtime_checkable
class StreamingStrategy(Protocol):
    """A strategy that may take a round's updates as a stream instead of a list
    (FLACC and CFL under ``pairwise = "sketch"``)."""

    def open_stream(self, server_round: int) -> UpdateStream | None:
        """A stream for this round's updates, or None to take them as a list."""
        ...

    def aggregate_stream(
        self, server_round: int, stream: FoldedRound, failures: Sequence[Failure]
    ) -> None:
        """The round's reaction to the updates folded into ``stream``."""
        ...
