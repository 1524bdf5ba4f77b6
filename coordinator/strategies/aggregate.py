"""Aggregation maths shared by every strategy: small pure functions on flat weight vectors."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from faultfleet.types import Float64Array, FloatArray


def weighted_average(weights: Sequence[FloatArray], num_samples: Sequence[int]) -> FloatArray:
    """Sample-weighted mean of client weight vectors (FedAvg; FLACC Algorithm 1, line 20).

    Parameters
    ----------
    weights : sequence of arrays of shape (n_params,)
    num_samples : sequence of int
        Training-set size of each client; all zero falls back to the plain mean.

    Returns
    -------
    array of shape (n_params,), float32
        Accumulated in float64 in the order given; strategies sort results by client id
        first, so the aggregate is the same whatever order clients answered in.
    """
    if len(weights) == 0:
        raise ValueError("weighted_average needs at least one weight vector")
    if len(weights) != len(num_samples):
        raise ValueError(f"{len(weights)} weight vectors but {len(num_samples)} sample counts")
    counts = np.asarray(num_samples, dtype=np.float64)
    if np.any(counts < 0):
        raise ValueError(f"sample counts must be >= 0, got {list(num_samples)}")
    total = counts.sum()
    coefficients = counts / total if total > 0 else np.full(len(weights), 1.0 / len(weights))
    stacked = np.stack([np.asarray(w, dtype=np.float64) for w in weights])
    return np.asarray(coefficients @ stacked, dtype=np.float32)


def cosine_similarity_matrix(updates: Sequence[FloatArray]) -> Float64Array:
    """Pairwise cosine similarity of weight updates (FLACC eq. 19; CFL eq. 9).

    Parameters
    ----------
    updates : sequence of arrays of shape (n_params,)

    Returns
    -------
    array of shape (k, k), float64, values in [-1, 1]
        A zero update has similarity 0 with everything (and 1 with itself).
    """
    if len(updates) == 0:
        return np.zeros((0, 0))
    unit = unit_rows(updates)
    similarity = np.clip(unit @ unit.T, -1.0, 1.0)
    np.fill_diagonal(similarity, 1.0)
    return similarity


def unit_rows(updates: Sequence[FloatArray] | Float64Array) -> Float64Array:
    """The updates scaled to unit norm, stacked (k, d), float64; a zero update stays zero
    (cosine 0 with every other, :func:`cosine_similarity_matrix`)."""
    stacked = np.stack([np.asarray(u, dtype=np.float64) for u in updates])
    norms = np.linalg.norm(stacked, axis=1)
    stacked /= np.where(norms > 0, norms, 1.0)[:, None]
    return stacked


def update_norms(updates: Sequence[FloatArray]) -> Float64Array:
    """Euclidean norm of each update, shape (k,)."""
    return np.array([float(np.linalg.norm(np.asarray(u, dtype=np.float64))) for u in updates])
