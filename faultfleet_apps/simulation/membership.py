"""Machines joining and leaving a simulated run, on a schedule fixed in the settings.

A schedule is two lists of ``(client id, round)`` pairs (:attr:`~faultfleet_apps.simulation.
config.SimConfig.joins` and ``leaves``). A machine that joins before round r is not a
member in rounds 1 … r − 1 and is one from round r on; a machine that leaves before round r
is a member up to round r − 1. Before a round the runner applies its leaves, then its joins,
to the engine (:meth:`~coordinator.engine.rounds.RoundEngine.remove_clients`,
:meth:`~coordinator.engine.rounds.RoundEngine.add_clients`) and to the fleet (``set_clients``).
A joining machine is placed as the coordinator places one (:mod:`coordinator.engine.placement`):
it evaluates every model of the strategy's ``join_candidates`` on its validation windows
and joins with the one of lowest loss. The coordinator over MQTT
(:mod:`coordinator.runtime.membership`) applies joins first and may let every member leave
in a round where another joins; a schedule is fixed in advance, so here every round must
keep a member after its leaves. Every strategy accepts a schedule.

:func:`check_schedule` checks what the settings alone decide; :meth:`MembershipSchedule.plan`
checks the rest against the federation's clients.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.engine.membership import MemberFleet
from coordinator.engine.placement import place
from coordinator.engine.rounds import RoundEngine
from faultfleet.errors import UsageError

logger = logging.getLogger(__name__)

Schedule = tuple[tuple[str, int], ...]
"""``(client id, round)`` pairs: the machine joins (or leaves) before that round."""

KNOWN_SHOWN = 5
"""How many of the federation's client ids an unknown-id error names."""


def check_schedule(joins: Schedule, leaves: Schedule, rounds: int) -> None:
    """Raise a UsageError naming the first problem of a schedule for a run of ``rounds``.

    Every entry is a (client id, round) pair with the round in [2, rounds]; no id appears
    twice in ``joins`` nor twice in ``leaves``; a machine that joins and leaves leaves after
    it joins. Whether the ids exist and whether a member is always left are checked against
    the federation (:meth:`MembershipSchedule.plan`).
    """
    for name, entries in (("joins", joins), ("leaves", leaves)):
        seen: set[str] = set()
        for position, entry in enumerate(entries):
            if (
                not isinstance(entry, tuple)
                or len(entry) != 2
                or not isinstance(entry[0], str)
                or not entry[0]
                or isinstance(entry[1], bool)
                or not isinstance(entry[1], int)
            ):
                raise UsageError(
                    f"{name}[{position}] must be a (client id, round) pair such as "
                    f"('m05', 10), got {entry!r}"
                )
            client, server_round = entry
            if not 2 <= server_round <= rounds:
                raise UsageError(
                    f"{name}: {client!r} at round {server_round} is out of range; the round "
                    f"must be in [2, {rounds}] (round 1 starts with the first members, and "
                    f"the run has {rounds} rounds)"
                )
            if client in seen:
                raise UsageError(
                    f"{name} names {client!r} twice; a machine {name[:-1]}s at most once"
                )
            seen.add(client)
    joined = dict(joins)
    for client, leave_round in leaves:
        join_round = joined.get(client)
        if join_round is not None and leave_round <= join_round:
            raise UsageError(
                f"{client!r} leaves before round {leave_round} but joins before round "
                f"{join_round}: a machine that joins and leaves must leave after it joins"
            )


@dataclass(frozen=True)
class MembershipSchedule:
    """A checked schedule for one federation.

    Attributes
    ----------
    clients : tuple of str
        The federation's clients, in its order.
    joins, leaves : dict of str to int
        Round before which each scheduled machine joins / leaves.
    """

    clients: tuple[str, ...]
    joins: dict[str, int]
    leaves: dict[str, int]

    @classmethod
    def plan(cls, clients: Sequence[str], joins: Schedule, leaves: Schedule) -> MembershipSchedule:
        """The schedule of ``joins`` and ``leaves`` (checked by :func:`check_schedule`) for
        the federation of ``clients``.

        Raises
        ------
        ValueError
            An id is not a client of the federation, or some round would start (or a
            round's leaves would leave the run) with no member.
        """
        known = set(clients)
        for name, entries in (("joins", joins), ("leaves", leaves)):
            unknown = [client for client, _ in entries if client not in known]
            if unknown:
                shown = ", ".join(clients[:KNOWN_SHOWN])
                more = ", …" if len(clients) > KNOWN_SHOWN else ""
                raise UsageError(
                    f"{name} names {', '.join(map(repr, unknown))}, not a client of the "
                    f"federation; its clients are {shown}{more} ({len(clients)} in all)"
                )
        schedule = cls(tuple(clients), dict(joins), dict(leaves))
        if not schedule.members(1):
            raise UsageError(
                "every machine of the federation joins late: at least one must be a member "
                "from round 1 (take one out of joins)"
            )
        for server_round in sorted(set(schedule.leaves.values())):
            before = schedule.members(server_round - 1)
            leaving = set(schedule.leaving(server_round))
            if not [c for c in before if c not in leaving]:
                raise UsageError(
                    f"before round {server_round} the last members ({', '.join(before)}) "
                    "would leave: a run needs at least one member at all times (leaves "
                    "are applied before joins); let one of them leave later"
                )
        return schedule

    def __bool__(self) -> bool:
        return bool(self.joins or self.leaves)

    def members(self, server_round: int) -> list[str]:
        """Members during ``server_round`` (every change before it applied), in the
        federation's order; round 0 gives the first members."""
        r = max(server_round, 1)
        return [c for c in self.clients if self.joins.get(c, 1) <= r < self.leaves.get(c, r + 1)]

    def joining(self, server_round: int) -> list[str]:
        """Machines that join before ``server_round``, in the federation's order."""
        return [c for c in self.clients if self.joins.get(c) == server_round]

    def leaving(self, server_round: int) -> list[str]:
        """Machines that leave before ``server_round``, in the federation's order."""
        return [c for c in self.clients if self.leaves.get(c) == server_round]


def member_fleet(engine: RoundEngine) -> MemberFleet:
    """The engine's fleet, which must be able to change its members."""
    fleet = engine.fleet
    if not isinstance(fleet, MemberFleet):
        raise TypeError(
            f"{type(fleet).__name__} cannot change its clients (it has no set_clients); run "
            "a membership schedule on a fleet that has"
        )
    return fleet


def apply_changes(
    engine: RoundEngine, schedule: MembershipSchedule, server_round: int
) -> tuple[list[str], list[str]]:
    """Before ``server_round``: its leaves, then its joins, to the engine and the fleet.

    Returns the (joined, left) client ids.
    """
    leaving = schedule.leaving(server_round)
    joining = schedule.joining(server_round)
    if leaving:
        engine.remove_clients(leaving)
    if leaving or joining:
        member_fleet(engine).set_clients(schedule.members(server_round))
    if joining:
        strategy = engine.strategy
        keys = strategy.join_candidates()
        served = Counter(strategy.model_key_for(c) for c in strategy.client_ids_)
        placed = place(
            engine.fleet,
            server_round - 1,
            joining,
            {k: strategy.models[k] for k in keys},
            {k: served.get(k, 0) for k in keys},
        )
        engine.add_clients(joining, {c: p.key for c, p in placed.items() if p.verified})
        for client in joining:
            logger.info(
                "round %d: %s joined the run on %s (%s)",
                server_round,
                client,
                placed[client].key,
                placed[client].basis,
            )
        for client in leaving:
            logger.info("round %d: %s left the run", server_round, client)
    return joining, leaving


def restore_members(engine: RoundEngine, schedule: MembershipSchedule) -> None:
    """After :meth:`~coordinator.engine.rounds.RoundEngine.restore`: give the fleet the members
    the restored strategy holds (checked against the schedule), in the federation's order.

    Raises
    ------
    ValueError
        The restored strategy's clients are not the schedule's members at its round.
    """
    registered = set(engine.strategy.client_ids_)
    members = [c for c in schedule.clients if c in registered]
    expected = schedule.members(engine.server_round)
    if registered != set(expected):
        raise UsageError(
            f"the checkpoint's clients after round {engine.server_round} are "
            f"{sorted(registered)}, but the schedule has {expected}; resume with the "
            "federation and settings the run started with"
        )
    member_fleet(engine).set_clients(members)
