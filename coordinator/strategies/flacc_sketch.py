"""FLACC's similarity memory under ``pairwise = "sketch"``: sketches, sampled pairs, a list.

What :class:`~coordinator.strategies.flacc.FLACC` holds instead of the m × m α and τ when
it compares sketches (:mod:`.pairwise`): the sketcher of its updates (:mod:`.sketch`), the
remembered pairs (:class:`~.pair_memory.PairMemory`, eq. 18's window, the latest cosine per
pair) and how many partners each update is compared with in a large round. Merging reads
the pairs through :func:`~.sparse_agglomeration.agglomerate_pairs`, which takes the dense
implementation's decisions on the same pairs.

Pairs are sampled with a generator seeded by ``(sketch_seed, round)``, so a resumed run
samples what an uninterrupted one does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from coordinator.strategies.agglomeration import Agglomeration, Entity
from coordinator.strategies.pair_memory import PairMemory, sample_pairs
from coordinator.strategies.sketch import UpdateSketcher, jl_dimension, pair_dots
from coordinator.strategies.sparse_agglomeration import agglomerate_pairs
from faultfleet.types import Float64Array, FloatArray, IntArray

_ARRAYS = ("first", "second", "value", "measured")


class SketchedPairs:
    """Sketcher and pair memory of one FLACC run.

    Parameters
    ----------
    n_clients, n_params : int
    epsilon : float
        Sets the sketch dimension (:func:`~.sketch.jl_dimension` of ``n_clients``).
    seed : int
        Seeds the sketch and the pairs sampled each round.
    partners : int
        Partners of each update in a round of more than ``partners + 1`` updates.
    """

    def __init__(
        self, n_clients: int, n_params: int, *, epsilon: float, seed: int, partners: int
    ) -> None:
        self.seed = seed
        self.partners = partners
        self.sketcher = UpdateSketcher(n_params, jl_dimension(n_clients, epsilon), seed)
        self.memory = PairMemory.empty(n_clients)

    def record_sketches(
        self, server_round: int, answered: IntArray, sketches: Sequence[FloatArray]
    ) -> None:
        """Eq. 19 between sampled pairs of the clients ``answered`` (registration indices),
        from their unit sketches (same order)."""
        a, b = sample_pairs(len(answered), self.partners, [self.seed, server_round])
        if len(a) == 0:
            return
        rows = np.asarray(sketches, dtype=np.float32)
        if len(a) == len(rows) * (len(rows) - 1) // 2:  # every pair: one matrix product
            cosines = (rows @ rows.T)[a, b].astype(np.float64)
        else:  # a few thousand pairs at a time, to bound the temporaries
            cosines = pair_dots(rows, a, b).astype(np.float64)
        self._record(server_round, answered, a, b, np.clip(cosines, -1.0, 1.0))

    def record_matrix(
        self, server_round: int, answered: IntArray, similarity: Float64Array
    ) -> None:
        """As :meth:`record_sketches`, the cosines read from a given (k, k) matrix."""
        a, b = sample_pairs(len(answered), self.partners, [self.seed, server_round])
        if len(a):
            self._record(server_round, answered, a, b, similarity[a, b])

    def _record(
        self,
        server_round: int,
        answered: IntArray,
        a: IntArray,
        b: IntArray,
        cosines: Float64Array,
    ) -> None:
        i, j = answered[a], answered[b]
        self.memory.record(server_round, np.minimum(i, j), np.maximum(i, j), cosines)

    def forget(self, server_round: int, memory: int | None) -> None:
        """Eq. 18 on the remembered pairs."""
        self.memory.forget(server_round, memory)

    def agglomerate(self, entities: Sequence[Entity], **options: Any) -> Agglomeration:
        """Algorithm 1, lines 13–18, on the remembered pairs (options as
        :func:`~.sparse_agglomeration.agglomerate_pairs`)."""
        return agglomerate_pairs(self.memory, entities, **options)

    def arrays(self) -> dict[str, np.ndarray[Any, Any]]:
        """The pair memory, to save (keys ``pairs_first`` …)."""
        return {f"pairs_{name}": getattr(self.memory, name).copy() for name in _ARRAYS}

    def load(self, arrays: Mapping[str, np.ndarray[Any, Any]]) -> None:
        """Restore what :meth:`arrays` saved."""
        first, second, value, measured = (np.asarray(arrays[f"pairs_{n}"]) for n in _ARRAYS)
        if first.max(initial=-1) >= self.memory.n_clients:
            raise ValueError("saved pairs name clients beyond the federation")
        self.memory = PairMemory(
            self.memory.n_clients,
            first.astype(np.int32),
            second.astype(np.int32),
            value.astype(np.float32),
            measured.astype(np.int32),
        )
