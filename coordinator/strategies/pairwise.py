"""How strategies compare clients' updates: exact cosines, or cosines of seeded sketches.

Every strategy that compares updates pairwise — FLACC (eq. 19), FL+HC's clustering round,
CFL's bipartitions (eq. 9 of Sattler et al.), JGL's record of gradient similarities, and
the same-model evidence of FAACL and IFCA (:class:`~.evidence.SameModelSimilarity`) —
takes its cosines from an :class:`UpdateComparer`:

- ``pairwise = "exact"``: :func:`~coordinator.strategies.aggregate.cosine_similarity_matrix`
  on the updates, as every strategy always did (bit for bit);
- ``pairwise = "sketch"``: the same cosines between count sketches of the updates
  (:mod:`.sketch`), d = :func:`~.sketch.jl_dimension` (m clients, ``sketch_epsilon``),
  seeded by ``sketch_seed``;
- ``pairwise = "auto"`` (the default): exact below :data:`SKETCH_FLEET` registered
  clients, sketches from there on.

Why 1,000: at c = 0.25 a round of 1,000 clients brings 250 updates, which the exact path
compares with 250²·n/2 multiply-adds after copying them all to float64: for the compact
model (n = 60,432) 1.9·10⁹ operations and 120 MB, for the paper model (n = 4.4·10⁶)
1.4·10¹¹ and 8.8 GB. The fleets the papers and our benchmarks study (48 to 384 machines)
keep the exact path unchanged; a large model on a mid-sized fleet may set ``sketch``
explicitly. From 1,000 clients on, the sketch's ±ε is far below the gap between
within-group and cross-group cosines that the clusterings rely on
(``benchmarks/bench_server_scale.py`` measures the clusters against the exact path).
FLACC in sketch mode also keeps its pair memory as a bounded list
(:mod:`.pair_memory`) and streams its averages (:mod:`.streaming`).
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.strategies.aggregate import cosine_similarity_matrix
from coordinator.strategies.parameters import Param
from coordinator.strategies.sketch import (
    DEFAULT_EPSILON,
    UpdateSketcher,
    jl_dimension,
    sketch_cosine_matrix,
)
from faultfleet.types import Float64Array, FloatArray

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


def comparer_for(
    mode: str, n_params: int, n_clients: int, epsilon: float = DEFAULT_EPSILON, seed: int = 0
) -> UpdateComparer:
    """An :class:`UpdateComparer` for an unresolved ``mode`` (``"auto"`` included)."""
    return UpdateComparer(resolve(mode, n_clients), n_params, n_clients, epsilon=epsilon, seed=seed)
