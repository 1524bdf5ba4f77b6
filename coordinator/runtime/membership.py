"""Agents joining, moving and leaving a running federation, decided between rounds.

A stopped agent is only offline and keeps its place. An agent joins when it is online,
holds labelled data, is not a member yet and has been placed
(:mod:`coordinator.runtime.newcomers`: offered the serving cluster models and served the
best one): it joins with the strategy key of its placement, or, unverified, by the
strategy's rule. A member whose changed data placed it on another cluster *moves*: it
leaves and joins again with its new key. A member leaves when its retained status says it
was retired (``faultfleet agent --retire``). Every strategy takes these changes
(:mod:`coordinator.strategies.joining`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.presence import AgentRegistry
from coordinator.engine.membership import MemberFleet, plan_membership
from coordinator.engine.rounds import RoundEngine

logger = logging.getLogger(__name__)


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

    def has_newcomers(
        self, members: Sequence[str], placed: Mapping[str, str | None] | None
    ) -> bool:
        """Whether an agent outside ``members`` is online, placed (if ``placed`` is given)
        and could join now."""
        outside = set(self.registry.online_trainers()) - set(members)
        return bool(outside if placed is None else outside & set(placed))

    def apply(
        self,
        engine: RoundEngine,
        fleet: MemberFleet,
        members: list[str],
        *,
        placed: Mapping[str, str | None] | None = None,
        moves: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Between rounds: the federation after the change (``members`` itself if none).

        Parameters
        ----------
        placed : mapping of str to str or None
            Agents that were placed and may join → the strategy key they join with (None:
            the strategy's rule). Without it every online trainer may join, by the rule.
        moves : mapping of str to str
            Members to place on another key: they leave and join again with it.
        """
        online, retired = self.registry.membership_view()
        change = plan_membership(members, online, retired)
        waiting = [a for a in change.joining if placed is not None and a not in placed]
        joining = [a for a in change.joining if a not in waiting]
        leaving = set(change.leaving)
        if not joining and len(leaving) >= len(members):
            leaving = set()  # never leave a run empty
        retired_members = [a for a in members if a in set(retired)]
        self._note([a for a in retired_members if a not in leaving])
        candidates = set(engine.strategy.join_candidates())
        moving = {
            a: k
            for a, k in (moves or {}).items()
            if a in members
            and a not in leaving
            and k in candidates
            and k != engine.strategy.model_key_for(a)
        }
        staying = [a for a in members if a not in leaving and a not in moving]
        if not staying and not joining:
            moving = {}  # a move waits while it would leave the strategy without clients
            staying = [a for a in members if a not in leaving]
        if not (joining or leaving or moving):
            return members
        wanted = {a: (placed or {}).get(a) for a in joining}
        keys = {a: k if k in candidates else None for a, k in wanted.items()}
        if joining:
            engine.add_clients(joining, {a: k for a, k in keys.items() if k is not None})
        if leaving or moving:
            engine.remove_clients([a for a in members if a in leaving or a in moving])
        if moving:
            engine.add_clients(list(moving), moving)
        keys |= moving
        after = staying + joining + list(moving)
        fleet.set_clients(after)
        self.metrics.federation_agents.set(len(after))
        self.metrics.membership_changes.labels(change="joined").inc(len(joining))
        self.metrics.membership_changes.labels(change="left").inc(len(leaving))
        for agent in joining:
            logger.info("agent %s joined the federation on %s", agent, keys[agent] or "its rule")
        for agent, key in moving.items():
            logger.info("agent %s moved to %s: its new data fit that model best", agent, key)
        for agent in leaving:
            logger.info("agent %s was retired and left the federation", agent)
        self._logged -= set(joining) | leaving
        return after

    def _note(self, agents: Sequence[str]) -> None:
        """Warn once per retired member that stays because it is the run's last."""
        for agent in (a for a in agents if a not in self._logged):
            self._logged.add(agent)
            logger.warning(
                "agent %s was retired, but so was every member of the run; it stays until "
                "another agent joins",
                agent,
            )
