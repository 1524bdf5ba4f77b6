"""Every machine served at once: placing agents that join a running federation.

:class:`Newcomers` runs between campaigns at every poll (``[models] request_poll_s``) and
before every round (the campaign runner's ``serve_newcomers``). It looks for

* an agent online outside the federation that was never placed, whose labelled-window
  count changed since it was placed, whose cluster serves no member any more, or that is
  unverified while another cluster now serves most machines;
* a member whose labelled-window count changed.

Each is offered the serving version of every cluster (from the model registry) and
evaluates each on its validation windows (:mod:`coordinator.engine.placement`: lowest loss
wins; an agent without labelled windows, or none of whose evaluations came back, goes to
the cluster serving most members of the federation, *unverified*, and follows it when
another cluster comes to serve more). An agent outside the federation gets a signed
assignment to its cluster's serving version at once (the model itself is retained on the
cluster's topic), so it diagnoses as soon as it has loaded it; if it can train it joins the
federation before the next round (:mod:`coordinator.runtime.membership`) with the
strategy's key of that cluster, or by the strategy's rule when unverified. A member moves
only when the best cluster's model beats its own cluster's on its data by more than
``[models] promotion_margin`` in accuracy (and in loss); it is served the better model at
once and moves in the strategy before the next round. Placements are kept in
``state_dir/placements.json`` (:mod:`coordinator.adapters.placement_store`) and reported in
the coordinator's status and ``summary.json``.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from coordinator.adapters.model_registry import RegistryError, ServingTable
from coordinator.adapters.mqtt_fleet import MqttFleet
from coordinator.adapters.placement_store import PlacementBook, PlacementStore, PlacementStoreError
from coordinator.adapters.presence import AgentRegistry
from coordinator.adapters.publisher import cluster_id
from coordinator.engine.placement import Placement, most_members, place
from coordinator.engine.rounds import RoundEngine
from coordinator.runtime.campaign_book import LabelledCounts
from coordinator.runtime.promotion import ModelPromotion
from coordinator.runtime.run_summary import RunSummary
from faultfleet.wire.campaign_messages import MAX_PLACEMENTS, MAX_SCORES, CandidateNote
from faultfleet.wire.campaign_messages import PlacementNote as Note

logger = logging.getLogger(__name__)


class Newcomers:
    """Places agents that join a run and serves them at once (see the module docstring).

    Parameters
    ----------
    engine : RoundEngine
    fleet : MqttFleet
        Carries the evaluate tasks of an offer.
    promotion : ModelPromotion
        Its registry says which version serves each cluster; it assigns placed agents.
    registry : AgentRegistry
        Presence of the agents.
    counts : LabelledCounts
        Each agent's labelled windows, from its status.
    store : PlacementStore
    summary : RunSummary
        Its ``agents`` are the federation; its ``placements`` are updated.
    margin : float
        ``[models] promotion_margin``: how much better a member's best cluster must be.
    clock : callable
        Unix time, seconds.
    """

    def __init__(
        self,
        engine: RoundEngine,
        fleet: MqttFleet,
        promotion: ModelPromotion,
        registry: AgentRegistry,
        counts: LabelledCounts,
        store: PlacementStore,
        summary: RunSummary,
        *,
        margin: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.engine = engine
        self.fleet = fleet
        self.promotion = promotion
        self.registry = registry
        self.counts = counts
        self.store = store
        self.summary = summary
        self.margin = margin
        self.clock = clock
        try:
            self.book = store.load()
        except PlacementStoreError as error:
            logger.error("%s; every machine outside the federation is placed again", error)
            self.book = PlacementBook()
        self.summary.placements = self.notes()

    # -- one pass ----------------------------------------------------------------------------

    def serve(self) -> bool:
        """Place every agent that needs it and serve it; True when anything changed."""
        try:
            table = self.promotion.registry.serving()
        except RegistryError as error:
            logger.error("no machine placed: %s", error)
            return False
        if not table.clusters:
            return False  # nothing is served yet: the first publication places them
        found = self.clock()
        due, changed = self._due(table)
        if due:
            self._place(due, table, found)
        if due or changed:
            self.store.save(self.book)
            self.summary.placements = self.notes()
        return bool(due) or changed

    def _due(self, table: ServingTable) -> tuple[list[str], bool]:
        """Agents to place now, and whether a member was seen for the first time (its
        window count noted: the book changed).

        A machine whose labelled windows keep growing (a labels file with an open range) is
        offered the models once per campaign, when its count differs from its last offer's:
        its new data joins training only at the next campaign anyway.
        """
        members = set(self.summary.agents)
        retired = set(self.registry.retired())
        windows = self.counts.snapshot()
        served = self._served(table)
        by_members = {table.agents[m] for m in members if table.agents.get(m) in table.clusters}
        campaign = self.promotion.campaign_id or ""
        due: list[str] = []
        noted = False
        for agent in self.registry.online():
            if agent in retired:
                continue
            count = windows.get(agent, 0)
            fresh = self.book.offered.get(agent) != campaign
            if agent in members:
                base = self.book.windows.get(agent)
                if base is None:
                    self.book.windows[agent] = count
                    noted = True
                elif count != base and count > 0 and fresh:
                    due.append(agent)
                continue
            note = self.book.placements.get(agent)
            if (
                note is None
                or (note.labelled_windows == 0) != (count == 0)
                or (count != note.labelled_windows and fresh)
                or note.cluster_id not in by_members
                or (not note.verified and most_members(served) != note.cluster_id)
            ):
                due.append(agent)
        return due, noted

    def _served(self, table: ServingTable) -> dict[str, int]:
        """Cluster id → members of the federation it serves (every serving cluster, 0 for
        none): machines outside the federation do not count."""
        members = set(self.summary.agents)
        counts = Counter(c for a, c in table.agents.items() if a in members)
        return {cid: counts.get(cid, 0) for cid in table.clusters}

    def _place(self, agents: Sequence[str], table: ServingTable, found: float) -> None:
        """Offer the serving versions to ``agents`` (found needing it at ``found``, Unix
        time), record and serve their placements."""
        self.book.offers += 1
        suffix = f"/offer{self.book.offers}"
        by_key: dict[str, str] = {}
        candidates = {}
        for cid, entry in sorted(table.clusters.items()):
            key = f"{cid}@v{entry.version}{suffix}"
            by_key[key] = cid
            candidates[key] = self.promotion.registry.weights(cid, entry.version)
        windows = self.counts.snapshot()
        served = {key: self._served(table)[cid] for key, cid in by_key.items()}
        unlabelled = [a for a in agents if windows.get(a, 0) == 0]
        for agent in agents:
            self.book.windows[agent] = windows.get(agent, 0)
            if agent not in unlabelled:
                self.book.offered[agent] = self.promotion.campaign_id or ""
        placed = place(
            self.fleet,
            self.engine.server_round,
            agents,
            candidates,
            served,
            unlabelled=unlabelled,
        )
        now = self.clock()
        assign: dict[str, str] = {}
        for agent in agents:
            placement = placed[agent]
            note = self._note(placement, by_key, table, windows.get(agent, 0), (found, now))
            if agent in self.summary.agents:
                if not self._moves(placement, by_key, table.agents.get(agent)):
                    continue
                note = note.model_copy(update={"member": True})
                self.book.moves[agent] = note.cluster_id
            assign[agent] = note.cluster_id
            self.book.placements[agent] = note
            _log(note)
        if assign:
            self.promotion.assign(assign)

    def _note(
        self,
        placement: Placement,
        by_key: Mapping[str, str],
        table: ServingTable,
        windows: int,
        times: tuple[float, float],
    ) -> Note:
        cid = by_key[placement.key]
        old = self.book.placements.get(placement.client_id)
        return Note(
            agent_id=placement.client_id,
            cluster_id=cid,
            model_version=table.clusters[cid].version,
            basis=placement.basis,
            verified=placement.verified,
            scores=tuple(
                CandidateNote(
                    cluster_id=by_key[s.key],
                    loss=s.loss,
                    accuracy=s.accuracy,
                    windows=s.num_samples,
                )
                for s in placement.scores
            ),
            note=placement.note,
            labelled_windows=windows,
            seen_at=times[0] if old is None else old.seen_at,
            placed_at=times[1],
            server_round=self.engine.server_round,
        )

    def _moves(self, placement: Placement, by_key: Mapping[str, str], current: str | None) -> bool:
        """Whether a member's new placement beats its own cluster by more than the margin."""
        if not placement.verified or current is None:
            return False
        best = placement.scores[0]
        own = [s for s in placement.scores if by_key[s.key] == current]
        if by_key[best.key] == current or not own:
            return False
        return best.accuracy > own[0].accuracy + self.margin and best.loss < own[0].loss

    # -- the federation ----------------------------------------------------------------------

    def joins(self) -> dict[str, str | None] | None:
        """Placed agents outside the federation → the strategy key they join with (None:
        the strategy's rule); None while no model is served (anyone may join by the rule)."""
        try:
            if not self.promotion.registry.serving().clusters:
                return None
        except RegistryError:
            return None
        keys = self._strategy_keys()
        members = set(self.summary.agents)
        return {
            agent: keys.get(note.cluster_id) if note.verified else None
            for agent, note in self.book.placements.items()
            if agent not in members
        }

    def moves(self) -> dict[str, str]:
        """Members to move → the strategy key of their new cluster."""
        keys = self._strategy_keys()
        return {a: keys[c] for a, c in self.book.moves.items() if c in keys}

    def _strategy_keys(self) -> dict[str, str]:
        return {cluster_id(k): k for k in self.engine.strategy.join_candidates()}

    def settled(self, members: Sequence[str]) -> None:
        """After a membership change: note who joined (and from which round), forget the
        placements of agents that left and the moves made."""
        after = set(members)
        first_round = self.engine.server_round + 1
        for agent, note in list(self.book.placements.items()):
            if agent in after and note.joined_round is None:
                self.book.placements[agent] = note.model_copy(update={"joined_round": first_round})
            elif agent not in after and note.joined_round is not None:
                del self.book.placements[agent]
        self.book.moves = {}  # made, or dropped as no longer possible
        self.store.save(self.book)
        self.summary.placements = self.notes()

    def notes(self) -> list[dict[str, object]]:
        """The placements the status reports: every unverified one, then the newest, each
        with its best candidates only."""
        notes = sorted(self.book.placements.values(), key=lambda n: (n.verified, -n.placed_at))
        kept = sorted(notes[:MAX_PLACEMENTS], key=lambda n: n.placed_at)
        return [
            n.model_copy(update={"scores": n.scores[:MAX_SCORES]}).model_dump(mode="json")
            for n in kept
        ]


def _log(note: Note) -> None:
    if note.verified:
        best = note.scores[0]
        runner = (
            f"; next {note.scores[1].cluster_id} at {note.scores[1].loss:.3f}"
            if len(note.scores) > 1
            else ""
        )
        logger.info(
            "agent %s placed on %s v%d: validation loss %.3f, accuracy %.3f on %d windows%s",
            note.agent_id,
            note.cluster_id,
            note.model_version,
            best.loss,
            best.accuracy,
            best.windows,
            runner,
        )
    else:
        logger.info(
            "agent %s placed on %s v%d, the cluster of most machines, unverified: %s",
            note.agent_id,
            note.cluster_id,
            note.model_version,
            note.note,
        )
