"""The interface every clustered-FL strategy implements, and the policy they all share.

Shaped after Flower's ``Strategy`` (paired ``configure_*`` / ``aggregate_*`` verbs, the round
number first, failures passed in as data) with one change clustered FL needs: the answer of
:meth:`Strategy.configure_round` says *which model each client trains*, and a strategy holds
any number of models at once, keyed by name.

A strategy is pure: no clock, no I/O, randomness only from the generator it is given. Its
whole state round-trips through :meth:`Strategy.state_dict` / :meth:`Strategy.load_state_dict`
(arrays plus JSON-ready metadata): a resumed run is identical to an uninterrupted one.
Clients may join (placed on a model their evaluation chose) and leave between rounds.

Hyper-parameters follow scikit-learn's contract: ``__init__(self, *, ...)`` stores each under
its own name and does nothing else. Each class declares them once, in its
:attr:`Strategy.parameters` table (:mod:`coordinator.strategies.parameters`), and
:meth:`Strategy.check_parameters` checks the values against it: the registry calls it right
after building a strategy, so a bad ``--option`` stops before anything runs, and
:meth:`Strategy.initialize` and :meth:`Strategy.load_state_dict` call it again for values set
later. Rules that tie two parameters are a strategy's :meth:`Strategy._check_parameter_rules`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from coordinator.strategies.evidence import ClusterEvidence
from coordinator.strategies.evidence import Merge as Merge  # noqa: PLC0414 - re-exported
from coordinator.strategies.joining import check_joining, check_leaving, served_keys
from coordinator.strategies.parameters import FRACTION, Param, check_value, declared_in
from coordinator.strategies.robust import Averaging, RoundTally
from coordinator.strategies.sketch import UpdateSketcher
from coordinator.strategies.streaming import (
    FoldedRound,
    StreamBounds,
    StreamedUpdate,
    UpdateStream,
)
from faultfleet.tasks import (
    EvaluateInstruction,
    EvaluateResult,
    Failure,
    FitInstruction,
    FitResult,
    ProbeInstructions,
    ProbeResults,
)
from faultfleet.types import FloatArray, ModelFactory

JsonDict = dict[str, Any]


@dataclass
class StrategyState:
    """A strategy's state: arrays (stored as .npz) and JSON-ready metadata."""

    arrays: dict[str, np.ndarray[Any, Any]] = field(default_factory=dict)
    meta: JsonDict = field(default_factory=dict)


class Strategy(ABC):
    """Base of all strategies.

    Parameters
    ----------
    fraction : float
        Client fraction c: each round ``max(1, round(c · m))`` of the m registered clients are
        sampled, among those available.
    """

    parameters: ClassVar[tuple[Param, ...]] = (FRACTION,)
    """The hyper-parameters this class adds or redeclares, each once: name, type, range,
    default, meaning and paper (:class:`~coordinator.strategies.parameters.Param`). A
    subclass lists its own; :meth:`parameter_table` merges them with its bases'."""

    name: ClassVar[str]
    """Registry name, as used on the command line."""
    full_participation: ClassVar[bool] = False
    """True for strategies that need every client in every round (CFL); the run's client
    fraction does not apply to them."""
    probes: ClassVar[bool] = False
    """True for strategies that probe clients (:meth:`configure_probe`); they need a
    :class:`~coordinator.engine.fleet.ProbingFleet`."""
    clusters_learned: ClassVar[bool] = True
    """False for strategies whose clusters are given rather than learned (FedAvg, Local,
    Fixed): cluster quality has nothing to doubt there."""
    averaging: Averaging = Averaging()
    """How :meth:`_average` combines updates (:mod:`coordinator.strategies.robust`): the plain
    weighted mean unless the run sets its policy."""
    averaged_: RoundTally = RoundTally()
    """What averaging did in the last round: averages made, updates clipped or capped."""

    def __init__(self, *, fraction: float = 0.25) -> None:
        self.fraction = fraction

    # -- hyper-parameters ------------------------------------------------------------------

    @classmethod
    def parameter_table(cls) -> dict[str, Param]:
        """Every hyper-parameter of the class by name, in the order of ``__init__``
        (:func:`~coordinator.strategies.parameters.declared_in`)."""
        return declared_in(cls)

    def check_parameters(self) -> None:
        """Raise a :class:`~faultfleet.errors.UsageError` naming the first hyper-parameter
        whose value is not what its table declares, or that breaks a rule between two."""
        for param in self.parameter_table().values():
            check_value(param, getattr(self, param.name), self.name)
        self._check_parameter_rules()

    def _check_parameter_rules(self) -> None:  # noqa: B027 - an optional hook
        """Rules that involve two hyper-parameters; each value alone is already checked."""

    # -- lifecycle -------------------------------------------------------------------------

    def initialize(self, client_ids: Sequence[str], model_factory: ModelFactory) -> None:
        """Register the federation's clients and create the initial model(s)."""
        self.check_parameters()
        if len(client_ids) == 0:
            raise ValueError("a strategy needs at least one client")
        if len(set(client_ids)) != len(client_ids):
            raise ValueError("client ids must be unique")
        self._set_clients(client_ids)
        self.models_: dict[str, FloatArray] = {}
        self._initialize(model_factory)

    @abstractmethod
    def _initialize(self, model_factory: ModelFactory) -> None:
        """Create ``self.models_`` and any strategy state."""

    # -- joining and leaving ---------------------------------------------------------------

    def join_candidates(self) -> tuple[str, ...]:
        """Keys of the models a joining client may be assigned: those serving a client now."""
        return served_keys(self)

    def add_clients(
        self,
        client_ids: Sequence[str],
        model_factory: ModelFactory,
        assigned: Mapping[str, str] | None = None,
    ) -> None:
        """Clients joining between rounds; they are sampled from the next round on.

        ``assigned`` maps some of them to the key (one of :meth:`join_candidates`) their own
        evaluation chose; the others join by the strategy's rule (:mod:`.joining`).
        """
        joining, keys = check_joining(self, client_ids, assigned)
        self._set_clients((*self.client_ids_, *joining))
        self._join(joining, keys, model_factory)

    def remove_clients(self, client_ids: Sequence[str]) -> None:
        """Clients leaving for good, between rounds; what they taught the models stays."""
        leaving = check_leaving(self, client_ids)
        kept = [i for i, c in enumerate(self.client_ids_) if c not in leaving]
        self._set_clients(tuple(self.client_ids_[i] for i in kept))
        self._leave(leaving, kept)

    @abstractmethod
    def _join(
        self, joining: list[str], keys: Mapping[str, str | None], model_factory: ModelFactory
    ) -> None:
        """Place clients just appended to the registration order; ``keys[c]`` is the model
        key ``c`` was assigned, or None for the strategy's own rule."""

    @abstractmethod
    def _leave(self, leaving: set[str], kept: list[int]) -> None:
        """Forget clients just dropped from the registration order; ``kept`` holds the old
        positions of the remaining clients, in their (unchanged) order."""

    def _set_clients(self, client_ids: Sequence[str]) -> None:
        """The registered clients, in registration order, and their positions."""
        self.client_ids_: tuple[str, ...] = tuple(client_ids)
        self.client_index_: dict[str, int] = {c: i for i, c in enumerate(self.client_ids_)}

    # -- probes ----------------------------------------------------------------------------

    def configure_probe(
        self, server_round: int, step: int, available: Sequence[str], rng: np.random.Generator
    ) -> ProbeInstructions | None:
        """Probe step ``step`` (0, 1, ...) of ``server_round``, before its training.

        The engine calls this with step 0, 1, ... until it returns None or an empty list,
        runs each non-empty request on the fleet (all :class:`~faultfleet.tasks.
        LossesInstruction` or all :class:`~faultfleet.tasks.GradientInstruction`) and hands
        the answers to :meth:`aggregate_probe`. The default asks for nothing.
        """
        return None

    def aggregate_probe(
        self,
        server_round: int,
        step: int,
        results: ProbeResults,
        failures: Sequence[Failure],
    ) -> None:
        """Take in the answers to probe step ``step``; results are in registration order."""
        raise NotImplementedError(f"strategy {self.name!r} asked for probes it cannot take in")

    # -- training rounds -------------------------------------------------------------------

    def configure_round(
        self, server_round: int, available: Sequence[str], rng: np.random.Generator
    ) -> list[FitInstruction]:
        """Sample clients among ``available`` and say which model each one trains."""
        return [
            FitInstruction(c, self.fit_models(server_round, c))
            for c in self.sample_clients(available, rng)
        ]

    def sample_clients(self, available: Sequence[str], rng: np.random.Generator) -> list[str]:
        """``max(1, round(c · m))`` clients drawn without replacement from ``available``.

        The count is a fraction of all registered clients, capped by how many are available;
        the result is in registration order.
        """
        pool = sorted((c for c in set(available) if c in self.client_index_), key=self._index)
        wanted = max(1, round(self.fraction * len(self.client_ids_)))
        count = min(wanted, len(pool))
        if count == 0:
            return []
        chosen = rng.choice(len(pool), size=count, replace=False)
        return sorted((pool[int(i)] for i in chosen), key=self._index)

    @abstractmethod
    def fit_models(self, server_round: int, client_id: str) -> tuple[str, ...]:
        """Key(s) of the model(s) ``client_id`` is sent for training this round."""

    def aggregate_round(
        self,
        server_round: int,
        results: Sequence[FitResult],
        failures: Sequence[Failure],
    ) -> None:
        """Fold the clients' updates into the models.

        Results are validated (known client, known model, right length, at most one per
        client and model) and sorted by client registration order, then model key, so the
        aggregate does not depend on the order of arrival.
        """
        size = self._model_size()
        seen: set[tuple[str, str]] = set()
        for r in results:
            if (r.client_id, r.model_key) in seen:
                raise ValueError(
                    f"client {r.client_id!r} answered more than once for model {r.model_key!r}"
                )
            seen.add((r.client_id, r.model_key))
            if r.client_id not in self.client_index_:
                raise ValueError(f"result from unknown client {r.client_id!r}")
            if r.model_key not in self.models_:
                raise ValueError(f"client {r.client_id!r} trained unknown model {r.model_key!r}")
            if r.weights.shape != (size,) or r.delta.shape != (size,):
                raise ValueError(
                    f"client {r.client_id!r} sent weights of shape {r.weights.shape}, "
                    f"expected ({size},)"
                )
        ordered = sorted(results, key=lambda r: (self._index(r.client_id), r.model_key))
        self.averaged_ = RoundTally(server_round)
        self._aggregate(server_round, ordered, failures)

    def _stream(
        self,
        server_round: int,
        bounds: Mapping[str, StreamBounds],
        sketcher: UpdateSketcher | None = None,
        *,
        raw_means: bool = False,
    ) -> UpdateStream | None:
        """A stream of the round under :attr:`averaging` (:mod:`.streaming`: the previous
        round's medians in ``bounds``, ``sketcher`` for the kept sketches), or None under a
        trimmed mean, which needs every update at once: the round then takes the list."""
        if self.averaging.policy.trim_fraction > 0:
            return None
        return UpdateStream(
            server_round,
            self.models_,
            self.averaging.policy,
            bounds,
            sketcher,
            self.averaging.noise_seed,
            raw_means=raw_means,
        )

    def _sketched_stream(
        self,
        server_round: int,
        bounds: Mapping[str, StreamBounds],
        sketcher: UpdateSketcher | None,
        *,
        raw_means: bool = False,
    ) -> UpdateStream | None:
        """:meth:`_stream` keeping each update's sketch by ``sketcher``; None without one (a
        strategy comparing exact updates takes the list)."""
        if sketcher is None:
            return None
        return self._stream(server_round, bounds, sketcher, raw_means=raw_means)

    def _known_updates(self, stream: FoldedRound) -> tuple[StreamedUpdate, ...]:
        """The updates folded into ``stream``.

        Raises
        ------
        ValueError
            One is of a client the strategy does not know.
        """
        updates = stream.updates()
        for u in updates:
            if u.client_id not in self.client_index_:
                raise ValueError(f"result from unknown client {u.client_id!r}")
        return updates

    def _answered_once(self, stream: FoldedRound) -> tuple[StreamedUpdate, ...]:
        """:meth:`_known_updates`, of strategies where a client trains one model a round.

        Raises
        ------
        ValueError
            An unknown client, or a client that answered more than once.
        """
        updates = self._known_updates(stream)
        if len({u.client_id for u in updates}) != len(updates):
            raise ValueError("a client answered more than once in one round")
        return updates

    def _average(self, results: Sequence[FitResult]) -> FloatArray:
        """One model from ``results`` (trained from one model) under :attr:`averaging`."""
        average, self.averaged_ = self.averaging.average(results, self.averaged_)
        return average

    @abstractmethod
    def _aggregate(
        self, server_round: int, results: Sequence[FitResult], failures: Sequence[Failure]
    ) -> None:
        """Update models and clustering state from validated, ordered results."""

    # -- evaluation ------------------------------------------------------------------------

    def configure_evaluate(
        self, server_round: int, client_ids: Sequence[str]
    ) -> list[EvaluateInstruction]:
        """The model each client predicts with (its cluster's model)."""
        return [EvaluateInstruction(c, self.predict_models(c)) for c in client_ids]

    def predict_models(self, client_id: str) -> tuple[str, ...]:
        """Key(s) of the model ``client_id`` predicts with; several means lowest loss wins."""
        return (self.model_key_for(client_id),)

    @abstractmethod
    def model_key_for(self, client_id: str) -> str:
        """Key of the model that currently serves ``client_id``."""

    def model_ready(self, client_id: str) -> bool:
        """Whether ``client_id``'s model has been trained at all, so it may be published.

        True by default; FAACL says False for a newcomer's singleton cluster until its
        first update (its model is still the common initialisation).
        """
        return True

    def aggregate_evaluate(  # noqa: B027 - an optional hook, not an abstract step
        self, server_round: int, results: Sequence[EvaluateResult]
    ) -> None:
        """Take note of evaluation results; the default ignores them.

        Must not change anything that training depends on, so that how often a run
        evaluates never changes its models.
        """

    # -- clustering ------------------------------------------------------------------------

    @property
    def models(self) -> Mapping[str, FloatArray]:
        """Every model the strategy holds, by key."""
        return self.models_

    def cluster_labels(self) -> dict[str, int]:
        """Cluster index of every client: clients served by the same model share one."""
        keys = sorted({self.model_key_for(c) for c in self.client_ids_})
        index = {k: i for i, k in enumerate(keys)}
        return {c: index[self.model_key_for(c)] for c in self.client_ids_}

    def round_metrics(self) -> dict[str, float]:
        """Strategy-specific numbers about the last round, for run histories and plots."""
        return {}

    @property
    def merges(self) -> tuple[Merge, ...]:
        """Every merge of two clusters so far, oldest first (agglomerative strategies)."""
        return ()

    def cluster_evidence(self) -> ClusterEvidence:
        """What the strategy measured about how alike its clients are, for
        :mod:`coordinator.strategies.quality`.

        Strategies that learn clusters override it with their own similarity; this default
        exposes none (or, with :attr:`clusters_learned` false, says the clusters are given).
        """
        labels = self.cluster_labels()
        return ClusterEvidence(
            client_ids=self.client_ids_,
            labels=tuple(labels[c] for c in self.client_ids_),
            similarity=None,
            measure="none: the clusters are given, not learned"
            if not self.clusters_learned
            else "none: this strategy exposes no similarity between clients",
            learned=self.clusters_learned,
            merges=self.merges,
        )

    @property
    def num_clusters(self) -> int:
        """Number of distinct clusters among the clients."""
        return len(set(self.cluster_labels().values()))

    # -- state -----------------------------------------------------------------------------

    def state_dict(self) -> StrategyState:
        """Everything needed to continue this strategy exactly where it is."""
        keys = list(self.models_)
        state = StrategyState(
            arrays={f"model/{i}": self.models_[k] for i, k in enumerate(keys)},
            meta={"strategy": self.name, "client_ids": list(self.client_ids_), "models": keys},
        )
        extra_meta, extra_arrays = self._extra_state()
        state.meta["extra"] = extra_meta
        state.arrays.update({f"extra/{k}": v for k, v in extra_arrays.items()})
        return state

    def load_state_dict(self, state: StrategyState) -> None:
        """Restore what :meth:`state_dict` returned (on a strategy with the same settings)."""
        if state.meta.get("strategy") != self.name:
            raise ValueError(
                f"state belongs to strategy {state.meta.get('strategy')!r}, not {self.name!r}"
            )
        self.check_parameters()
        self._set_clients(state.meta["client_ids"])
        self.models_ = {
            k: np.asarray(state.arrays[f"model/{i}"], dtype=np.float32)
            for i, k in enumerate(state.meta["models"])
        }
        extras = {
            k.removeprefix("extra/"): v for k, v in state.arrays.items() if k.startswith("extra/")
        }
        self._load_extra_state(state.meta["extra"], extras)

    def _extra_state(self) -> tuple[JsonDict, dict[str, np.ndarray[Any, Any]]]:
        """Strategy-specific state beyond the models: (metadata, arrays)."""
        return {}, {}

    def _load_extra_state(  # noqa: B027 - an optional hook, not an abstract step
        self, meta: JsonDict, arrays: Mapping[str, np.ndarray[Any, Any]]
    ) -> None:
        """Inverse of :meth:`_extra_state`."""

    # -- helpers ---------------------------------------------------------------------------

    def _index(self, client_id: str) -> int:
        return self.client_index_[client_id]

    def _model_size(self) -> int:
        first = next(iter(self.models_.values()))
        return int(first.shape[0])


__all__ = ["FRACTION", "JsonDict", "Merge", "Strategy", "StrategyState"]
