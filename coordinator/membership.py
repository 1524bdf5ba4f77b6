"""Agents joining and leaving a running federation, decided between rounds.

A stopped agent is only offline and keeps its place. An agent joins when it is online,
holds labelled data and is not a member yet; a member leaves when its retained status says
it was retired (``faultfleet agent --retire``). Only strategies with
``dynamic_membership`` (FAACL, FedAvg) take the change; with the others each such agent is
logged once and the federation stays as it started.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.engine import RoundEngine
from coordinator.metrics import CoordinatorMetrics
from coordinator.mqtt_fleet import MqttFleet
from coordinator.presence import AgentRegistry

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MembershipChange:
    """Who joins and who leaves before the next round."""

    joining: tuple[str, ...] = ()
    leaving: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.joining or self.leaving)


def plan_membership(
    members: Sequence[str], online_trainers: Sequence[str], retired: Sequence[str]
) -> MembershipChange:
    """The change that brings ``members`` in line with the presence seen.

    Online trainers that are not members join (in the order given); retired members leave
    (in membership order), except that the last members are kept when nobody joins: a
    federation is never left empty.
    """
    joining = tuple(a for a in online_trainers if a not in members)
    gone = set(retired)
    leaving = tuple(a for a in members if a in gone)
    if len(leaving) == len(members) and not joining:
        leaving = ()
    return MembershipChange(joining, leaving)


class MembershipSync:
    """Applies :func:`plan_membership` to a run's engine, fleet and list of agents.

    Parameters
    ----------
    registry : AgentRegistry
        Presence, fed by the service.
    metrics : CoordinatorMetrics
    """

    def __init__(self, registry: AgentRegistry, metrics: CoordinatorMetrics) -> None:
        self.registry = registry
        self.metrics = metrics
        self._logged: set[str] = set()

    def apply(self, engine: RoundEngine, fleet: MqttFleet, members: list[str]) -> list[str]:
        """Between rounds: the federation after the change (``members`` if none applies)."""
        retired = self.registry.retired()
        change = plan_membership(members, self.registry.online_trainers(), retired)
        if not change:
            self._note_kept([a for a in members if a in set(retired)], "was retired")
            return members
        if not engine.strategy.dynamic_membership:
            self._note_kept(change.joining, "is online outside the federation", engine)
            self._note_kept(change.leaving, "was retired", engine)
            return members
        if change.joining:
            engine.add_clients(change.joining)
        if change.leaving:
            engine.remove_clients(change.leaving)
        after = [a for a in members if a not in change.leaving] + list(change.joining)
        fleet.set_clients(after)
        self.metrics.federation_agents.set(len(after))
        self.metrics.membership_changes.labels(change="joined").inc(len(change.joining))
        self.metrics.membership_changes.labels(change="left").inc(len(change.leaving))
        for agent in change.joining:
            logger.info("agent %s joined the federation", agent)
            self._logged.discard(agent)
        for agent in change.leaving:
            logger.info("agent %s was retired and left the federation", agent)
        return after

    def _note_kept(
        self, agents: Sequence[str], what: str, engine: RoundEngine | None = None
    ) -> None:
        for agent in (a for a in agents if a not in self._logged):
            self._logged.add(agent)
            if engine is None:
                logger.warning(
                    "agent %s %s, but so was every member of the run; it stays until "
                    "another agent joins",
                    agent,
                    what,
                )
            else:
                logger.warning(
                    "agent %s %s, but strategy %s keeps the agents the run started with; "
                    "start a new run (an empty state_dir) to change them",
                    agent,
                    what,
                    engine.strategy.name,
                )
