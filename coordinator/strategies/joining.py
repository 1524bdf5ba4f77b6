"""Clients joining and leaving a strategy's run: the checks and pieces every strategy shares.

Every strategy takes clients joining between rounds (:meth:`~coordinator.strategies.base.
Strategy.add_clients`) and leaving for good (:meth:`~coordinator.strategies.base.Strategy.
remove_clients`). A joining client may come with the model key its own evaluation chose
among :meth:`~coordinator.strategies.base.Strategy.join_candidates` (the coordinator offers
a newcomer the serving cluster models and keeps the one of lowest validation loss,
:mod:`coordinator.engine.placement`); without one it joins by its strategy's rule, which
docs/federated.md (*Joining a running federation*) lists per strategy. This module holds
what the strategies share: the checks, the "most members" rule, and the resizing of the
client-by-client matrices a strategy keeps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from coordinator.strategies.base import Strategy


def served_keys(strategy: Strategy) -> tuple[str, ...]:
    """Sorted keys of every model that may serve a registered client (``predict_models``)."""
    return tuple(sorted({k for c in strategy.client_ids_ for k in strategy.predict_models(c)}))


def most_served_key(strategy: Strategy, keys: Sequence[str], exclude: Sequence[str] = ()) -> str:
    """The key among ``keys`` that serves most registered clients (``model_key_for``),
    leaving out the clients of ``exclude`` (those joining); ties go to the first in sorted
    order.

    Raises
    ------
    ValueError
        When ``keys`` is empty.
    """
    allowed = sorted(keys)
    if not allowed:
        raise ValueError("no model key to choose from")
    left_out = set(exclude)
    counts = Counter(strategy.model_key_for(c) for c in strategy.client_ids_ if c not in left_out)
    return max(allowed, key=lambda k: (counts.get(k, 0), -allowed.index(k)))


def check_joining(
    strategy: Strategy, client_ids: Sequence[str], assigned: Mapping[str, str] | None
) -> tuple[list[str], dict[str, str | None]]:
    """The joining clients as a list, and each one's assigned key (None: the strategy's rule).

    Raises
    ------
    ValueError
        A repeated or already registered id, an assignment for a client that is not joining,
        or an assigned key that is not one of ``strategy.join_candidates()``.
    """
    ids = list(client_ids)
    if len(set(ids)) != len(ids):
        raise ValueError("client ids must be unique")
    known = sorted(set(ids) & set(strategy.client_ids_))
    if known:
        raise ValueError(f"clients already registered: {', '.join(known)}")
    chosen = dict(assigned or {})
    strangers = sorted(set(chosen) - set(ids))
    if strangers:
        raise ValueError(f"assigned keys for clients that are not joining: {', '.join(strangers)}")
    candidates = set(strategy.join_candidates())
    for client, key in chosen.items():
        if key not in candidates:
            raise ValueError(
                f"client {client!r} is assigned model {key!r}, which serves no client of "
                f"strategy {strategy.name!r}; candidates: {', '.join(sorted(candidates))}"
            )
    return ids, {c: chosen.get(c) for c in ids}


def check_leaving(strategy: Strategy, client_ids: Sequence[str]) -> set[str]:
    """Leaving clients as a set.

    Raises
    ------
    ValueError
        An unknown id, or no client would be left.
    """
    leaving = set(client_ids)
    unknown = sorted(leaving - set(strategy.client_ids_))
    if unknown:
        raise ValueError(f"unknown clients: {', '.join(unknown)}")
    if leaving >= set(strategy.client_ids_):
        raise ValueError("cannot remove every client: a strategy needs at least one")
    return leaving


def grow_square(
    matrix: np.ndarray[Any, Any], n_new: int, fill: float | int
) -> np.ndarray[Any, Any]:
    """``matrix`` of shape (m, m) with ``n_new`` rows and columns of ``fill`` appended."""
    m = matrix.shape[0]
    grown = np.full((m + n_new, m + n_new), fill, dtype=matrix.dtype)
    grown[:m, :m] = matrix
    return grown


def keep_square(matrix: np.ndarray[Any, Any], kept: Sequence[int]) -> np.ndarray[Any, Any]:
    """The rows and columns ``kept`` (old positions, in order) of a square ``matrix``."""
    rows = np.asarray(kept, dtype=np.intp)
    return np.array(matrix[np.ix_(rows, rows)])
