"""Robust and differentially private averaging of client updates.

Every strategy averages a group of updates into one model (FedAvg's weighted mean; FLACC
Algorithm 1, lines 20 and 26; a cluster's members elsewhere) through
:meth:`~coordinator.strategies.base.Strategy._average`, which applies the run's
:class:`AggregationPolicy` here. With every rule off the result is exactly
:func:`~coordinator.strategies.aggregate.weighted_average`, the paper's maths. The rules,
applied in this order to the k updates of one average:

1. **Weight cap** (``weight_cap``): an update's sample count, its weight, is at most
   ``weight_cap`` × the lower median count of the k updates. A client that claims far more
   data than its peers cannot carry the average alone.
2. **Norm clipping**: each update Δθ_i = θ_i − θ is scaled to at most the bound B,
   θ_i ← θ + Δθ_i · min(1, B / ‖Δθ_i‖). The bound is ``clip_factor`` × the lower median of
   the k norms (adaptive: it follows the updates' scale as training goes on, no tuning), or
   ``clip_norm`` (fixed), or the smaller of both when both are set.
3. **Coordinate-wise trimmed mean** (``trim_fraction`` β, Yin et al., "Byzantine-robust
   distributed learning: towards optimal statistical rates", ICML 2018, Definition 2): in
   every coordinate the t = min(⌈β·k⌉, ⌊(k − 1)/2⌋) largest and t smallest values are
   dropped and the rest averaged with their (capped) weights. With k = 3 it is the median;
   with k ≤ 2 nothing can be dropped.

**Differential privacy** (``noise_multiplier`` σ > 0) replaces the three rules with
DP-FedAvg (McMahan et al., "Learning differentially private recurrent language models",
ICLR 2018, Algorithm 1 with the fixed-denominator estimator f̃_f of eq. 1 and uniform weights):
each update is clipped to C = ``clip_norm``, the clipped updates are averaged with equal
weights and Gaussian noise N(0, (σ·C / k)²) is added to every coordinate of the average,
k being the number of updates averaged (the round's sample size, fixed by the engine).
Privacy spent is accounted by :mod:`coordinator.strategies.privacy`.

Pure numpy: the noise generator is passed in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from coordinator.strategies.aggregate import weighted_average
from faultfleet.errors import UsageError
from faultfleet.scoring import trim_count
from faultfleet.tasks import FitResult
from faultfleet.types import Float64Array, FloatArray


@dataclass(frozen=True)
class AggregationPolicy:
    """How the updates of one average are combined; every rule is off at 0.

    Attributes
    ----------
    clip_factor : float
        Adaptive norm bound, a multiple (>= 1) of the lower median update norm.
    clip_norm : float
        Fixed norm bound, in weight units; the clipping bound C of differential privacy.
    weight_cap : float
        A sample count weighs at most this multiple (>= 1) of the lower median count.
    trim_fraction : float
        β of the coordinate-wise trimmed mean, in [0, 0.5).
    noise_multiplier : float
        σ of DP-FedAvg; above 0 it switches differential privacy on (needs ``clip_norm``).
    dp_delta : float
        δ at which the privacy spent, ε, is reported; in (0, 1).
    """

    clip_factor: float = 0.0
    clip_norm: float = 0.0
    weight_cap: float = 0.0
    trim_fraction: float = 0.0
    noise_multiplier: float = 0.0
    dp_delta: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("clip_factor", "clip_norm", "weight_cap", "trim_fraction"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise UsageError(f"{name} must be a finite number >= 0 (0: off), got {value!r}")
        for name in ("clip_factor", "weight_cap"):
            value = getattr(self, name)
            if 0 < value < 1:
                raise UsageError(
                    f"{name} must be 0 (off) or >= 1, got {value!r}: below 1 it would cut "
                    "the median update itself"
                )
        if self.trim_fraction >= 0.5:
            raise UsageError(
                f"trim_fraction must be below 0.5, got {self.trim_fraction!r}: it trims that "
                "share of the updates from each end"
            )
        if not (math.isfinite(self.noise_multiplier) and self.noise_multiplier >= 0):
            raise UsageError(
                f"noise_multiplier must be a finite number >= 0 (0: no differential privacy), "
                f"got {self.noise_multiplier!r}"
            )
        if self.private and self.clip_norm <= 0:
            raise UsageError(
                "noise_multiplier > 0 needs clip_norm > 0: differential privacy clips every "
                "update to clip_norm and scales its noise to it"
            )
        if not 0 < self.dp_delta < 1:
            raise UsageError(f"dp_delta must be in (0, 1), got {self.dp_delta!r}")

    @property
    def plain(self) -> bool:
        """Every rule off: the plain sample-weighted mean."""
        return (
            not (self.clip_factor or self.clip_norm or self.weight_cap or self.trim_fraction)
            and not self.private
        )

    @property
    def private(self) -> bool:
        """Differential privacy is on."""
        return self.noise_multiplier > 0


@dataclass(frozen=True)
class AggregateReport:
    """What the rules did to the updates of one or more averages."""

    updates: int = 0
    norm_clipped: int = 0
    """Updates scaled down to the norm bound."""
    weight_capped: int = 0
    """Updates whose sample count was cut to the weight cap."""

    def __add__(self, other: AggregateReport) -> AggregateReport:
        return AggregateReport(
            self.updates + other.updates,
            self.norm_clipped + other.norm_clipped,
            self.weight_capped + other.weight_capped,
        )


def lower_median(values: Float64Array) -> float:
    """The ⌈k/2⌉-th smallest of k values: a value one honest half vouches for when k = 2."""
    return float(np.sort(values)[(len(values) - 1) // 2])


def clip_scales(norms: Float64Array, policy: AggregationPolicy) -> Float64Array:
    """Factor min(1, B / ‖Δθ_i‖) of every update, shape (k,); all 1 without a bound."""
    bounds = []
    if policy.clip_factor > 0:
        bounds.append(policy.clip_factor * lower_median(norms))
    if policy.clip_norm > 0:
        bounds.append(policy.clip_norm)
    if not bounds:
        return np.ones_like(norms)
    bound = min(bounds)
    safe = np.where(norms > 0, norms, 1.0)
    return np.where(norms > bound, bound / safe, 1.0)


def robust_average(
    weights: Sequence[FloatArray],
    deltas: Sequence[FloatArray],
    num_samples: Sequence[int],
    policy: AggregationPolicy,
    rng: np.random.Generator | None = None,
) -> tuple[FloatArray, AggregateReport]:
    """Average k updates under ``policy``.

    Parameters
    ----------
    weights, deltas : sequences of k arrays of shape (n_params,)
        Each client's trained weights θ_i and its update Δθ_i = θ_i − θ.
    num_samples : sequence of k int
        Each client's sample count, its weight.
    policy : AggregationPolicy
    rng : numpy Generator, optional
        Draws the noise of differential privacy; required when ``policy.private``.

    Returns
    -------
    (array of shape (n_params,), float32; AggregateReport)
        With every rule off, exactly :func:`weighted_average`'s result.
    """
    k = len(weights)
    if k == 0:
        raise ValueError("robust_average needs at least one update")
    if len(deltas) != k or len(num_samples) != k:
        raise ValueError(
            f"{k} weight vectors, {len(deltas)} updates and {len(num_samples)} sample counts"
        )
    if policy.plain:
        return weighted_average(weights, num_samples), AggregateReport(k)
    stacked = np.stack([np.asarray(w, dtype=np.float64) for w in weights])
    updates = np.stack([np.asarray(d, dtype=np.float64) for d in deltas])
    norms = np.linalg.norm(updates, axis=1)
    if policy.private:
        if rng is None:
            raise ValueError("differential privacy needs a generator for its noise")
        return _private_average(stacked, updates, norms, policy, rng)
    counts = np.asarray(num_samples, dtype=np.float64)
    if np.any(counts < 0):
        raise ValueError(f"sample counts must be >= 0, got {list(num_samples)}")
    capped = 0
    if policy.weight_cap > 0:
        cap = policy.weight_cap * lower_median(counts)
        capped = int(np.sum(counts > cap))
        counts = np.minimum(counts, cap)
    scales = clip_scales(norms, policy)
    clipped = int(np.sum(scales < 1))
    if clipped:
        stacked -= updates * (1.0 - scales)[:, None]  # θ + Δθ·s = θ_i − Δθ_i·(1 − s)
    report = AggregateReport(k, clipped, capped)
    t = trim_count(k, policy.trim_fraction)
    if t == 0:
        total = counts.sum()
        coefficients = counts / total if total > 0 else np.full(k, 1.0 / k)
        return np.asarray(coefficients @ stacked, dtype=np.float32), report
    order = np.argsort(stacked, axis=0, kind="stable")[t : k - t]
    values = np.take_along_axis(stacked, order, axis=0)
    kept = counts[order]
    mass = kept.sum(axis=0)
    weighted = (values * kept).sum(axis=0)
    mean = np.where(mass > 0, weighted / np.where(mass > 0, mass, 1.0), values.mean(axis=0))
    return np.asarray(mean, dtype=np.float32), report


def _private_average(
    stacked: Float64Array,
    updates: Float64Array,
    norms: Float64Array,
    policy: AggregationPolicy,
    rng: np.random.Generator,
) -> tuple[FloatArray, AggregateReport]:
    """DP-FedAvg: mean base + mean of updates clipped to C + N(0, (σC/k)²) per coordinate."""
    k = stacked.shape[0]
    c = policy.clip_norm
    safe = np.where(norms > 0, norms, 1.0)
    scales = np.where(norms > c, c / safe, 1.0)
    bases = stacked - updates
    noise = rng.normal(0.0, policy.noise_multiplier * c / k, size=stacked.shape[1])
    mean = bases.mean(axis=0) + (updates * scales[:, None]).mean(axis=0) + noise
    return np.asarray(mean, dtype=np.float32), AggregateReport(k, int(np.sum(scales < 1)))


@dataclass(frozen=True)
class RoundTally:
    """The averages of one round so far and what the rules did to them."""

    server_round: int = 0
    averages: int = 0
    report: AggregateReport = AggregateReport()


@dataclass(frozen=True)
class Averaging:
    """A strategy's averaging: the run's policy and the seed of its privacy noise.

    ``noise_seed`` None draws the noise from the operating system's entropy (a deployment:
    noise anyone could regenerate from a known seed would protect nothing); an int makes it
    reproducible (a simulation), derived from the seed, the round and the average's place in
    the round, so a resumed run draws what an uninterrupted one does.
    """

    policy: AggregationPolicy = AggregationPolicy()
    noise_seed: int | None = None

    def average(
        self, results: Sequence[FitResult], tally: RoundTally
    ) -> tuple[FloatArray, RoundTally]:
        """The average of ``results`` and ``tally`` with it counted."""
        rng = None
        if self.policy.private:
            rng = np.random.default_rng(
                None
                if self.noise_seed is None
                else [self.noise_seed, tally.server_round, tally.averages]
            )
        average, report = robust_average(
            [r.weights for r in results],
            [r.delta for r in results],
            [r.num_samples for r in results],
            self.policy,
            rng,
        )
        return average, RoundTally(tally.server_round, tally.averages + 1, tally.report + report)


DEFAULT_POLICY = AggregationPolicy(clip_factor=2.0, weight_cap=2.0)
"""The policy a run uses unless its settings say otherwise (``[aggregation]`` of the
coordinator, ``faultfleet sim --aggregation``): docs/federated.md, "Robust aggregation",
gives the measurements behind it."""
