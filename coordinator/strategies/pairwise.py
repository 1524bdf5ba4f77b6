"""How strategies compare clients' updates: exact cosines, or cosines of seeded sketches.

Every strategy that compares updates pairwise takes its cosines (and FL+HC its Euclidean
distances) from an :class:`UpdateComparer`:

- ``pairwise = "exact"``: :func:`~coordinator.strategies.aggregate.cosine_similarity_matrix`
  on the updates, as every strategy always did (bit for bit);
- ``pairwise = "sketch"``: the same cosines between count sketches of the updates
  (:mod:`.sketch`), d = :func:`~.sketch.jl_dimension` (m clients, ``sketch_epsilon``),
  seeded by ``sketch_seed``;
- ``pairwise = "auto"`` (the default): exact below :data:`SKETCH_FLEET` registered
  clients, sketches from there on.

Where each strategy uses it, and what stays exact:

- FLACC: eq. 19's cosines (:mod:`.flacc_sketch`), with its pair memory as a bounded list
  (:mod:`.pair_memory`) and its averages streamed (:mod:`.streaming`).
- FL+HC: the clustering round's dendrogram — Euclidean distances between sketches (the
  count sketch is linear, so ‖Sx − Sy‖ = ‖S(x − y)‖ is within 1 ± ε of ‖x − y‖) or cosine
  distances — and its evidence cosines.
- CFL: the cosines of eq. 9 that the optimal bipartition and the similarity criterion
  read, and its evidence. The norm criterion's ‖mean Δθ‖ and max ‖Δθ_i‖ stay exact: a
  norm costs n operations per update, as a sketch does, so sketching saves nothing there,
  and exact norms keep ε₁ and ε₂ in the units they were tuned in.
- JGL: the record of gradient cosines between devices (its evidence). Eq. 3's S_ik, the
  similarity that places a device, stays exact: it compares each device with K cluster
  directions (K·n operations, no pairs), which a sketch would only make noisier.
- FAACL and IFCA: the same-model cosines of their evidence
  (:class:`~.evidence.SameModelSimilarity`). Their clusterings compare losses (FAACL's
  asymmetric support test, Algorithms 3–4; IFCA's argmin), not updates: nothing there to
  sketch.

Sketching removes the n from the k²·n of comparing k updates, not the k²: FL+HC's
linkage and CFL's bipartition stay quadratic in the clients (each holds the k(k − 1)/2
distances of a condensed vector, :mod:`.condensed`; the evidence keeps sampled pairs);
``benchmarks/bench_server_scale.py --strategy`` measures how far that reaches.

Why 1,000: at c = 0.25 a round of 1,000 clients brings 250 updates, which the exact path
compares with 250²·n/2 multiply-adds after copying them all to float64: for the compact
model (n = 60,432) 1.9·10⁹ operations and 120 MB, for the paper model (n = 4.4·10⁶)
1.4·10¹¹ and 8.8 GB. The fleets the papers and our benchmarks study (48 to 384 machines)
keep the exact path unchanged; a large model on a mid-sized fleet may set ``sketch``
explicitly. From 1,000 clients on, the sketch's ±ε is far below the gap between
within-group and cross-group cosines that the clusterings rely on
(``benchmarks/bench_server_scale.py`` measures the clusters against the exact path).

The sketch's dimension is set once, from the clients registered when the strategy starts;
strategies other than FLACC save that count with their state, so a resumed run sketches
as the uninterrupted one did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, cast

import numpy as np

from coordinator.strategies.aggregate import cosine_similarity_matrix
from coordinator.strategies.parameters import Param
from coordinator.strategies.sketch import (
    DEFAULT_EPSILON,
    UpdateSketcher,
    jl_dimension,
    pair_dots,
    sketch_cosine_matrix,
)
from faultfleet.types import Float64Array, FloatArray, IntArray

PAIRS_MATRIX_UP_TO = 2048
"""Up to this many updates, :meth:`UpdateComparer.pair_cosines` takes the cosines of the
sampled pairs from the k × k matrix (32 MB at 2,048): a matrix product computes every pair
faster than gathering the sampled ones does (on this module's benchmark, 625 updates of 4
models at 10,000 agents: 0.32 s a round by the matrix, 0.56 s by the pairs)."""

MODES = ("auto", "exact", "sketch")
SKETCH_FLEET = 1000
"""From this many registered clients on, ``pairwise = "auto"`` compares sketches."""

PAIRWISE = Param(
    "pairwise",
    "str",
    "auto",
    "how updates are compared: exact cosines, cosines of seeded sketches, or sketches "
    f"from {SKETCH_FLEET} registered clients on ('auto')",
    "ours; coordinator/strategies/pairwise.py",
    choices=MODES,
)
SKETCH_EPSILON = Param(
    "sketch_epsilon",
    "float",
    DEFAULT_EPSILON,
    "ε of the Johnson–Lindenstrauss bound that sets the sketch dimension (pairwise sketch)",
    "Dasgupta & Gupta 2003, Theorem 2.1",
    low=0.0,
    low_open=True,
    high=1.0,
    high_open=True,
)
SKETCH_SEED = Param(
    "sketch_seed",
    "int",
    0,
    "seeds the sketch of the updates (and FLACC's sampled pairs) under pairwise sketch",
    "ours",
    low=0,
)
PAIRWISE_PARAMETERS = (PAIRWISE, SKETCH_EPSILON, SKETCH_SEED)


def resolve(mode: str, n_clients: int) -> str:
    """``"exact"`` or ``"sketch"`` for ``mode`` in a federation of ``n_clients``."""
    if mode == "auto":
        return "sketch" if n_clients >= SKETCH_FLEET else "exact"
    if mode not in MODES:
        raise ValueError(f"pairwise must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


class PairwiseOptions(Protocol):
    """The three options of a strategy that compares updates (:data:`PAIRWISE_PARAMETERS`)."""

    pairwise: str
    sketch_epsilon: float
    sketch_seed: int


class UpdateComparer:
    """Pairwise cosines of updates, exact or sketched.

    Parameters
    ----------
    mode : {"exact", "sketch"}
        A resolved mode (:func:`resolve`).
    n_params : int
    n_clients : int
        Registered clients: the n of the JL bound.
    epsilon : float
    seed : int
    """

    def __init__(
        self, mode: str, n_params: int, n_clients: int, *, epsilon: float, seed: int
    ) -> None:
        self.mode = mode
        self.n_clients = n_clients
        self.sketcher = (
            UpdateSketcher(n_params, jl_dimension(n_clients, epsilon), seed)
            if mode == "sketch"
            else None
        )

    def matrix(self, updates: Sequence[FloatArray]) -> Float64Array:
        """Cosines of ``updates`` (each of shape (n_params,)), shape (k, k), float64."""
        if self.sketcher is None:
            return cosine_similarity_matrix(updates)
        return sketch_cosine_matrix([self.sketcher.unit_sketch(u) for u in updates])

    def pair_cosines(
        self, updates: Sequence[FloatArray], first: IntArray, second: IntArray
    ) -> Float64Array:
        """``matrix(updates)[first, second]``, shape (q,), float64. On sketches of more than
        :data:`PAIRS_MATRIX_UP_TO` updates only those pairs are computed, a cache-sized
        chunk at a time (:func:`~.sketch.pair_dots`): k updates with p partners each cost
        k·p·d, not k²·d, and no k × k matrix is built. Fewer updates take the matrix, which
        one matrix product makes faster."""
        if len(first) == 0:
            return np.zeros(0)
        if self.sketcher is None:
            return self.matrix(updates)[first, second]
        sketcher = self.sketcher
        return sketch_pair_cosines([sketcher.unit_sketch(u) for u in updates], first, second)

    def state(self) -> dict[str, int | str]:
        """What a saved strategy keeps to sketch as before: the mode and the JL bound's n."""
        return {"mode": self.mode, "clients": self.n_clients}


def sketch_pair_cosines(
    sketches: Sequence[FloatArray] | FloatArray, first: IntArray, second: IntArray
) -> Float64Array:
    """The cosines of the pairs ``(first[q], second[q])`` of unit sketches, shape (q,),
    float64: from their k × k matrix up to :data:`PAIRS_MATRIX_UP_TO` sketches, pair by pair
    beyond (:meth:`UpdateComparer.pair_cosines` on sketches; a streamed round's sketches)."""
    if len(first) == 0:
        return np.zeros(0)
    if len(sketches) <= PAIRS_MATRIX_UP_TO:
        return sketch_cosine_matrix(sketches)[first, second]
    rows = np.asarray(sketches, dtype=np.float64)
    clipped: Float64Array = np.clip(pair_dots(rows, first, second), -1.0, 1.0)
    return clipped


def comparer_for(
    mode: str, n_params: int, n_clients: int, epsilon: float = DEFAULT_EPSILON, seed: int = 0
) -> UpdateComparer:
    """An :class:`UpdateComparer` for an unresolved ``mode`` (``"auto"`` included)."""
    return UpdateComparer(resolve(mode, n_clients), n_params, n_clients, epsilon=epsilon, seed=seed)


def strategy_comparer(
    options: PairwiseOptions,
    n_params: int,
    n_clients: int,
    saved: Mapping[str, object] | None = None,
) -> UpdateComparer:
    """The comparer of a strategy with ``options``, for ``n_clients`` registered clients, or
    for the count a saved :meth:`UpdateComparer.state` names (a resumed run)."""
    if saved is not None:
        n_clients = int(cast(int, saved["clients"]))
    return comparer_for(
        options.pairwise, n_params, n_clients, options.sketch_epsilon, options.sketch_seed
    )
