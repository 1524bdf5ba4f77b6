"""JGL's identity rule: the gradient similarity S, eq. 4's scores and the empty-cluster fix.

Lin, Chen, Yang, Wu & Liu, "A joint gradient and loss based clustered federated learning
design" (Algorithm 1). Small pure functions on numpy arrays, used by
:class:`coordinator.strategies.jgl.JointGradientLoss` (whose module docstring gives the
decisions they implement):

* :func:`descent_similarity` — S_ik of eqs. 2–3 (or §II-B's Euclidean alternative), with
  the device's descent direction −∇L_ik;
* :func:`identity_scores` — eq. 4's objective λ·S_ik − (1 − λ)·L_ik;
* :func:`fill_empty_clusters` — §II-C, every cluster gets a device;

and the strategy's hyper-parameters (:data:`PARAMETERS`, with the names the ``similarity``
and ``reference`` options take: :data:`SIMILARITIES`, :data:`REFERENCES`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

import numpy as np
import numpy.typing as npt

from coordinator.strategies.parameters import FRACTION, Param
from faultfleet.types import Float64Array, IntArray

Similarity = Literal["cosine", "euclidean"]
SIMILARITIES: tuple[str, ...] = ("cosine", "euclidean")
Reference = Literal["update", "gradient"]
REFERENCES: tuple[str, ...] = ("update", "gradient")

PARAMETERS: tuple[Param, ...] = (
    replace(FRACTION, default=1.0, reference="JGL Algorithm 1 has every device take part"),
    Param(
        "n_clusters",
        "int",
        4,
        "the number K of cluster models, fixed for the whole run",
        "JGL Algorithm 1",
        low=1,
    ),
    Param(
        "lam",
        "float",
        0.2,
        "λ, the weight of the gradient similarity against the loss",
        "JGL eq. 4; 0.2 is the paper's best",
        low=0.0,
        high=1.0,
    ),
    Param(
        "batch_size",
        "int",
        64,
        "the samples of the probe mini-batch Z_i (clipped to the device's data)",
        "JGL Algorithm 1, lines 3–9",
        low=1,
    ),
    Param(
        "similarity",
        "str",
        "cosine",
        "S: eq. 3's cosine, or the negative Euclidean distance of §II-B",
        "JGL eqs. 2–3",
        choices=SIMILARITIES,
    ),
    Param(
        "reference",
        "str",
        "update",
        "what S compares with: the cluster's last update, or the descent direction of "
        "its devices' last probe gradients",
        "JGL eq. 2 and its gloss",
        choices=REFERENCES,
    ),
)
"""The hyper-parameters of :class:`~coordinator.strategies.jgl.JointGradientLoss`, its
:attr:`~coordinator.strategies.base.Strategy.parameters` table."""


def descent_similarity(
    gradients: npt.ArrayLike, updates: npt.ArrayLike, kind: str = "cosine"
) -> Float64Array:
    """S_ik of eq. 3 for one device, with the descent direction −∇L_ik (:mod:`.jgl`).

    Parameters
    ----------
    gradients : array of shape (K, n_params)
        ∇L_ik: the device's gradient of every cluster model's loss.
    updates : array of shape (K, n_params)
        Δw_k: every cluster's last update.
    kind : "cosine" or "euclidean"
        ``cos(−∇L_ik, Δw_k)`` (0 when either is zero) or ``−‖−∇L_ik − Δw_k‖``.

    Returns
    -------
    array of shape (K,), float64
    """
    descent = -np.asarray(gradients, dtype=np.float64)
    step = np.asarray(updates, dtype=np.float64)
    if kind == "euclidean":
        return np.asarray(-np.linalg.norm(descent - step, axis=1), dtype=np.float64)
    if kind != "cosine":
        raise ValueError(f"similarity must be one of {', '.join(SIMILARITIES)}, got {kind!r}")
    norms = np.linalg.norm(descent, axis=1) * np.linalg.norm(step, axis=1)
    dots = np.einsum("kn,kn->k", descent, step)
    safe = np.where(norms > 0, norms, 1.0)
    return np.where(norms > 0, np.clip(dots / safe, -1.0, 1.0), 0.0)


def identity_scores(losses: npt.ArrayLike, similarity: npt.ArrayLike, lam: float) -> Float64Array:
    """Eq. 4's objective λ·S_ik − (1 − λ)·L_ik for every cluster k, shape (K,)."""
    return lam * np.asarray(similarity, dtype=np.float64) - (1.0 - lam) * np.asarray(
        losses, dtype=np.float64
    )


def fill_empty_clusters(
    assignment: IntArray, n_clusters: int, rng: np.random.Generator
) -> tuple[IntArray, int]:
    """§II-C: give every empty cluster one device taken from a cluster with several.

    Parameters
    ----------
    assignment : array of shape (n_devices,), int
        Cluster index of each device, in [0, n_clusters).
    n_clusters : int
    rng : numpy.random.Generator
        Drawn from only when a cluster is empty.

    Returns
    -------
    (assignment, moves)
        A new array (the input is not modified) and the number of devices moved. Empty
        clusters are filled in index order, each with a device drawn uniformly among those
        whose cluster has more than one member; when none is left, the rest stay empty.
    """
    result = np.array(assignment, dtype=np.int64)
    moves = 0
    for empty in range(n_clusters):
        if np.any(result == empty):
            continue
        counts = np.bincount(result, minlength=n_clusters)
        donors = np.flatnonzero(counts[result] > 1)
        if donors.size == 0:
            break
        result[int(rng.choice(donors))] = empty
        moves += 1
    return result, moves
