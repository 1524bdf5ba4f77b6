"""FAACL's probe rounds: support tests, merges, partition stability and hierarchical pairing.

:class:`FAACLProbing` is what :class:`coordinator.strategies.faacl.FAACL` holds to run
probe step 0 of every round after the initial ones ("FAACL: federated adaptive asymmetric
clustered learning", anonymous ICLR submission; ``shared/papers/faacl.txt``; the decisions
it follows are in the notes of :mod:`coordinator.strategies.faacl`):

* :meth:`~FAACLProbing.configure_probe` — pairs the partitions two by two once all are
  stable (Algorithm 1), then asks every available member of every cluster under test for
  the per-sample validation losses of its own and every candidate cluster's model;
* :meth:`~FAACLProbing.aggregate_probe` — the support test on the answers (Algorithm 3,
  version 1, or 4, version 2), the merge of mutually supportive clusters (Algorithm 5),
  whether each partition under test is now stable (Algorithm 7's loop, with ``patience``)
  and the round's test metrics.

The pure tests and bounds are in :mod:`coordinator.strategies.faacl_support`; the clusters
and partitions they act on are kept by the strategy's :class:`.faacl_clusters.FAACLClusters`,
which the probing is handed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np

from coordinator.strategies.faacl_clusters import FAACLClusters
from coordinator.strategies.faacl_support import (
    Partition,
    hoeffding_tail,
    merge_clusters,
    mutual_pairs,
    pair_partitions,
    read_losses,
    settle,
    supports_by_mean,
    supports_by_wilcoxon,
)
from faultfleet.tasks import Failure, LossesInstruction, ProbeResults
from faultfleet.types import Float64Array

logger = logging.getLogger(__name__)


class FAACLProbing:
    """FAACL's support and merge steps (see the module docstring).

    Parameters
    ----------
    book : FAACLClusters
        The strategy's clusters and partitions, which the steps change.
    version, epsilon, alpha, init_rounds, patience, loss_range
        :class:`~coordinator.strategies.faacl.FAACL`'s hyper-parameters of the same names.

    Attributes
    ----------
    metrics : dict of str to float
        The last support test's numbers (probed devices and models, merges, probe
        failures, loss-difference range, Hoeffding bound); empty in rounds without one.
    """

    def __init__(
        self,
        book: FAACLClusters,
        *,
        version: int,
        epsilon: float,
        alpha: float,
        init_rounds: int,
        patience: int | None,
        loss_range: float,
    ) -> None:
        self.book = book
        self.version = version
        self.epsilon = epsilon
        self.alpha = alpha
        self.init_rounds = init_rounds
        self.patience = patience
        self.loss_range = loss_range
        self.metrics: dict[str, float] = {}
        self._plan: dict[str, tuple[str, ...]] | None = None
        self._under_test: list[int] = []

    def configure(
        self, server_round: int, step: int, available: Sequence[str], rng: np.random.Generator
    ) -> list[LossesInstruction] | None:
        """Step 0 after the initial rounds: losses of the candidate models on every available
        member of the clusters under test; pairs the partitions first when all are stable."""
        if step == 0:
            self.metrics = {}
            self._plan = None
        if step > 0 or server_round <= self.init_rounds:
            return None
        if self.book.hierarchical and len(self.book.partitions) > 1 and self.book.all_stable():
            self._pair_partitions(rng)
        online = set(available)
        plan: dict[str, tuple[str, ...]] = {}
        under_test = [p for p, s in self.book.partitions.items() if not s.stable]
        for p in under_test:
            keys = self.book.keys_in(p)
            for key in keys:
                candidates = tuple(k for k in keys if k != key)
                for device in self.book.clusters[key].members:
                    if device in online:
                        plan[device] = (key, *candidates)
        if not plan:
            self._settle(under_test, answered=set(), changed=set(), merged=set())
            return None
        self._plan, self._under_test = plan, under_test
        devices = sorted(plan, key=self.book.rank)
        self.metrics["probed_devices"] = float(len(devices))
        self.metrics["probed_models"] = float(sum(len(plan[d]) for d in devices))
        return [LossesInstruction(d, plan[d]) for d in devices]

    def aggregate(
        self, server_round: int, step: int, results: ProbeResults, failures: Sequence[Failure]
    ) -> None:
        """Algorithms 3/4 (support) then 5 (merge) on the answers of probe step 0."""
        plan, self._plan = self._plan, None
        if plan is None:
            raise ValueError(f"round {server_round}: probe answers arrived but none was asked")
        losses = read_losses(plan, results)
        tested = self._under_test
        answered: set[int] = set()
        changed: set[int] = set()
        differences: list[Float64Array] = []
        smallest_pool: int | None = None
        for p in tested:
            for key in self.book.keys_in(p):
                members = [d for d in self.book.clusters[key].members if d in losses]
                if not members:
                    continue
                answered.add(p)
                passing: set[str] = set()
                for other in plan[members[0]][1:]:
                    per_device = [losses[d][other] - losses[d][key] for d in members]
                    differences.extend(per_device)
                    pooled = sum(len(x) for x in per_device)
                    smallest_pool = pooled if smallest_pool is None else min(smallest_pool, pooled)
                    if self._supports(per_device):
                        passing.add(other)
                if passing != self.book.clusters[key].supports:
                    changed.add(p)
                    self.book.clusters[key].supports = passing
        merged: set[int] = set()
        merges = 0
        for p in tested:
            keys = self.book.keys_in(p)
            pairs = mutual_pairs(keys, {k: self.book.clusters[k].supports for k in keys})
            for first, second in pairs:
                self._merge(first, second, losses)
            merges += len(pairs)
            if pairs:
                merged.add(p)
        self._settle(tested, answered=answered, changed=changed, merged=merged)
        self._report_tests(merges, differences, smallest_pool, failures)
        logger.debug(
            "round %d: %d clusters, %d merges, %d support edges",
            server_round,
            len(self.book.clusters),
            merges,
            self.book.support_edges(),
        )

    def _supports(self, per_device: Sequence[Float64Array]) -> bool:
        if self.version == 1:
            return supports_by_wilcoxon(per_device, float(self.epsilon), float(self.alpha))
        return supports_by_mean(per_device, float(self.epsilon))

    def _merge(
        self, first: str, second: str, losses: Mapping[str, Mapping[str, Float64Array]]
    ) -> None:
        """Algorithm 5 for one pair; the model with the lower validation loss on the union's
        answering members is kept (notes of :mod:`.faacl`)."""
        totals = {first: 0.0, second: 0.0}
        for device in (*self.book.clusters[first].members, *self.book.clusters[second].members):
            if device in losses:
                for k in totals:
                    totals[k] += float(losses[device][k].sum())
        kept = first if totals[first] <= totals[second] else second
        key = self.book.new_key()
        merge_clusters(self.book.clusters, first, second, key, self.book.rank)
        self.book.models[key] = self.book.models.pop(kept)
        del self.book.models[second if kept == first else first]
        self.book.reindex()

    def _settle(
        self, partitions: Sequence[int], *, answered: set[int], changed: set[int], merged: set[int]
    ) -> None:
        for p in partitions:
            settle(
                self.book.partitions[p],
                clusters=len(self.book.keys_in(p)),
                merged=p in merged,
                answered=p in answered,
                changed=p in changed,
                patience=self.patience,
            )

    def _pair_partitions(self, rng: np.random.Generator) -> None:
        """Algorithm 1: merge the partitions two by two, drawn at random."""
        for group in pair_partitions(list(self.book.partitions), rng):
            if len(group) < 2:
                continue
            p = self.book.next_partition
            self.book.next_partition += 1
            for old in group:
                del self.book.partitions[old]
            for cluster in self.book.clusters.values():
                if cluster.partition in group:
                    cluster.partition = p
            self.book.partitions[p] = Partition(stable=False)

    def _report_tests(
        self,
        merges: int,
        differences: Sequence[Float64Array],
        smallest_pool: int | None,
        failures: Sequence[Failure],
    ) -> None:
        self.metrics["merges"] = float(merges)
        self.metrics["probe_failures"] = float(len(failures))
        if differences:
            pooled = np.concatenate(differences)
            self.metrics["loss_difference_range"] = float(pooled.max() - pooled.min())
        if self.version == 2 and smallest_pool is not None:
            bound = 2.0 * hoeffding_tail(smallest_pool, float(self.epsilon), float(self.loss_range))
            self.metrics["hoeffding_split_bound"] = min(1.0, bound)
