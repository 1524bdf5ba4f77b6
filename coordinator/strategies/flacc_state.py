"""FLACC's checkpoint beyond its models: entities, counters, merges and its similarity
memory (α and τ, or under sketches the pair list and the streaming bounds).

The merges are saved as their history's forest (:class:`~.merge_history.MergeHistory`:
arrays under ``merges/``); a state saved by an earlier version lists every merge with its
clients (``merges`` in the metadata) and is read into a history of explicit merges.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from coordinator.strategies.evidence import Merge
from coordinator.strategies.merge_history import MergeHistory
from coordinator.strategies.streaming import bounds_state, load_bounds

if TYPE_CHECKING:
    from coordinator.strategies.flacc import FLACC

JsonDict = dict[str, Any]

MERGES = "merges/"
"""Prefix of the merge history's arrays among the state's."""


def flacc_state(strategy: FLACC) -> tuple[JsonDict, dict[str, np.ndarray[Any, Any]]]:
    """(metadata, arrays) of ``strategy`` beyond its models."""
    meta: JsonDict = {
        "entities": [[int(i) for i in e] for e in strategy.entities_],
        "rounds_without_merge": int(strategy.rounds_without_merge_),
        "separated": bool(strategy.separated_),
        "last_alpha_min_cross": strategy.last_alpha_min_cross_,
        "last_passed_over": int(strategy.last_passed_over_),
    }
    history_meta, history_arrays = strategy.merge_history_.state()
    meta["merge_history"] = history_meta
    arrays = {f"{MERGES}{k}": v for k, v in history_arrays.items()}
    if strategy.sketched_ is not None:
        meta["stream_bounds"] = bounds_state(strategy.stream_bounds_)
        return meta, {**strategy.sketched_.arrays(), **arrays}
    return meta, {"alpha": strategy.alpha_.copy(), "tau": strategy.tau_.copy(), **arrays}


def load_flacc_state(
    strategy: FLACC, meta: JsonDict, arrays: Mapping[str, np.ndarray[Any, Any]]
) -> None:
    """Restore what :func:`flacc_state` saved, on a strategy whose memory is started."""
    m = len(strategy.client_ids_)
    if strategy.sketched_ is not None:
        strategy.sketched_.load(arrays)
        strategy.stream_bounds_ = load_bounds(meta.get("stream_bounds", {}))
    else:
        alpha = np.array(arrays["alpha"], dtype=np.float64)
        tau = np.array(arrays["tau"], dtype=np.int64)
        if alpha.shape != (m, m) or tau.shape != (m, m):
            raise ValueError(f"state holds a {alpha.shape} similarity matrix for {m} clients")
        strategy.alpha_, strategy.tau_ = alpha, tau
    strategy._set_entities([tuple(int(i) for i in e) for e in meta["entities"]])
    strategy.rounds_without_merge_ = int(meta["rounds_without_merge"])
    strategy.separated_ = bool(meta["separated"])
    last = meta["last_alpha_min_cross"]
    strategy.last_alpha_min_cross_ = None if last is None else float(last)
    strategy.last_passed_over_ = int(meta.get("last_passed_over", 0))
    if "merge_history" in meta:
        history = {k.removeprefix(MERGES): v for k, v in arrays.items() if k.startswith(MERGES)}
        strategy.merge_history_ = MergeHistory.load(meta["merge_history"], history, m)
    else:  # an earlier version's state: every merge with its clients
        strategy.merge_history_ = MergeHistory.from_merges(
            strategy.client_ids_, [Merge.from_json(m) for m in meta.get("merges", [])]
        )
