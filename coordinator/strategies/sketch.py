"""Sketches of weight updates: cosine similarities at a fraction of the cost, seeded.

Comparing k updates of n parameters exactly costs k²·n multiply-adds and a float64 copy of
all k updates (:func:`~coordinator.strategies.aggregate.cosine_similarity_matrix`): at
2,500 updates of the 60,432-parameter compact model that is 3.8·10¹¹ operations and 1.2 GB.
A sketch maps each update to d ≪ n numbers once, as it arrives, and the cosines are taken
between sketches: k·n + k²·d operations, k·d numbers kept.

The sketch is a count sketch (Charikar, Chen & Farach-Colton, "Finding frequent items in
data streams", ICALP 2002; as a random projection, the "hashing trick" of Weinberger et al.,
ICML 2009): every parameter i is added, with a random sign s(i), to one bucket h(i) of d.
⟨Sx, Sy⟩ is an unbiased estimate of ⟨x, y⟩ for any bucket assignment, because the signs
are independent: the cross terms s_i s_j x_i y_j of two parameters sharing a bucket have
mean 0. Its variance, Σ over buckets of the products of the two vectors' energies in the
bucket (less the diagonal), is that of a dense Gaussian projection,
(‖x‖²‖y‖² + ⟨x, y⟩²)/d, when every bucket holds about 1/d of each vector's energy. Here
h(i) = i mod d with d a prime (the next one above the bound below): every bucket takes
every d-th parameter across all layers, and no layer shape (powers of two, kernel sizes)
can line up with a prime period, so the energy spreads as with random buckets; a sketch is
then one multiply and one sum over a (⌈n/d⌉, d) array, about 0.03 ms for the compact model
(a random bucket per parameter costs a scatter or a gather, ten times more).

The dimension follows the Johnson–Lindenstrauss lemma in the form of Dasgupta & Gupta
("An elementary proof of a theorem of Johnson and Lindenstrauss", Random Struct. Alg. 22,
2003, Theorem 2.1): d ≥ 4 ln n / (ε²/2 − ε³/3) keeps every squared distance between n
points within a factor 1 ± ε, so between unit vectors every cosine within ±ε
(:func:`jl_dimension`). The bound is stated for dense Gaussian projections; for a count
sketch it holds when no single parameter carries a large share of an update's norm, which
is the case for the updates of a trained network (the tests and
``benchmarks/bench_server_scale.py`` measure the errors on real updates). The lemma's
worst case over all n² pairs is loose for a typical pair: the standard error of one
cosine is about (1 − cos²)/√d.

Seeded: the buckets and signs come from ``numpy.random.default_rng(seed)``, so the same
seed gives the same sketches in every process and after a restart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from faultfleet.types import Float64Array, FloatArray, IntArray

DEFAULT_EPSILON = 0.25
"""ε of the JL bound: every cosine between sketches within ±0.25 of the exact one with
probability ≥ 1 − 1/n; a typical pair's error is far smaller (about 0.03 at d = 1,400)."""


def next_prime(n: int) -> int:
    """The smallest prime >= ``n`` (n >= 2)."""
    candidate = max(n, 2)
    while any(candidate % p == 0 for p in range(2, math.isqrt(candidate) + 1)):
        candidate += 1
    return candidate


def jl_dimension(n_points: int, epsilon: float) -> int:
    """Smallest d with d ≥ 4 ln n / (ε²/2 − ε³/3) (Dasgupta & Gupta 2003, Theorem 2.1).

    Parameters
    ----------
    n_points : int
        How many vectors are compared (>= 2; fewer are treated as 2).
    epsilon : float
        Distortion allowed, in (0, 1).
    """
    if not 0 < epsilon < 1:
        raise ValueError(f"epsilon must be in (0, 1), got {epsilon!r}")
    n = max(int(n_points), 2)
    return math.ceil(4 * math.log(n) / (epsilon**2 / 2 - epsilon**3 / 3))


class UpdateSketcher:
    """Count sketch of flat vectors of one length.

    Parameters
    ----------
    n_params : int
        Length of the vectors sketched.
    dim : int
        Length of the sketches (>= 1), raised to the next prime. A dimension at or above
        ``n_params`` keeps the vectors as they are: nothing is gained by sketching them.
    seed : int
        Seeds the buckets and signs.
    """

    def __init__(self, n_params: int, dim: int, seed: int) -> None:
        if n_params < 1 or dim < 1:
            raise ValueError(f"n_params and dim must be >= 1, got {n_params} and {dim}")
        self.n_params = n_params
        self.seed = seed
        self.requested_dim = dim
        """``dim`` as given (the seed's derivation takes it): another process draws the
        same sketch with ``UpdateSketcher(n_params, requested_dim, seed)``."""
        self.identity = dim >= n_params
        self.dim = n_params if self.identity else dim
        if not self.identity:
            self.dim = next_prime(dim)
        rng = np.random.default_rng([seed, n_params, dim])
        rows = -(-n_params // self.dim)  # ⌈n / d⌉
        self._signs = rng.choice(np.array([-1.0, 1.0], dtype=np.float32), size=n_params)
        self._rows = rows

    def sketch(self, vector: FloatArray) -> FloatArray:
        """S·x, shape (d,), float32; x of shape (n_params,)."""
        values = np.asarray(vector, dtype=np.float32)
        if values.shape != (self.n_params,):
            raise ValueError(f"expected a vector of shape ({self.n_params},), got {values.shape}")
        if self.identity:
            return values.copy()
        # Σ over rows r of signs[r·d + j] · x[r·d + j]: the full rows in one einsum (one pass,
        # no signed copy of x), then the last, partial row; the sums run over the rows in
        # order, as the sum of the padded signed rows would.
        dim, full = self.dim, (self._rows - 1) * self.dim
        sketched: FloatArray = np.einsum(
            "rd,rd->d", self._signs[:full].reshape(-1, dim), values[:full].reshape(-1, dim)
        )
        rest = self.n_params - full
        sketched[:rest] += self._signs[full:] * values[full:]
        return sketched

    def unit_sketch(self, vector: FloatArray) -> FloatArray:
        """S·x / ‖S·x‖, shape (d,), float32 (all zeros for a zero sketch): cosines between
        sketches are then dot products."""
        sketched = self.sketch(vector)
        wide = sketched.astype(np.float64)
        norm = math.sqrt(float(np.dot(wide, wide)))  # what numpy.linalg.norm computes
        return sketched / np.float32(norm) if norm > 0 else sketched


def sketch_cosine_matrix(sketches: Sequence[FloatArray] | FloatArray) -> Float64Array:
    """Pairwise cosines of unit sketches (rows), shape (k, k), float64, in [−1, 1].

    A zero sketch has cosine 0 with everything and 1 with itself, as
    :func:`~coordinator.strategies.aggregate.cosine_similarity_matrix` gives for a zero
    update.
    """
    stacked = np.asarray(sketches, dtype=np.float64)
    if stacked.size == 0:
        return np.zeros((0, 0))
    similarity: Float64Array = stacked @ stacked.T
    # np.clip in place, as two passes: the same values, no second k × k array, faster
    np.minimum(similarity, 1.0, out=similarity)
    np.maximum(similarity, -1.0, out=similarity)
    np.fill_diagonal(similarity, 1.0)
    return similarity


PAIR_CHUNK_BYTES = 512 * 1024
"""What the two gathered (chunk, d) temporaries of one vectorised step of :func:`pair_dots`
may hold together: small enough to stay in a core's cache. 2,500 float32 rows of
d = 1,423 (a round of 10,000 agents) and their 40,000 sampled pairs took 48.8 ms in chunks of 4,096
pairs and 31.3 ms in chunks of 64 (median of 7, one thread), the same dot products."""


def pair_chunk(dim: int, itemsize: int) -> int:
    """Pairs per vectorised step of :func:`pair_dots` for rows of ``dim`` values."""
    return max(1, PAIR_CHUNK_BYTES // (2 * max(dim, 1) * itemsize))


def pair_dots(rows: npt.NDArray[Any], first: IntArray, second: IntArray) -> npt.NDArray[Any]:
    """Dot products ``rows[first[q]] · rows[second[q]]``, shape (q,), in ``rows``' dtype: of
    unit sketches, the cosines of the pairs, without the k × k matrix."""
    if len(first) == 0:
        return np.zeros(0, dtype=rows.dtype)
    chunk = pair_chunk(rows.shape[1], rows.itemsize)
    return np.concatenate(
        [
            np.einsum("qd,qd->q", rows[first[i : i + chunk]], rows[second[i : i + chunk]])
            for i in range(0, len(first), chunk)
        ]
    )
