"""The latest similarity of pairs of clients, as a matrix or as sampled pairs.

JGL (probe-gradient cosines), FL+HC (the clustering round's cosines) and CFL (the cosines of
the round that last split a cluster) keep, as their evidence of cluster quality
(:mod:`.evidence`), the latest similarity of every pair of clients measured together.
Under exact comparisons that is an m × m float64 matrix, as it always was. Under sketches
(``pairwise = "sketch"``, or ``"auto"`` from 1,000 registered clients) the matrix would take
800 MB at 10,000 clients, in memory and in every saved state, and filling it would take a
k × k block per round; :class:`PairEvidence` keeps :class:`~.evidence.RecentPairs` instead:
every pair of up to 33 clients measured together, beyond that each client with 32 random
others, whose similarities alone are computed (FLACC, IFCA and FAACL keep theirs so).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from coordinator.strategies.evidence import RecentPairs, load_matrix, record_pairs
from coordinator.strategies.joining import grow_square, keep_square
from coordinator.strategies.known_pairs import KnownPairs
from faultfleet.types import Float64Array, IntArray

FOREVER = 1 << 30
"""A memory in rounds that no run reaches: pairs are replaced, never forgotten."""


class PairEvidence:
    """The latest similarity of pairs of clients measured together.

    Parameters
    ----------
    client_ids : sequence of str
        Registered clients, in registration order.
    sampled : bool
        Keep sampled pairs (:class:`~.evidence.RecentPairs`) instead of the m × m matrix.
    memory : int
        Under ``sampled``, rounds a pair is kept after it was last measured
        (:data:`FOREVER`: until it is measured again).
    """

    def __init__(self, client_ids: Sequence[str], *, sampled: bool, memory: int) -> None:
        m = len(client_ids)
        self.pairs = RecentPairs(client_ids, memory=memory) if sampled else None
        self.matrix: Float64Array = np.full((0, 0) if sampled else (m, m), np.nan)

    def record(
        self,
        server_round: int,
        rows: Sequence[int],
        *,
        block: Callable[[], Float64Array],
        pairs: Callable[[IntArray, IntArray], Float64Array],
        take: bool = False,
    ) -> None:
        """Take in the similarities of the clients at the distinct registration indices
        ``rows``, measured in ``server_round``: ``block()`` gives them all (k × k) for the
        matrix, ``pairs(a, b)`` those of the pairs of positions ``(a[q], b[q])`` sampled
        among them. ``take``: the array ``block()`` returns is the evidence's to keep
        (nobody else holds it), so when ``rows`` are every client in order it becomes the
        matrix without a second k × k copy."""
        if self.pairs is not None:
            self.pairs.record_rows(server_round, rows, pairs)
            return
        values = block()
        if take and np.array_equal(rows, np.arange(len(self.matrix))):
            np.fill_diagonal(values, np.nan)
            self.matrix = values
        else:
            record_pairs(self.matrix, rows, values)

    def similarity(self) -> Float64Array | KnownPairs:
        """What is known, for :class:`~.evidence.ClusterEvidence`: a copy of the matrix (NaN:
        never measured), or the sampled pairs."""
        return self.matrix.copy() if self.pairs is None else self.pairs.current()

    def describe(self) -> str:
        """How the pairs were chosen, for the evidence's ``measure``."""
        pairs = self.pairs
        if pairs is None:
            return "every pair"
        kept = "" if pairs.memory >= FOREVER else f", last {pairs.memory} rounds"
        return f"each client with {pairs.partners} sampled others{kept}"

    def join(self, client_ids: Sequence[str], n_joining: int) -> None:
        """Clients joined (registered last): their pairs are unknown."""
        if self.pairs is not None:
            self.pairs.resize(client_ids)
        else:
            self.matrix = grow_square(self.matrix, n_joining, np.nan)

    def leave(self, client_ids: Sequence[str], kept: Sequence[int]) -> None:
        """Clients left: the pairs of those ``kept`` (old positions, in order) remain."""
        if self.pairs is not None:
            self.pairs.resize(client_ids)
        else:
            self.matrix = keep_square(self.matrix, kept)

    def arrays(self) -> dict[str, np.ndarray[Any, Any]]:
        """The state to save: ``similarity`` (the matrix) or the pairs (``pairs_*``,
        ``last_round``)."""
        if self.pairs is None:
            return {"similarity": self.matrix.copy()}
        return self.pairs.arrays("")

    def load(self, client_ids: Sequence[str], arrays: Mapping[str, Any]) -> None:
        """Restore what :meth:`arrays` saved; sampled pairs also read a saved matrix (a
        state saved before they were kept), and nothing saved means nothing known.

        Raises
        ------
        ValueError
            A matrix of another size than the clients', or pairs naming other clients.
        """
        if self.pairs is not None:
            self.pairs.load(client_ids, arrays, "")
        else:
            self.matrix = load_matrix(arrays, "similarity", len(client_ids))
