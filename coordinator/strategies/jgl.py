"""JGL: device-side cluster identity from gradient similarity and loss.

Lin, Chen, Yang, Wu & Liu, "A joint gradient and loss based clustered federated learning
design" (Algorithm 1). The server holds K cluster models from K independent
initialisations. Every round each sampled device receives all K models and returns, on one
mini-batch of its training data (the same for every model), the loss L_ik (eq. 1) and its
gradient ∇L_ik of every model (lines 3–9, a probe). Its identity is
s_i = argmax_k λ·S_ik − (1 − λ)·L_ik (eq. 4, line 10; ties to the lowest k), S_ik being
the similarity of its gradient and the cluster's last update Δw_k = w_k(t) − w_k(t−1)
(eqs. 2–3); the paper has the device evaluate eq. 4, here the server applies the same rule
to what the device sent. Empty clusters get a device (§II-C); each device trains its
cluster's model and each cluster model becomes the average of its devices' (eqs. 5–7).
S, eq. 4's scores and the empty-cluster fix are pure functions in :mod:`.jgl_identity`.

Decisions on points the paper leaves open (papers/README.md asks for the first):

- **Sign of S.** Δw_k is a step *against* the gradient (w moves along −∇), so eq. 3 taken
  literally gives a device of cluster k a cosine near −1 with its own cluster and would
  push it away. We compare the device's *descent direction* with the update:
  S_ik = cos(−∇L_ik, Δw_k), so a device whose gradient asks the model to keep moving the way
  its cluster last moved scores +1 there (tested). The Euclidean alternative of §II-B is
  likewise S_ik = −‖(−∇L_ik) − Δw_k‖ (not scale-free: a weight step against a gradient).
- **Loss.** L_ik is the *mean* loss on the mini-batch (what a
  :class:`~faultfleet.tasks.GradientResult` carries), not eq. 1's sum, so that λ does not
  depend on the batch size; the sum with batch size B and weight λ ranks like the mean with
  λ' where λ'/(1 − λ') = λ/((1 − λ)·B).
- **No last update yet.** S needs Δw_k for every k; until every cluster has been updated
  once (round 1 in particular) S = 0 for all k and the identity is by loss alone.
- **Reference direction** (option ``reference``). Eq. 2 defines Δw_k as the change of
  the cluster model, and the text glosses it as "the average gradient of all devices in
  cluster k at iteration t−1": the two agree for the paper's single gradient step per
  round (eq. 5), not for several epochs of Adam, whose update mostly carries the
  optimiser's state. ``reference="update"`` (default) is eq. 2 as written;
  ``reference="gradient"`` takes the gloss: −(mean of the probe gradients ∇L_ik that the
  devices which trained cluster k last sent for k's model), a descent direction like Δw_k.
- **Clusters not updated** in a round keep their model and their last Δw (the latest
  direction their data asked for; Δw = 0 would give an arbitrary S = 0).
- **Empty-cluster fix** (§II-C: every cluster needs a device each round). In index order,
  each empty cluster receives one device drawn uniformly (from the round's sampling
  generator) among those whose cluster has several; a device alone is never moved, and
  with fewer devices than clusters some stay empty. A moved device trains its new cluster.
- **Aggregation** (eq. 7) weights by training-sample count, like IFCA and FedAvg here (the
  paper's plain mean when counts are equal), so JGL and IFCA differ only in placement.
- **Local update.** The device runs the run's local training (:class:`~faultfleet.tasks.
  TrainConfig`, E epochs) from its cluster's model, instead of eq. 5's single step.
- **Failures.** A device whose probe failed gets no identity this round and does not train;
  one whose training failed keeps the identity it chose.
- **Labels.** Each client's latest identity; clients never placed yet share the extra label
  K and predict with the lowest-training-loss of the K models.
- **Without a probe** in the round (a caller driving rounds without probing), clients are
  sampled in ``configure_round`` and sent all K models: each trains its lowest-training-loss
  one (IFCA's rule, i.e. λ = 0 on its whole training set).
- **Sketches** (``pairwise``, :mod:`.pairwise`) take the gradient cosines between devices
  (the evidence), kept for sampled pairs of the last 10 probes
  (:class:`~.evidence.RecentPairs`: every pair of a probe of up to 33 devices, beyond that
  each device with 32 random others) instead of an m × m matrix (800 MB at 10,000 devices).
  Eq. 3's S_ik stays exact: K·n operations per device, no pairs, the cost of sketching; a
  sketch would only add error to eq. 4. Under sketches the fit round *streams*
  (:meth:`JointGradientLoss.open_stream`, :mod:`.streaming`): each update is folded into its
  cluster's running sum as it arrives, and Δw_k is the new average minus the old model (or
  the members' probe gradients), as in the list. The probe streams too
  (:meth:`JointGradientLoss.open_probe_stream`, :mod:`.jgl_probe`): each device's answer is
  checked, its identity chosen by eq. 4 and its K gradients sketched as it arrives, and the
  gradients are let go (under ``reference="gradient"`` a device keeps those Δw may read:
  its identity's, and those of clusters nobody had chosen yet); identities, metrics,
  evidence and Δw equal the list's.
- **Joining.** A device joining later takes the identity of the model it was assigned
  (else none: it is not placed yet) until its first probe places it by eq. 4.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, cast

import numpy as np

from coordinator.strategies.base import JsonDict, Strategy
from coordinator.strategies.evidence import SAME_MODEL_MEMORY, ClusterEvidence
from coordinator.strategies.jgl_identity import (
    PARAMETERS,
    Reference,
    Similarity,
    fill_empty_clusters,
)
from coordinator.strategies.jgl_probe import GradientProbe, check_answer, choose_identity
from coordinator.strategies.keys import cluster_key, cluster_number
from coordinator.strategies.pair_evidence import PairEvidence
from coordinator.strategies.pairwise import (
    PAIRWISE_PARAMETERS,
    sketch_pair_cosines,
    strategy_comparer,
)
from coordinator.strategies.parameters import Param
from coordinator.strategies.probe_streaming import GradientStream
from coordinator.strategies.sketch import sketch_cosine_matrix
from coordinator.strategies.streaming import (
    FoldedRound,
    StreamBounds,
    UpdateStream,
    bounds_state,
    fold_all,
    fold_averages,
    load_bounds,
)
from faultfleet.tasks import (
    Failure,
    FitInstruction,
    FitResult,
    GradientInstruction,
    GradientResult,
    ProbeInstructions,
    ProbeResults,
)
from faultfleet.types import Float64Array, FloatArray, IntArray, ModelFactory


class JointGradientLoss(Strategy):
    """K cluster models; each device picks one by gradient similarity and loss (eq. 4).

    Hyper-parameters: the :attr:`parameters` table (``faultfleet sim --list-options jgl``).

    Attributes
    ----------
    identities_ : dict of str to int
        Latest cluster of every client placed so far.
    last_update_ : array of shape (K, n_params), float32
        Δw_k, each cluster's last update; ``has_update_`` (K,) says which are known.
    choices_ : dict of str to int
        Identities the devices chose by eq. 4 in the latest probe, before the empty-cluster
        fix.
    stream_bounds_ : dict of str to StreamBounds
        The medians a streamed round's robust rules measure against (the last round's).
    evidence_ : PairEvidence
        The latest probe-gradient cosine of every pair of devices probed together (under
        sketches: of sampled pairs, the last :data:`~.evidence.SAME_MODEL_MEMORY` probes).
    """

    name: ClassVar[str] = "jgl"
    evidence_: PairEvidence
    probes: ClassVar[bool] = True
    parameters: ClassVar[tuple[Param, ...]] = (*PARAMETERS, *PAIRWISE_PARAMETERS)

    def __init__(
        self,
        *,
        fraction: float = 1.0,
        n_clusters: int = 4,
        lam: float = 0.2,
        batch_size: int = 64,
        similarity: Similarity = "cosine",
        reference: Reference = "update",
        pairwise: str = "auto",
        sketch_epsilon: float = 0.25,
        sketch_seed: int = 0,
    ) -> None:
        super().__init__(fraction=fraction)
        self.n_clusters = n_clusters
        self.lam = lam
        self.batch_size = batch_size
        self.similarity = similarity
        self.reference = reference
        self.pairwise = pairwise
        self.sketch_epsilon = sketch_epsilon
        self.sketch_seed = sketch_seed

    # -- lifecycle -------------------------------------------------------------------------

    def _initialize(self, model_factory: ModelFactory) -> None:
        for k in range(self.n_clusters):
            self.models_[cluster_key(k)] = np.array(model_factory(k), dtype=np.float32)
        self.last_update_ = np.zeros((self.n_clusters, self._model_size()), dtype=np.float32)
        self.comparer_ = strategy_comparer(self, self._model_size(), len(self.client_ids_))
        self.has_update_ = np.zeros(self.n_clusters, dtype=bool)
        self.identities_: dict[str, int] = {}
        self.choices_: dict[str, int] = {}
        self.probe_round_: int | None = None
        self.probed_: tuple[str, ...] = ()
        self.plan_round_: int | None = None
        self.plan_: dict[str, int] | None = None
        self.metrics_: dict[str, float] = {}
        self.probe_gradients_: dict[str, dict[int, FloatArray]] = {}
        """Probe gradients by device and cluster number, under ``reference="gradient"``."""
        self._new_evidence()
        self.stream_bounds_: dict[str, StreamBounds] = {}

    def _join(
        self, joining: list[str], keys: Mapping[str, str | None], model_factory: ModelFactory
    ) -> None:
        self.identities_.update({c: cluster_number(k) for c, k in keys.items() if k is not None})
        self.evidence_.join(self.client_ids_, len(joining))

    def _leave(self, leaving: set[str], kept: list[int]) -> None:
        for client in leaving:
            self.identities_.pop(client, None)
            self.choices_.pop(client, None)
            self.probe_gradients_.pop(client, None)
            if self.plan_ is not None:
                self.plan_.pop(client, None)
        self.probed_ = tuple(c for c in self.probed_ if c not in leaving)
        self.evidence_.leave(self.client_ids_, kept)

    # -- probe: losses and gradients, identities -------------------------------------------

    def configure_probe(
        self, server_round: int, step: int, available: Sequence[str], rng: np.random.Generator
    ) -> ProbeInstructions | None:
        """Step 0: sample the round's devices and ask each for all K losses and gradients."""
        if step > 0:
            return None
        sample = self.sample_clients(available, rng)
        self.probe_round_ = server_round
        self.probed_ = tuple(sample)
        self.choices_ = {}
        self.metrics_ = {"probed": float(len(sample)), "similarity_used": 0.0}
        keys = tuple(self.models_)
        return [GradientInstruction(c, keys, self.batch_size) for c in sample]

    def aggregate_probe(
        self,
        server_round: int,
        step: int,
        results: ProbeResults,
        failures: Sequence[Failure],
    ) -> None:
        """Each answering device's identity by eq. 4; failed devices get none this round.

        Under sketches the answers go through the probe's stream
        (:meth:`open_probe_stream`), in the order given, as a live probe takes them.
        """
        self._check_probe_round(server_round, step)
        for r in results:
            if not isinstance(r, GradientResult):
                raise TypeError(f"jgl probes for gradients, got {type(r).__name__}")
        stream = self.open_probe_stream(server_round, step)
        if stream is not None:
            for r in results:
                stream.add(cast(GradientResult, r))
            self.aggregate_probe_stream(server_round, step, stream, failures)
            return
        keys = list(self.models_)
        last_update = self._reference_updates()
        chosen: dict[str, int] = {}
        similarities: list[float] = []
        self.probe_gradients_ = {}
        for r in cast(Sequence[GradientResult], results):
            check_answer(r, self.probed_, keys, self._model_size())
            if r.client_id in chosen:
                raise ValueError(f"client {r.client_id!r} answered the probe more than once")
            k, similarity = choose_identity(r, keys, last_update, self.similarity, self.lam)
            chosen[r.client_id] = k
            if self.reference == "gradient":
                self.probe_gradients_[r.client_id] = {
                    k: np.asarray(r.gradients[key], np.float32) for k, key in enumerate(keys)
                }
            similarities.append(similarity)
        answered = cast(Sequence[GradientResult], results)
        if len(answered) >= 2:  # pairs to compare
            total = np.zeros((len(answered), len(answered)))
            for key in keys:
                total += self.comparer_.matrix([r.gradients[key] for r in answered])
            mean = total / len(keys)
            self.evidence_.record(
                server_round,
                [self._index(r.client_id) for r in answered],
                block=lambda: mean,
                pairs=lambda a, b: mean[a, b],
            )
        self._probed(chosen, similarities, failures)

    def open_probe_stream(self, server_round: int, step: int) -> GradientProbe | None:
        """Under sketches, a stream taking the probe's answers as they arrive
        (:mod:`.jgl_probe`): each device's identity and gradient sketches, its K gradients
        let go (kept under ``reference = "gradient"``); None under exact comparisons."""
        sketcher = self.comparer_.sketcher
        if sketcher is None or server_round != self.probe_round_ or step != 0:
            return None
        return GradientProbe(
            probed=self.probed_,
            keys=tuple(self.models_),
            size=self._model_size(),
            last_update=self._reference_updates(),
            similarity=self.similarity,
            lam=self.lam,
            sketcher=sketcher,
            keep_gradients=self.reference == "gradient",
        )

    def aggregate_probe_stream(
        self, server_round: int, step: int, stream: GradientStream, failures: Sequence[Failure]
    ) -> None:
        """The identities of the answers taken into ``stream``, in client order, and the
        devices' evidence: the mean over the K models of their gradient sketches' cosines."""
        self._check_probe_round(server_round, step)
        if not isinstance(stream, GradientProbe):
            raise TypeError(f"jgl takes its own probe streams, got {type(stream).__name__}")
        answers = stream.answers()
        keys = stream.keys
        order = sorted(answers, key=self._index)
        self.probe_gradients_ = {
            c: gradients for c in order if (gradients := answers[c].gradients) is not None
        }
        chosen = {c: answers[c].identity for c in order}
        self._probed(chosen, [answers[c].similarity for c in order], failures)
        if len(order) < 2:  # no pair to compare
            return
        sketches = [np.stack([answers[c].sketches[k] for c in order]) for k in range(len(keys))]

        def block() -> Float64Array:
            total = np.zeros((len(order), len(order)))
            for rows_k in sketches:
                total += sketch_cosine_matrix(rows_k)
            return total / len(sketches)

        def pairs(a: IntArray, b: IntArray) -> Float64Array:
            total = np.zeros(len(a))
            for rows_k in sketches:
                total += sketch_pair_cosines(rows_k, a, b)
            return total / len(sketches)

        rows = [self._index(c) for c in order]
        self.evidence_.record(server_round, rows, block=block, pairs=pairs)

    def _new_evidence(self) -> None:
        """No probe evidence yet: an m × m matrix under exact comparisons, sampled pairs of
        the last probes under sketches (:mod:`.pair_evidence`)."""
        sampled = self.comparer_.sketcher is not None
        self.evidence_ = PairEvidence(self.client_ids_, sampled=sampled, memory=SAME_MODEL_MEMORY)

    def _check_probe_round(self, server_round: int, step: int) -> None:
        if server_round != self.probe_round_ or step != 0:
            raise ValueError(
                f"probe answers for round {server_round} step {step}, but the probe sent was "
                f"round {self.probe_round_} step 0"
            )

    def _reference_updates(self) -> FloatArray | None:
        """Δw_k of every cluster for eq. 3, or None (S = 0) until each was updated once."""
        return self.last_update_ if bool(self.has_update_.all()) else None

    def _probed(
        self, chosen: dict[str, int], similarities: Sequence[float], failures: Sequence[Failure]
    ) -> None:
        self.choices_ = chosen
        self.metrics_ = {
            "probed": float(len(self.probed_)),
            "probe_failures": float(len(failures)),
            "similarity_used": float(bool(self.has_update_.all())),
            "mean_chosen_similarity": float(np.mean(similarities)) if similarities else 0.0,
        }

    # -- training --------------------------------------------------------------------------

    def configure_round(
        self, server_round: int, available: Sequence[str], rng: np.random.Generator
    ) -> list[FitInstruction]:
        """Fix empty clusters (§II-C), then have each device train its cluster's model."""
        self.plan_round_ = server_round
        if self.probe_round_ != server_round:
            self.plan_ = None
            sample = self.sample_clients(available, rng)
            self.metrics_ = {"probed": 0.0, "similarity_used": 0.0}
            return [FitInstruction(c, tuple(self.models_)) for c in sample]
        online = set(available)
        devices = [c for c in self.probed_ if c in self.choices_ and c in online]
        chosen = np.array([self.choices_[c] for c in devices], dtype=np.int64)
        assignment, moves = fill_empty_clusters(chosen, self.n_clusters, rng)
        self.plan_ = {c: int(k) for c, k in zip(devices, assignment, strict=True)}
        changes = sum(
            1 for c, k in self.plan_.items() if c in self.identities_ and self.identities_[c] != k
        )
        self.identities_.update(self.plan_)
        self.metrics_.update(identity_changes=float(changes), empty_cluster_fixes=float(moves))
        return [FitInstruction(c, (cluster_key(k),)) for c, k in self.plan_.items()]

    def fit_models(self, server_round: int, client_id: str) -> tuple[str, ...]:
        """The device's cluster model this round; all K if it has no plan (it then picks)."""
        if self.plan_round_ == server_round and self.plan_ is not None and client_id in self.plan_:
            return (cluster_key(self.plan_[client_id]),)
        return tuple(self.models_)

    def _check_plan(self, server_round: int, client_id: str, model_key: str) -> None:
        plan = self.plan_ if self.plan_round_ == server_round else None
        k = cluster_number(model_key)
        if plan is not None and plan.get(client_id) != k:
            raise ValueError(
                f"client {client_id!r} trained {model_key!r}, but round {server_round} "
                f"assigned it {plan.get(client_id)!r}"
            )

    def _aggregate(
        self, server_round: int, results: Sequence[FitResult], failures: Sequence[Failure]
    ) -> None:
        """Eq. 7 per identity, remembering Δw_k of every cluster that was updated."""
        for r in results:
            self._check_plan(server_round, r.client_id, r.model_key)
        stream = self.open_stream(server_round)
        if stream is not None:  # sketch mode: the same streaming path as a live round
            self._aggregate_stream(server_round, fold_all(stream, results))
            return
        by_cluster: dict[int, list[FitResult]] = {}
        for r in results:
            by_cluster.setdefault(cluster_number(r.model_key), []).append(r)
        for k, members in sorted(by_cluster.items()):
            self._moved(k, self._average(members), [r.client_id for r in members])
        self.probe_gradients_ = {}
        self.metrics_["clusters_trained"] = float(len(by_cluster))

    def _moved(self, k: int, new: FloatArray, members: Sequence[str]) -> None:
        """Cluster ``k``'s new model, trained by ``members``: its Δw_k (eq. 2, or the
        members' probe gradients under ``reference="gradient"``) and their identities."""
        key = cluster_key(k)
        # a streamed probe keeps k's gradient of every device that chose k and, while no
        # answer had chosen k, of the others: a device moved into k has it unless k's
        # choosers all went offline before the round was planned (then it is left out)
        probed = [g[k] for c in members if k in (g := self.probe_gradients_.get(c, {}))]
        if probed:
            self.last_update_[k] = -np.mean(np.stack(probed), axis=0)
        else:
            self.last_update_[k] = new - self.models_[key]
        self.has_update_[k] = True
        self.models_[key] = new
        self.identities_.update(dict.fromkeys(members, k))

    # -- streaming (pairwise sketch) -------------------------------------------------------

    def open_stream(self, server_round: int) -> UpdateStream | None:
        """Under sketches, a stream folding the fit round's updates into their clusters'
        running sums as they arrive (:mod:`.streaming`); None under exact comparisons or a
        trimmed mean, which take the list. The probe has its own stream
        (:meth:`open_probe_stream`)."""
        return self._sketched_stream(server_round, self.stream_bounds_, self.comparer_.sketcher)

    def aggregate_stream(
        self, server_round: int, stream: FoldedRound, failures: Sequence[Failure]
    ) -> None:
        """The fit round's models from the updates folded into ``stream`` (sketch mode)."""
        for u in self._known_updates(stream):
            self._check_plan(server_round, u.client_id, u.model_key)
        self._aggregate_stream(server_round, stream)

    def _aggregate_stream(self, server_round: int, stream: FoldedRound) -> None:
        """Eq. 7 per identity from the folded sums, in cluster order, members in client
        order."""
        members: dict[int, list[str]] = {}
        for u in sorted(stream.updates(), key=lambda u: self._index(u.client_id)):
            members.setdefault(cluster_number(u.model_key), []).append(u.client_id)
        averaged = dict(self.models_)  # the new models; self.models_ keeps the old for Δw
        self.averaged_ = fold_averages(averaged, self.stream_bounds_, stream, server_round)
        for k, clients in sorted(members.items()):
            self._moved(k, averaged[cluster_key(k)], clients)
        self.probe_gradients_ = {}
        self.metrics_["clusters_trained"] = float(len(members))

    # -- evaluation and clustering -------------------------------------------------------

    def model_key_for(self, client_id: str) -> str:
        """The client's cluster model; ``"cluster-0"`` for a client not placed yet."""
        if client_id not in self.client_index_:
            raise KeyError(f"unknown client {client_id!r}")
        return cluster_key(self.identities_.get(client_id, 0))

    def predict_models(self, client_id: str) -> tuple[str, ...]:
        """Its cluster's model; all K (lowest training loss wins) before it is placed."""
        if client_id in self.identities_:
            return (cluster_key(self.identities_[client_id]),)
        return tuple(self.models_)

    def cluster_labels(self) -> dict[str, int]:
        """Latest identity of every client; ``n_clusters`` for clients not placed yet."""
        return {c: self.identities_.get(c, self.n_clusters) for c in self.client_ids_}

    def cluster_evidence(self) -> ClusterEvidence:
        """The devices' probe gradients compared on each of the K models (latest per pair;
        under sketches each device with sampled others, the last few probes)."""
        labels = self.cluster_labels()
        return ClusterEvidence(
            client_ids=self.client_ids_,
            labels=tuple(labels[c] for c in self.client_ids_),
            similarity=self.evidence_.similarity(),
            measure="cosine similarity of two devices' probe gradients, averaged over the K "
            f"cluster models (latest probe of the pair; {self.evidence_.describe()})",
            merge_measure="n/a: JGL keeps K clusters and never merges them",
        )

    def round_metrics(self) -> dict[str, float]:
        """Last round: probed, probe_failures, similarity_used, mean_chosen_similarity,
        identity_changes, empty_cluster_fixes, clusters_trained."""
        return dict(self.metrics_)

    # -- state -----------------------------------------------------------------------------

    def _extra_state(self) -> tuple[JsonDict, dict[str, np.ndarray[Any, Any]]]:
        meta: JsonDict = {
            "identities": [self.identities_.get(c) for c in self.client_ids_],
            "choices": dict(self.choices_),
            "probe_round": self.probe_round_,
            "probed": list(self.probed_),
            "plan_round": self.plan_round_,
            "plan": None if self.plan_ is None else dict(self.plan_),
            "metrics": dict(self.metrics_),
            "comparer": self.comparer_.state(),
            "stream_bounds": bounds_state(self.stream_bounds_),
        }
        arrays = {"last_update": self.last_update_.copy(), "has_update": self.has_update_.copy()}
        arrays.update(self.evidence_.arrays())
        return meta, arrays

    def _load_extra_state(self, meta: JsonDict, arrays: Mapping[str, np.ndarray[Any, Any]]) -> None:
        if len(self.models_) != self.n_clusters:
            raise ValueError(
                f"state holds {len(self.models_)} cluster models but n_clusters is "
                f"{self.n_clusters}; build the strategy with n_clusters={len(self.models_)}"
            )
        identities = zip(self.client_ids_, meta["identities"], strict=True)
        self.identities_ = {c: int(k) for c, k in identities if k is not None}
        self.choices_ = {str(c): int(k) for c, k in meta["choices"].items()}
        self.probe_round_ = meta["probe_round"]
        self.probed_ = tuple(meta["probed"])
        self.plan_round_ = meta["plan_round"]
        plan = meta["plan"]
        self.plan_ = None if plan is None else {str(c): int(k) for c, k in plan.items()}
        self.metrics_ = {str(k): float(v) for k, v in meta["metrics"].items()}
        self.comparer_ = strategy_comparer(
            self, self._model_size(), len(self.client_ids_), meta.get("comparer")
        )
        self.last_update_ = np.array(arrays["last_update"], dtype=np.float32)
        self.has_update_ = np.array(arrays["has_update"], dtype=bool)
        self._new_evidence()
        self.evidence_.load(self.client_ids_, arrays)
        self.stream_bounds_ = load_bounds(meta.get("stream_bounds", {}))
