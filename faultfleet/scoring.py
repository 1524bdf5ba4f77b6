"""How well a strategy recovered the federation's true groups, and how well it predicts.

Pure functions on cluster labels. The true groups are known in simulation (each client's
fault mixture or machine condition); the found clusters come from
:meth:`coordinator.strategies.base.Strategy.cluster_labels`. Both scores are invariant to
how clusters are numbered.

* :func:`adjusted_rand_index` — Hubert & Arabie's adjusted Rand index: 1 for identical
  partitions, about 0 for a random one, negative when worse than chance.
* :func:`purity` — the fraction of clients whose found cluster's majority true group is
  their own; 1 whenever no found cluster mixes groups (so splitting a true group in two
  is not penalised, which is why it is reported next to the ARI).
* :func:`mean_client_accuracy` — the unweighted mean over clients of each client's test
  accuracy, the accuracy FLACC reports (§V-B), so a small client counts as much as a large
  one.
* :func:`trimmed_client_accuracy` — the same mean with the highest and lowest accuracies
  dropped (:func:`trim_count` of them at each end), so that one client reporting 1.0 or 0.0
  for itself cannot carry a figure; the coordinator scores self-reported evaluations with it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ClusteringScores:
    """Agreement of a found clustering with the true groups."""

    num_clusters: int
    """Number of distinct found clusters."""
    ari: float
    """Adjusted Rand index, in [-1, 1] (1: identical partitions)."""
    purity: float
    """Purity, in (0, 1] (1: no found cluster mixes true groups)."""


def _check_labels(true: Sequence[int], found: Sequence[int]) -> None:
    if len(true) != len(found):
        raise ValueError(f"true has {len(true)} labels but found has {len(found)}")
    if len(true) == 0:
        raise ValueError("scoring a clustering needs at least one client")


def adjusted_rand_index(true: Sequence[int], found: Sequence[int]) -> float:
    """Adjusted Rand index of two labellings of the same clients.

    Parameters
    ----------
    true, found : sequence of int, length n_clients
        Group of each client, in the same client order; label values are arbitrary.

    Returns
    -------
    float
        1.0 for identical partitions (including both being a single cluster), about 0.0
        for independent ones.
    """
    # Imported here: scikit-learn takes about a second and tens of MB to import, and the
    # processes that use this module for trim_count only (ingest workers, robust
    # aggregation) never score clusters.
    from sklearn.metrics import adjusted_rand_score  # noqa: PLC0415

    _check_labels(true, found)
    return float(adjusted_rand_score(list(true), list(found)))


def purity(true: Sequence[int], found: Sequence[int]) -> float:
    """Σ over found clusters of the size of their largest true group, divided by n.

    Parameters
    ----------
    true, found : sequence of int, length n_clients
        Group of each client, in the same client order; label values are arbitrary.

    Returns
    -------
    float
        In (0, 1]; 1.0 when every found cluster lies inside one true group.
    """
    _check_labels(true, found)
    per_cluster: dict[int, Counter[int]] = {}
    for group, cluster in zip(true, found, strict=True):
        per_cluster.setdefault(cluster, Counter())[group] += 1
    majority = sum(max(counts.values()) for counts in per_cluster.values())
    return majority / len(true)


def clustering_scores(true_groups: Mapping[str, int], found: Mapping[str, int]) -> ClusteringScores:
    """Score a found clustering against the true groups, matching clients by id.

    Parameters
    ----------
    true_groups : mapping of client id to int
        True group of every client.
    found : mapping of client id to int
        Found cluster of every client (e.g. ``strategy.cluster_labels()``).

    Raises
    ------
    ValueError
        If the two mappings do not name the same clients, or name none.
    """
    missing = sorted(set(true_groups) - set(found))
    extra = sorted(set(found) - set(true_groups))
    if missing or extra:
        raise ValueError(
            f"true_groups and found must name the same clients; missing from found: "
            f"{missing}, not in true_groups: {extra}"
        )
    ids = sorted(true_groups)
    true = [true_groups[c] for c in ids]
    labels = [found[c] for c in ids]
    return ClusteringScores(
        num_clusters=len(set(labels)),
        ari=adjusted_rand_index(true, labels),
        purity=purity(true, labels),
    )


def mean_client_accuracy(accuracies: Sequence[float]) -> float:
    """Unweighted mean over clients of each client's test accuracy (FLACC §V-B).

    Parameters
    ----------
    accuracies : sequence of float, length n_clients
        Test accuracy of every client, each in [0, 1].

    Raises
    ------
    ValueError
        If there are no accuracies, or one is not a finite number in [0, 1].
    """
    if len(accuracies) == 0:
        raise ValueError("mean_client_accuracy needs at least one client accuracy")
    for accuracy in accuracies:
        if not (math.isfinite(accuracy) and 0.0 <= accuracy <= 1.0):
            raise ValueError(f"accuracies must lie in [0, 1], got {accuracy!r}")
    return math.fsum(accuracies) / len(accuracies)


TRIM_FRACTION = 0.1
"""Share of clients :func:`trimmed_client_accuracy` drops at each end by default."""


def trim_count(k: int, trim_fraction: float) -> int:
    """Values dropped at each end of k: min(⌈β·k⌉, ⌊(k − 1)/2⌋), 0 when β = 0.

    At least one value is always kept; with k = 3 and any β > 0 the rule keeps the median.
    """
    if not 0.0 <= trim_fraction < 0.5:
        raise ValueError(f"trim_fraction must be in [0, 0.5), got {trim_fraction!r}")
    if trim_fraction == 0 or k < 3:
        return 0
    return min(math.ceil(trim_fraction * k), (k - 1) // 2)


def trimmed_client_accuracy(
    accuracies: Sequence[float], trim_fraction: float = TRIM_FRACTION
) -> float:
    """Mean over clients of their accuracy, the :func:`trim_count` highest and lowest dropped.

    With 3 to 10 clients and the default β = 0.1, the best and the worst one are dropped;
    with 1 or 2 nothing can be, and it is :func:`mean_client_accuracy`.

    Raises
    ------
    ValueError
        As :func:`mean_client_accuracy`.
    """
    mean_client_accuracy(accuracies)  # the same checks
    t = trim_count(len(accuracies), trim_fraction)
    ordered = sorted(accuracies)
    return mean_client_accuracy(ordered[t : len(ordered) - t])
