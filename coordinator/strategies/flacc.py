"""FLACC: federated learning via agglomerative client clustering, as Algorithm 1.

Mehta & Shao, "A greedy agglomerative framework for clustered federated learning", IEEE
Trans. Ind. Inform. 19(12), 2023, doi:10.1109/TII.2023.3252599.

*Clustering phase* (Algorithm 1, lines 6–20): every sampled client trains the global model;
the server records the cosine similarity of the weight updates of every pair of clients that
answered (eq. 19, line 11), forgets pairs older than the memory T (eq. 18), greedily merges up
to ``n_merge`` entity pairs (eqs. 9–17, lines 13–18; see :mod:`.agglomeration`) and averages
the global model by sample count (line 20). *Separation* (line 5, lines 21–27): once
``n_sep`` consecutive rounds pass without a merge, each entity becomes its own federation.

Decisions on points the paper leaves open (papers/README.md settles the first):

- Rounds before the first merge count towards ``n_sep``, as do rounds in which every client
  failed: a round is counted when it is aggregated.
- The separation test of line 5 runs at the start of :meth:`FLACC.configure_round`: after
  ``n_sep`` rounds without a merge, the round being configured is the first separated one.
- Eq. 18 is applied with the current round index t after line 11 and *before* the merges,
  so the α^(t) of eq. 9 is exactly eq. 18's: a pair seen at round τ is used by the merges of
  rounds τ … τ + T and is −1 from τ + T + 1 on. (Line 19 placed literally after the merges
  would let the merges of round τ + T + 1 still use it.) ``memory=None`` means T = ∞.
- Merging runs every clustering round, even when fewer than two clients answered: line 13 is
  unconditional and remembered similarities may still allow a merge.
- On separation the ``"global"`` model is replaced by one copy per entity, keyed
  ``"cluster-k"`` with k the entity's position when entities are ordered by smallest client
  index; clients are labelled by entity in that order at all times.
- Clients that failed are absent from ``results``: no similarity, no weight.
- Algorithm 1 tests only eq. 9's pair; ``next_pair=True`` (off by default) lets a later pair
  merge when that pair fails only eq. 14 (see :mod:`.agglomeration`).
- Joining: before separation a client joins the clustering phase as a singleton entity
  with no known similarity; after, it joins the entity of the model it was assigned (else
  the entity of most clients). Leaving: its similarities go; an entity it empties is
  dropped before separation and kept, empty, after (its position names its model).

The default merge rule is not Algorithm 1's but ``rule="cohesion"``: a pair that passes
eqs. 14 and 16 must also pass the cohesion test of :mod:`.cohesion` — the mean cosine
between the two entities at least ``cohesion_share`` (0.7) of the looser entity's own mean
cosine — and when eq. 9's pair is refused the later pairs are tried in eq. 9's order. Under
eq. 16 alone, two different groups merge as soon as the few cross pairs remembered happen
to be all positive; the module docstring of :mod:`.cohesion` gives the measurements behind
the rule and the share. ``rule="paper"`` is Algorithm 1 exactly as written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from coordinator.strategies.agglomeration import (
    UNKNOWN,
    Entity,
    entities_after_leaving,
    entity_labels,
)
from coordinator.strategies.aggregate import cosine_similarity_matrix
from coordinator.strategies.base import JsonDict, Merge, Strategy
from coordinator.strategies.evidence import ClusterEvidence
from coordinator.strategies.flacc_merges import flacc_evidence, merge_step
from coordinator.strategies.flacc_parameters import FLACC_PARAMETERS, RULES
from coordinator.strategies.flacc_sketch import SketchedPairs
from coordinator.strategies.flacc_state import flacc_state, load_flacc_state
from coordinator.strategies.joining import grow_square, keep_square, most_served_key
from coordinator.strategies.keys import GLOBAL, cluster_key, cluster_number
from coordinator.strategies.merge_history import MergeHistory
from coordinator.strategies.pairwise import resolve
from coordinator.strategies.parameters import Param
from coordinator.strategies.streaming import (
    FoldedRound,
    StreamBounds,
    UpdateStream,
    fold_all,
    fold_averages,
)
from faultfleet.tasks import Failure, FitInstruction, FitResult
from faultfleet.types import Float64Array, IntArray, ModelFactory

__all__ = ["FLACC", "RULES"]


class FLACC(Strategy):
    """Greedy agglomerative client clustering, then one federation per entity.

    Hyper-parameters: the :attr:`parameters` table (``faultfleet sim --list-options flacc``).

    """

    name: ClassVar[str] = "flacc"
    parameters: ClassVar[tuple[Param, ...]] = FLACC_PARAMETERS

    def __init__(
        self,
        *,
        fraction: float = 0.25,
        alpha0: float = 0.0,
        memory: int | None = 10,
        n_merge: int = 1,
        n_sep: int = 10,
        next_pair: bool = False,
        rule: str = "cohesion",
        cohesion_share: float = 0.7,
        partners: int = 32,
        pairwise: str = "auto",
        sketch_epsilon: float = 0.25,
        sketch_seed: int = 0,
    ) -> None:
        super().__init__(fraction=fraction)
        self.alpha0 = alpha0
        self.memory = memory
        self.n_merge = n_merge
        self.n_sep = n_sep
        self.next_pair = next_pair
        self.rule = rule
        self.cohesion_share = cohesion_share
        self.partners = partners
        self.pairwise = pairwise
        self.sketch_epsilon = sketch_epsilon
        self.sketch_seed = sketch_seed

    # -- lifecycle -------------------------------------------------------------------------

    def _initialize(self, model_factory: ModelFactory) -> None:
        m = len(self.client_ids_)
        self.models_[GLOBAL] = model_factory(0)
        self._start_memory()
        self._set_entities([(i,) for i in range(m)])
        self.rounds_without_merge_ = 0
        self.separated_ = False
        self.last_alpha_min_cross_: float | None = None
        self.last_passed_over_ = 0
        self.merge_history_ = MergeHistory(self.client_ids_)

    def _start_memory(self) -> None:
        """α and τ (Algorithm 1, line 2), or under sketches the pair list, all unknown."""
        m = len(self.client_ids_)
        self.pairwise_ = resolve(self.pairwise, m)
        self.sketched_: SketchedPairs | None = None
        self.stream_bounds_: dict[str, StreamBounds] = {}
        if self.pairwise_ == "exact":
            self.alpha_ = np.full((m, m), UNKNOWN)
            self.tau_ = np.zeros((m, m), dtype=np.int64)
            return
        self.sketched_ = SketchedPairs(
            m,
            self._model_size(),
            epsilon=self.sketch_epsilon,
            seed=self.sketch_seed,
            partners=self.partners,
        )

    def _join(
        self, joining: list[str], keys: Mapping[str, str | None], model_factory: ModelFactory
    ) -> None:
        m = len(self.client_ids_)
        new = list(range(m - len(joining), m))
        self.merge_history_.join(joining)
        if self.sketched_ is not None:
            self.sketched_.memory.grow(m)
        else:
            self.alpha_ = grow_square(self.alpha_, len(new), UNKNOWN)
            self.tau_ = grow_square(self.tau_, len(new), 0)
        entities = [list(e) for e in self.entities_]
        for index, client in zip(new, joining, strict=True):
            if not self.separated_:
                entities.append([index])
                continue
            key = keys[client] or most_served_key(self, list(self.models_), exclude=joining)
            entities[cluster_number(key)].append(index)
        self._set_entities([tuple(e) for e in entities])

    def _leave(self, leaving: set[str], kept: list[int]) -> None:
        self.merge_history_.leave(kept)
        if self.sketched_ is not None:
            self.sketched_.memory.keep(kept)
        else:
            self.alpha_ = keep_square(self.alpha_, kept)
            self.tau_ = keep_square(self.tau_, kept)
        self._set_entities(entities_after_leaving(self.entities_, kept, keep_empty=self.separated_))

    # -- training rounds -------------------------------------------------------------------

    def configure_round(
        self, server_round: int, available: Sequence[str], rng: np.random.Generator
    ) -> list[FitInstruction]:
        """Separate first if no merge happened in the last ``n_sep`` rounds (line 5)."""
        if not self.separated_ and self.rounds_without_merge_ >= self.n_sep:
            self._separate()
        return super().configure_round(server_round, available, rng)

    def fit_models(self, server_round: int, client_id: str) -> tuple[str, ...]:
        return (self.model_key_for(client_id),)

    def model_key_for(self, client_id: str) -> str:
        if not self.separated_:
            return GLOBAL
        return cluster_key(int(self._labels[self._index(client_id)]))

    def _aggregate(
        self, server_round: int, results: Sequence[FitResult], failures: Sequence[Failure]
    ) -> None:
        self._check_answers([(r.client_id, r.model_key) for r in results])
        stream = self.open_stream(server_round)
        if stream is not None:  # sketch mode: the same streaming path as a live round
            self._aggregate_stream(server_round, fold_all(stream, results))
            return
        if self.separated_:
            self._average_entities(results)
            return
        self._cluster(server_round, results)
        if results:  # line 20
            self.models_[GLOBAL] = self._average(results)

    def _check_answers(self, answers: Sequence[tuple[str, str]]) -> None:
        if len({client for client, _ in answers}) != len(answers):
            raise ValueError("a client answered more than once in one round")
        for client, key in answers:
            if client not in self.client_index_:
                raise ValueError(f"result from unknown client {client!r}")
            expected = self.model_key_for(client)
            if key != expected:
                raise ValueError(f"client {client!r} trained {key!r}, expected {expected!r}")

    def _cluster(self, server_round: int, results: Sequence[FitResult]) -> None:
        """Lines 10–19 on the answers: their similarities (eq. 19), then the merges."""
        answered = np.array([self._index(r.client_id) for r in results], dtype=np.intp)
        similarity = cosine_similarity_matrix([r.delta for r in results]) if results else None
        self.cluster_step(server_round, answered, similarity)

    # -- streaming (pairwise sketch) ---------------------------------------------------------

    def open_stream(self, server_round: int) -> UpdateStream | None:
        """Under sketches, a stream that folds the round's updates as they arrive
        (:mod:`.streaming`); None under exact cosines, which need the list of updates."""
        if self.sketched_ is None:
            return None
        return UpdateStream(
            server_round,
            self.models_,
            self.averaging.policy,
            self.stream_bounds_,
            self.sketched_.sketcher,
            self.averaging.noise_seed,
        )

    def aggregate_stream(
        self, server_round: int, stream: FoldedRound, failures: Sequence[Failure]
    ) -> None:
        """The round's reaction to the updates folded into ``stream`` (sketch mode)."""
        self._check_answers([(u.client_id, u.model_key) for u in stream.updates()])
        self._aggregate_stream(server_round, stream)

    def _aggregate_stream(self, server_round: int, stream: FoldedRound) -> None:
        assert self.sketched_ is not None  # streams exist in sketch mode only
        if not self.separated_:
            updates = sorted(stream.updates(), key=lambda u: self._index(u.client_id))
            answered = np.array([self._index(u.client_id) for u in updates], dtype=np.intp)
            sketches = [u.sketch for u in updates if u.sketch is not None]
            self.sketched_.record_sketches(server_round, answered, sketches)
            merge_step(self, server_round)
        # line 20, or 26 per entity once separated
        self.averaged_ = fold_averages(self.models_, self.stream_bounds_, stream, server_round)

    def cluster_step(
        self, server_round: int, answered: IntArray, similarity: Float64Array | None
    ) -> None:
        """Lines 11–19: record the round's similarities, forget stale pairs, merge entities.

        The clustering phase's whole reaction to a round, given the cosine similarities of
        the answering clients' updates; what :meth:`aggregate_round` calls, and what a replay
        of recorded similarities calls directly.

        Parameters
        ----------
        answered : array of shape (k,), int
            Registration indices of the clients that answered.
        similarity : array of shape (k, k), float64, or None
            Eq. 19 between them, in the order of ``answered``; None when nobody answered.
        """
        if self.sketched_ is not None:
            if similarity is not None and len(answered):
                self.sketched_.record_matrix(server_round, answered, similarity)
            merge_step(self, server_round)
            return
        if similarity is not None and len(answered):
            pairs = np.ix_(answered, answered)
            self.alpha_[pairs] = similarity
            self.tau_[pairs] = server_round
            self.alpha_[answered, answered] = UNKNOWN  # the diagonal carries no information
        merge_step(self, server_round)

    def _separate(self) -> None:
        """Lines 21–27 from now on: one model per entity, each a copy of the global model."""
        initial = self.models_.pop(GLOBAL)
        bounds = self.stream_bounds_.pop(GLOBAL, StreamBounds())
        for position in range(len(self.entities_)):
            self.models_[cluster_key(position)] = initial.copy()
            self.stream_bounds_[cluster_key(position)] = bounds  # inherited (streaming)
        self.separated_ = True

    def _average_entities(self, results: Sequence[FitResult]) -> None:
        """Line 26: each entity's model is the sample-weighted mean of its sampled clients."""
        by_entity: dict[int, list[FitResult]] = {}
        for r in results:
            by_entity.setdefault(int(self._labels[self._index(r.client_id)]), []).append(r)
        for position, members in by_entity.items():
            self.models_[cluster_key(position)] = self._average(members)

    # -- clustering ------------------------------------------------------------------------

    def cluster_labels(self) -> dict[str, int]:
        """Entity position of every client, before and after separation."""
        return {c: int(self._labels[i]) for i, c in enumerate(self.client_ids_)}

    @property
    def entities(self) -> list[tuple[str, ...]]:
        """Current entities as client ids in registration order, by smallest client index."""
        return [tuple(self.client_ids_[i] for i in entity) for entity in self.entities_]

    @property
    def separated(self) -> bool:
        """Whether every entity has become its own federation."""
        return self.separated_

    @property
    def merges(self) -> tuple[Merge, ...]:
        """Every merge so far: round, the two entities, α_min^cross and the bar it cleared."""
        return self.merge_history_.merges()

    def cluster_evidence(self) -> ClusterEvidence:
        """The cosines FLACC merges on and the weakest merge behind each entity
        (:func:`~.flacc_merges.flacc_evidence`)."""
        return flacc_evidence(self)

    @property
    def last_alpha_min_cross(self) -> float | None:
        """α_min^cross solving eq. 9 in the last clustering round (FLACC Fig. 8), if any."""
        return self.last_alpha_min_cross_

    def round_metrics(self) -> dict[str, float]:
        """α_min^cross solving eq. 9 in the last clustering round (the paper's Fig. 8), and
        whether the entities have been separated (1) or not (0); with ``next_pair`` or the
        cohesion rule, also how many of eq. 9's pairs the last clustering round passed over."""
        metrics = {"separated": float(self.separated_)}
        if self.last_alpha_min_cross_ is not None:
            metrics["alpha_min_cross"] = self.last_alpha_min_cross_
        if self.next_pair or self.rule == "cohesion":
            metrics["pairs_passed_over"] = float(self.last_passed_over_)
        return metrics

    def _set_entities(self, entities: Sequence[Entity]) -> None:
        self.entities_: list[Entity] = [tuple(e) for e in entities]
        self._labels = entity_labels(len(self.client_ids_), self.entities_)
        if np.any(self._labels < 0):
            raise ValueError("entities must cover every client")

    # -- state -----------------------------------------------------------------------------

    def _extra_state(self) -> tuple[JsonDict, dict[str, np.ndarray[Any, Any]]]:
        return flacc_state(self)

    def _load_extra_state(self, meta: JsonDict, arrays: Mapping[str, np.ndarray[Any, Any]]) -> None:
        self._start_memory()
        load_flacc_state(self, meta, arrays)
