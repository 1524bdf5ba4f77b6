"""FAACL's pure pieces: the support tests, the Hoeffding bound, merge and partition pairing.

FAACL (Federated Adaptive Asymmetric Clustered Learning, "FAACL: federated adaptive
asymmetric clustered learning", anonymous ICLR submission; ``shared/papers/faacl.txt``):

* :func:`wilcoxon_p_value` and :func:`supports_by_wilcoxon` — cluster support, version 1
  (§4.2, Algorithm 3): a one-sided Wilcoxon signed-rank test per device, every member must
  pass;
* :func:`supports_by_mean` — version 2 (§4.2, Algorithm 4 as the prose defines it): the mean
  of the pooled per-sample loss differences against ε;
* :func:`hoeffding_tail` and :func:`theorem_4_1_delta` — Theorem 4.1 (eqs. 3–4, proof
  eqs. 7–35);
* :class:`Cluster`, :func:`mutual_pairs` and :func:`merge_clusters` — the clusters with
  their supports (§2, components 1–3) and Algorithm 5's merge;
* :class:`Partition`, :func:`settle` and :func:`pair_partitions` — when flat FAACL has
  converged (Algorithm 7's loop) and the random pairing of hierarchical FAACL (Algorithm 1).

Loss differences are ``ℓ(C2.θ, z) − ℓ(C1.θ, z)`` on the validation samples z of a member of
C1: positive where the candidate supporter C2 is worse than C1's own model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import wilcoxon

from faultfleet.tasks import LossesResult, ProbeResults
from faultfleet.types import Float64Array


def wilcoxon_p_value(differences: Float64Array, epsilon: float) -> float:
    """p-value of the one-sided Wilcoxon signed-rank test of Algorithm 3 on one device.

    Null hypothesis (§4.2): ``ℓ(C1.θ, z) + ε < ℓ(C2.θ, z)``, i.e. the differences
    ``d = ℓ(C2) − ℓ(C1)`` lie above ε; the alternative is that they lie below. The test runs
    on ``d − ε`` with ``alternative="less"``: a small p-value is evidence that C2's model is
    at most ε worse than C1's on this device.

    Parameters
    ----------
    differences : array of shape (n,)
        Per-sample loss differences on the device's validation samples, loss units (nats).
    epsilon : float
        Margin ε >= 0, loss units.

    Returns
    -------
    float in [0, 1]
        Exact for up to 50 samples without ties, the normal approximation beyond (SciPy's
        ``method="auto"``). A sample exactly at the margin (``d = ε``) is evidence neither
        way: such zeros are split between the positive and negative ranks
        (``zero_method="zsplit"``). With no sample, or every sample at the margin, there is no
        evidence and the p-value is 1. With n samples the smallest reachable p-value is
        2⁻ⁿ, so a device with fewer than log2(1/α) validation samples can never pass.
    """
    shifted = np.asarray(differences, dtype=np.float64) - float(epsilon)
    if shifted.ndim != 1:
        raise ValueError(f"differences must be a 1-d array, got shape {shifted.shape}")
    if not np.all(np.isfinite(shifted)):
        raise ValueError("loss differences must be finite")
    if shifted.size == 0 or not np.any(shifted != 0.0):
        return 1.0
    result = wilcoxon(shifted, alternative="less", zero_method="zsplit", method="auto")
    return float(result.pvalue)


def supports_by_wilcoxon(per_device: Sequence[Float64Array], epsilon: float, alpha: float) -> bool:
    """Version 1 (Algorithm 3): C2 supports C1 iff every answering member of C1 passes.

    Parameters
    ----------
    per_device : sequence of arrays of shape (n_d,)
        Loss differences ``ℓ(C2) − ℓ(C1)`` on each answering member's validation samples.
    epsilon : float
        Margin ε, loss units.
    alpha : float
        Significance level α: a device passes when its p-value is <= α.

    Returns
    -------
    bool
        False when no device answered (no evidence of support).
    """
    if not per_device:
        return False
    return all(wilcoxon_p_value(d, epsilon) <= alpha for d in per_device)


def supports_by_mean(per_device: Sequence[Float64Array], epsilon: float) -> bool:
    """Version 2 (direct comparison, §4.2): the pooled mean difference is at most ε.

    The differences of all answering members' validation samples are pooled, so every
    sample weighs the same (the S_n / n of Theorem 4.1, with n the pooled count).

    Returns
    -------
    bool
        False when no sample answered.
    """
    pooled = _pool(per_device)
    if pooled.size == 0:
        return False
    return float(pooled.mean()) <= epsilon


def _pool(per_device: Sequence[Float64Array]) -> Float64Array:
    if not per_device:
        return np.zeros(0)
    pooled = np.concatenate([np.asarray(d, dtype=np.float64).ravel() for d in per_device])
    if not np.all(np.isfinite(pooled)):
        raise ValueError("loss differences must be finite")
    return pooled


def hoeffding_tail(n: int, t: float, loss_range: float) -> float:
    """Hoeffding's bound ``exp(−2 (n t)² / (n (b − a)²))`` (eqs. 7–8, 12, 16).

    The probability that the mean of n independent differences in [a, b] strays more than
    t from its expectation in a given direction.

    Parameters
    ----------
    n : int
        Samples in the mean (>= 0; 0 gives the trivial bound 1).
    t : float
        Deviation, loss units; t <= 0 gives 1.
    loss_range : float
        b − a > 0, width of the interval the per-sample differences lie in, loss units.
    """
    if not loss_range > 0:
        raise ValueError(f"loss_range must be > 0, got {loss_range!r}")
    if n <= 0 or t <= 0:
        return 1.0
    return math.exp(-2.0 * n * t * t / (loss_range * loss_range))


def theorem_4_1_delta(
    *, m: int, big_m: int, n: int, epsilon: float, gap: float, loss_range: float
) -> float:
    """The failure probability δ of Theorem 4.1, eq. 4 (not capped at 1).

    ``δ <= m [2 exp(−2(nε)²/(n(b−a)²)) + (M − m) exp(−2(n(gap−ε))²/(n(b−a)²))]``: the
    probability that flat FAACL (version 2, threshold ε) fails to cluster together m devices
    with n samples each from one distribution, among M devices whose other distributions are
    at least ``gap`` worse for them.
    """
    if not 1 <= m <= big_m:
        raise ValueError(f"need 1 <= m <= M, got m={m}, M={big_m}")
    same = 2.0 * hoeffding_tail(n, epsilon, loss_range)
    other = (big_m - m) * hoeffding_tail(n, gap - epsilon, loss_range) if big_m > m else 0.0
    return m * (same + other)


def mutual_pairs(order: Sequence[str], supports: Mapping[str, Set[str]]) -> list[tuple[str, str]]:
    """The pairs of mutually supportive clusters that Algorithm 5 merges in one pass.

    Clusters are visited in ``order``; each is paired with the first cluster after it in
    ``order``, not yet paired, that supports it and that it supports (``b in supports[a]``
    and ``a in supports[b]``). A cluster merges at most once per pass: Algorithm 5 puts both
    clusters of a merge in C_old, and the new cluster waits for the next round.

    Parameters
    ----------
    order : sequence of cluster keys
    supports : mapping of cluster key to the keys of its supportive clusters (C.sup)

    Returns
    -------
    list of (first, second) in order of ``first``.
    """
    taken: set[str] = set()
    pairs: list[tuple[str, str]] = []
    for i, first in enumerate(order):
        if first in taken:
            continue
        for second in order[i + 1 :]:
            if second in taken:
                continue
            if second in supports.get(first, ()) and first in supports.get(second, ()):
                pairs.append((first, second))
                taken.update((first, second))
                break
    return pairs


def pair_partitions(ids: Sequence[int], rng: np.random.Generator) -> list[tuple[int, ...]]:
    """Algorithm 1's pairing: partitions drawn two by two, without repetition, at random.

    Parameters
    ----------
    ids : sequence of partition ids
        Their order does not matter: they are sorted before the draw.
    rng : numpy Generator
        One permutation is drawn from it.

    Returns
    -------
    list of tuples
        Pairs in draw order; with an odd count the last partition drawn is left alone, as a
        1-tuple, and moves to the next level unchanged.
    """
    ordered = sorted(ids)
    drawn = [ordered[int(i)] for i in rng.permutation(len(ordered))]
    groups = [tuple(drawn[i : i + 2]) for i in range(0, len(drawn), 2)]
    return groups


def read_losses(
    plan: Mapping[str, Sequence[str]], results: ProbeResults
) -> dict[str, dict[str, Float64Array]]:
    """Check the answers to a losses probe and return them per device and model, float64.

    Parameters
    ----------
    plan : mapping of device to the model keys it was asked about
    results : the probe's answers

    Returns
    -------
    dict
        ``losses[device][key]``, array of shape (n_device,), for every device that answered
        with at least one validation sample; a device with an empty split abstains.

    Raises
    ------
    TypeError
        For an answer that is not a :class:`~faultfleet.tasks.LossesResult`.
    ValueError
        For an answer from a device not asked (or twice), without a requested model, or
        whose loss vectors are not per-sample vectors of one common length.
    """
    losses: dict[str, dict[str, Float64Array]] = {}
    for r in results:
        if not isinstance(r, LossesResult):
            raise TypeError(f"FAACL probes per-sample losses, got {type(r).__name__}")
        if r.client_id not in plan or r.client_id in losses:
            raise ValueError(f"unexpected probe answer from {r.client_id!r}")
        missing = [k for k in plan[r.client_id] if k not in r.losses]
        if missing:
            raise ValueError(f"{r.client_id!r} sent no losses for {', '.join(missing)}")
        arrays = {k: np.asarray(r.losses[k], dtype=np.float64) for k in plan[r.client_id]}
        shapes = {a.shape for a in arrays.values()}
        if len(shapes) != 1 or len(next(iter(shapes))) != 1:
            raise ValueError(
                f"{r.client_id!r} sent losses of shapes {sorted(shapes)}; expected one "
                "per-sample vector of the same length for every model"
            )
        if next(iter(shapes))[0] > 0:
            losses[r.client_id] = arrays
    return losses


# -- clusters, supports and partitions ---------------------------------------------------------


@dataclass
class Cluster:
    """One FAACL cluster: C.D, C.sup and its partition (the model is kept by key)."""

    members: list[str]
    """Member devices (C.D), in registration order."""
    supports: set[str] = field(default_factory=set)
    """Keys of its supportive clusters (C.sup): their members also train this model."""
    partition: int | None = None
    """Partition id; None until the cluster's model has been trained once."""

    def to_json(self, key: str) -> dict[str, Any]:
        """A JSON-ready record, supports sorted."""
        return {
            "key": key,
            "members": list(self.members),
            "supports": sorted(self.supports),
            "partition": self.partition,
        }

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> tuple[str, Cluster]:
        """Inverse of :meth:`to_json`: (key, cluster)."""
        partition = record["partition"]
        return str(record["key"]), cls(
            members=[str(m) for m in record["members"]],
            supports={str(s) for s in record["supports"]},
            partition=None if partition is None else int(partition),
        )


@dataclass
class Partition:
    """A partition of hierarchical FAACL (flat FAACL has one)."""

    stable: bool
    """Whether flat FAACL has converged on it (Algorithm 7's loop has ended)."""
    changing_rounds: int = 0
    """Consecutive rounds undecided: supports changed without a merge, or nobody answered."""


def merge_clusters(
    clusters: dict[str, Cluster],
    first: str,
    second: str,
    key: str,
    rank: Callable[[str], int],
) -> Cluster:
    """Algorithm 5 for one mutually supportive pair, in place.

    ``first`` and ``second`` are replaced by ``key``: C'.D = C1.D ∪ C2.D (sorted by
    ``rank``, the registration order), C'.sup = C1.sup ∩ C2.sup, in C1's partition. Another
    cluster that listed both halves among its supports lists ``key`` instead; one that
    listed a single half drops it (the same intersection rule).

    Returns
    -------
    Cluster
        The merged cluster, now ``clusters[key]``.
    """
    a, b = clusters.pop(first), clusters.pop(second)
    merged = Cluster(
        members=sorted((*a.members, *b.members), key=rank),
        supports=a.supports & b.supports,
        partition=a.partition,
    )
    halves = {first, second}
    for other in clusters.values():
        if halves & other.supports:
            both = halves <= other.supports
            other.supports -= halves
            if both:
                other.supports.add(key)
    clusters[key] = merged
    return merged


def settle(
    partition: Partition,
    *,
    clusters: int,
    merged: bool,
    answered: bool,
    changed: bool,
    patience: int | None,
) -> None:
    """Update ``partition`` after a support-and-merge round (Algorithm 7's loop test).

    Stable when it holds at most one cluster, or when some cluster of it answered and
    nothing changed. A merge is progress and resets the count of undecided rounds; a round
    that only changed supports, or in which none of its devices answered, counts, and
    ``patience`` such rounds in a row end the loop (``None``: never).
    """
    if clusters <= 1 or (answered and not merged and not changed):
        partition.stable, partition.changing_rounds = True, 0
    elif merged:
        partition.changing_rounds = 0
    else:
        partition.changing_rounds += 1
        if patience is not None and partition.changing_rounds >= patience:
            partition.stable, partition.changing_rounds = True, 0
