"""Privacy spent by differentially private averaging (:mod:`coordinator.strategies.robust`).

DP-FedAvg (McMahan et al., ICLR 2018) releases, every round, the sum of the sampled clients'
updates clipped to C plus Gaussian noise of standard deviation σ·C: one sampled Gaussian
mechanism per round, composed over the rounds. :func:`privacy_spent` accounts for it with
Google's ``dp-accounting`` library (the optional extra ``faultfleet[privacy]``): its Rényi
DP accountant (Mironov, "Rényi differential privacy", CSF 2017; Mironov, Talwar & Zhang,
"Rényi differential privacy of the sampled Gaussian mechanism", 2019) over
``SelfComposed(PoissonSampled(q, Gaussian(σ)), rounds)``, converted to (ε, δ).

The guarantee is client-level: adding or removing all of one client's data changes what is
released by at most what ε and δ bound. Its assumptions, which the docs repeat
(docs/federated.md, "Differential privacy"): each client is sampled with probability q
independently (the engine samples exactly round(q·m) clients, the usual approximation);
each client contributes to one average per round (FAACL's support training breaks this);
and only the averaged models are released. Strategies that cluster on the clients' raw
updates (FLACC, CFL, FL+HC, JGL) also release, through their clusters, something the noise
does not cover: for them ε accounts the models' averaging only.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from typing import Any

from coordinator.strategies.robust import AggregationPolicy
from faultfleet.errors import UsageError

ACCOUNTANT = "RDP, Poisson-sampled Gaussian (dp-accounting)"


@dataclass(frozen=True)
class PrivacyReport:
    """The privacy a run has spent so far, as ``results.json`` and ``summary.json`` hold it."""

    epsilon: float
    delta: float
    noise_multiplier: float
    clip_norm: float
    sampling_rate: float
    rounds: int
    accountant: str = ACCOUNTANT

    def to_json(self) -> dict[str, Any]:
        document = asdict(self)
        if not math.isfinite(self.epsilon):
            document["epsilon"] = None  # strict JSON: no privacy guarantee at all
        return document


def sampling_rate(fraction: float, clients: int, full_participation: bool = False) -> float:
    """q: the share of ``clients`` sampled per round (``max(1, round(c·m)) / m``)."""
    if clients < 1:
        raise ValueError(f"clients must be >= 1, got {clients}")
    if full_participation:
        return 1.0
    return min(1.0, max(1, round(fraction * clients)) / clients)


def check_accountant() -> None:
    """Raise a UsageError now, not after a run, if ``dp-accounting`` is missing."""
    privacy_spent(1.0, 1.0, 1, 0.5)


def privacy_spent(noise_multiplier: float, rate: float, rounds: int, delta: float) -> float:
    """ε after ``rounds`` rounds of the sampled Gaussian mechanism, at ``delta``.

    Parameters
    ----------
    noise_multiplier : float
        σ, the noise's standard deviation over the clipping bound; > 0.
    rate : float
        q, each client's probability of being sampled in a round, in (0, 1].
    rounds : int
        Rounds run (0 spends nothing).
    delta : float
        In (0, 1).

    Raises
    ------
    UsageError
        If ``dp-accounting`` is not installed.
    """
    if not noise_multiplier > 0:
        raise ValueError(f"noise_multiplier must be > 0, got {noise_multiplier!r}")
    if not 0 < rate <= 1:
        raise ValueError(f"rate must be in (0, 1], got {rate!r}")
    if rounds < 0:
        raise ValueError(f"rounds must be >= 0, got {rounds}")
    if rounds == 0:
        return 0.0
    try:
        import dp_accounting  # noqa: PLC0415 - an optional extra, needed only with privacy on
    except ImportError:
        raise UsageError(
            "differential privacy needs the dp-accounting package to report the privacy "
            "spent: pip install 'faultfleet[privacy]' (or set noise_multiplier = 0)"
        ) from None
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.GaussianDpEvent(noise_multiplier)),
        rounds,
    )
    # The accountant logs (through absl) every Rényi order whose series does not converge and
    # leaves it out; the remaining orders still bound ε. Keep that out of the service logs.
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        accountant = dp_accounting.rdp.RdpAccountant()
        accountant.compose(event)
        return float(accountant.get_epsilon(delta))
    finally:
        absl.setLevel(level)


def privacy_report(policy: AggregationPolicy, rate: float, rounds: int) -> PrivacyReport | None:
    """The privacy ``rounds`` rounds under ``policy`` spent, sampling at ``rate``; None
    without differential privacy."""
    if not policy.private:
        return None
    return PrivacyReport(
        epsilon=privacy_spent(policy.noise_multiplier, rate, rounds, policy.dp_delta),
        delta=policy.dp_delta,
        noise_multiplier=policy.noise_multiplier,
        clip_norm=policy.clip_norm,
        sampling_rate=rate,
        rounds=rounds,
    )
