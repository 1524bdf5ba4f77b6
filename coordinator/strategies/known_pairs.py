"""Similarities of some pairs of clients, held as a list: the evidence of very large fleets.

A strategy that compares m clients pair by pair knows few of the m² pairs once m is large:
FLACC under sketches remembers the sampled pairs of its last T rounds (639,096 pairs at
20,000 clients, against 4·10⁸ cells of an m × m matrix, 3.2 GB in float64).
:class:`KnownPairs` holds those pairs as three arrays and answers what cluster quality
(:mod:`coordinator.strategies.quality_maths`) reads from a similarity matrix — a dense block
of a few rows and columns with NaN where a pair is unknown, each client's total over its
known pairs, the sums per pair of clusters — in time linear in the pairs read, through an
index of each client's neighbours (compressed rows, both directions) built once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from faultfleet.types import Float64Array, IntArray


@dataclass(frozen=True, eq=False)
class KnownPairs:
    """The known similarities of a fleet of ``n_clients``: one entry per unordered pair.

    Parameters
    ----------
    n_clients : int
        m, the clients the indices refer to (registration order).
    first, second : array of shape (q,), int
        The two clients of each pair (any order within a pair, never the same client, no
        pair twice).
    value : array of shape (q,), float
        The similarity of each pair, finite.

    Raises
    ------
    ValueError
        Arrays of different lengths, an index outside ``[0, n_clients)``, a pair of a
        client with itself, or a value that is not finite.
    """

    n_clients: int
    first: IntArray
    second: IntArray
    value: Float64Array

    def __post_init__(self) -> None:
        q = len(self.first)
        if len(self.second) != q or len(self.value) != q:
            raise ValueError(
                f"known pairs need as many second clients and values as first clients "
                f"({q}); got {len(self.second)} and {len(self.value)}"
            )
        for name, index in (("first", self.first), ("second", self.second)):
            if q and (int(np.min(index)) < 0 or int(np.max(index)) >= self.n_clients):
                raise ValueError(
                    f"known pairs name a {name} client outside 0..{self.n_clients - 1}"
                )
        if np.any(np.asarray(self.first) == np.asarray(self.second)):
            raise ValueError("a known pair pairs a client with itself")
        if not np.all(np.isfinite(self.value)):
            raise ValueError("known pairs hold a similarity that is not finite (NaN or inf)")

    @classmethod
    def from_arrays(
        cls, n_clients: int, first: npt.ArrayLike, second: npt.ArrayLike, value: npt.ArrayLike
    ) -> KnownPairs:
        """Pairs from any integer and float arrays (copied as int64 and float64)."""
        return cls(
            n_clients,
            np.array(first, dtype=np.int64),
            np.array(second, dtype=np.int64),
            np.array(value, dtype=np.float64),
        )

    @property
    def shape(self) -> tuple[int, int]:
        """(m, m): the matrix these pairs are the known entries of."""
        return (self.n_clients, self.n_clients)

    def __len__(self) -> int:
        return len(self.first)

    def dense(self) -> Float64Array:
        """The m × m matrix: the value of each known pair in both triangles, NaN elsewhere."""
        matrix = np.full(self.shape, np.nan)
        matrix[self.first, self.second] = self.value
        matrix[self.second, self.first] = self.value
        return matrix

    @cached_property
    def _rows(self) -> tuple[IntArray, IntArray, Float64Array]:
        """Compressed rows of the symmetric matrix: row offsets, neighbours, values."""
        rows = np.concatenate([self.first, self.second])
        neighbours = np.concatenate([self.second, self.first])
        values = np.concatenate([self.value, self.value])
        order = np.argsort(rows, kind="stable")
        counts = np.bincount(rows, minlength=self.n_clients)
        offsets = np.zeros(self.n_clients + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return offsets, neighbours[order].astype(np.int64), values[order]

    def neighbours(self, rows: IntArray) -> tuple[IntArray, IntArray, Float64Array]:
        """Every known pair of the clients ``rows``: the position in ``rows`` of its client,
        the other client and the value. A pair of two clients of ``rows`` comes twice."""
        offsets, neighbours, values = self._rows
        rows = np.asarray(rows, dtype=np.int64)
        starts = offsets[rows]
        lengths = offsets[rows + 1] - starts
        local = np.repeat(np.arange(len(rows)), lengths)
        begin = np.cumsum(lengths) - lengths
        at = np.repeat(starts - begin, lengths) + np.arange(int(lengths.sum()))
        return local, neighbours[at], values[at]

    def block(self, rows: IntArray, columns: IntArray) -> Float64Array:
        """The matrix at ``rows`` × ``columns`` (distinct clients each), NaN where unknown:
        the same array as ``dense()[np.ix_(rows, columns)]`` without the m × m matrix."""
        columns = np.asarray(columns, dtype=np.int64)
        place = np.full(self.n_clients, -1, dtype=np.int64)
        place[columns] = np.arange(len(columns))
        local, other, values = self.neighbours(np.asarray(rows, dtype=np.int64))
        column = place[other]
        inside = column >= 0
        block = np.full((len(rows), len(columns)), np.nan)
        block[local[inside], column[inside]] = values[inside]
        return block

    def within(self, members: IntArray) -> tuple[IntArray, IntArray, Float64Array]:
        """The known pairs among ``members`` (distinct clients), each once: positions
        ``a < b`` in ``members`` and the value."""
        members = np.asarray(members, dtype=np.int64)
        place = np.full(self.n_clients, -1, dtype=np.int64)
        place[members] = np.arange(len(members))
        local, other, values = self.neighbours(members)
        column = place[other]
        once = column > local
        return local[once], column[once], values[once]

    def across(self, rows: IntArray, columns: IntArray) -> tuple[float, float]:
        """Sum and number of the known pairs between ``rows`` and ``columns`` (disjoint sets
        of clients), read from the neighbours of the smaller set."""
        small, large = (rows, columns) if len(rows) <= len(columns) else (columns, rows)
        inside = np.zeros(self.n_clients, dtype=bool)
        inside[np.asarray(large, dtype=np.int64)] = True
        _, other, values = self.neighbours(np.asarray(small, dtype=np.int64))
        hit = inside[other]
        return float(values[hit].sum()), float(np.count_nonzero(hit))

    def row_totals(self) -> tuple[Float64Array, Float64Array]:
        """Per client, the sum and the number of its known similarities."""
        m = self.n_clients
        sums = np.bincount(self.first, weights=self.value, minlength=m) + np.bincount(
            self.second, weights=self.value, minlength=m
        )
        counts = np.bincount(self.first, minlength=m) + np.bincount(self.second, minlength=m)
        return sums.astype(np.float64), counts.astype(np.float64)

    def group_sums(self, groups: IntArray, k: int) -> tuple[Float64Array, Float64Array]:
        """Sums and counts (k, k) of the known similarities between every two groups, each
        pair counted in both directions (so a group's own cell holds its pairs twice), as a
        symmetric matrix summed over its off-diagonal cells; ``groups`` gives each client's
        group in 0..k − 1."""
        a, b = groups[self.first], groups[self.second]
        cells = np.concatenate([a * k + b, b * k + a])
        values = np.concatenate([self.value, self.value])
        sums = np.bincount(cells, weights=values, minlength=k * k).reshape(k, k)
        counts = np.bincount(cells, minlength=k * k).reshape(k, k)
        return sums.astype(np.float64), counts.astype(np.float64)
