"""Which agents exist and which are online, from their retained status messages.

Agents publish a retained ``online`` status when they connect and the broker publishes
their retained ``offline`` last will when they drop, so a coordinator that (re)connects
learns the whole fleet at once from the retained messages. An ``online`` status is
reported (``on_online``) whether or not the agent was known to be offline: after a broker
restart an agent that never went offline announces itself again (and a reconnecting
coordinator receives the retained statuses again), and the coordinator sends it its
unanswered tasks. Only the status an agent publishes after loading a new model (its
``model_version`` changed) is not reported: it is no reconnection.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from faultfleet.wire.messages import AgentStatus


@dataclass(frozen=True)
class AgentInfo:
    """The last status an agent reported."""

    agent_id: str
    online: bool
    can_train: bool
    num_train_samples: int
    device: str
    retired: bool = False
    """The agent was taken out of service for good (until it comes online again)."""
    model_version: int | None = None
    """The model version it diagnoses with, as its last online status said."""


@dataclass(frozen=True)
class AgentCounts:
    """How many agents a registry holds in each state, read at one instant."""

    online: int
    online_trainers: int
    """Online and able to train (holding labelled data)."""
    registered: int
    retired: int


def _online(info: AgentInfo | None) -> int:
    return int(info is not None and info.online)


def _online_trainer(info: AgentInfo | None) -> int:
    return int(info is not None and info.online and info.can_train)


def _retired(info: AgentInfo | None) -> int:
    return int(info is not None and info.retired)


class AgentRegistry:
    """Thread-safe view of the agents' presence.

    Parameters
    ----------
    known : iterable of agent ids
        Agents registered before a restart; they count as registered (but offline) until
        their retained status arrives.
    on_offline : callable, optional
        ``on_offline(agent_id)`` when an online agent goes offline (its last will fired).
    on_online : callable, optional
        ``on_online(agent_id)`` for every ``online`` status but one announcing a newly
        loaded model: a (re)connection of the agent, or of the coordinator, which then
        receives the retained statuses again.
    """

    def __init__(
        self,
        known: Iterable[str] = (),
        on_offline: Callable[[str], None] | None = None,
        on_online: Callable[[str], None] | None = None,
    ) -> None:
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._agents = {
            agent: AgentInfo(agent, online=False, can_train=True, num_train_samples=0, device="")
            for agent in known
        }
        self._on_offline = on_offline
        self._on_online = on_online
        self._online = self._online_trainers = self._retired = 0
        """How many agents are online, online and able to train, retired: kept as statuses
        arrive, so that a status costs O(1), not a pass over the fleet."""

    def update(self, status: AgentStatus) -> None:
        """Record ``status``; wakes anyone waiting in :meth:`wait_for`."""
        online = status.state == "online"
        with self._changed:
            previous = self._agents.get(status.agent_id)
            can_train = status.can_train if online else (previous.can_train if previous else False)
            self._agents[status.agent_id] = AgentInfo(
                status.agent_id,
                online=online,
                can_train=can_train,
                num_train_samples=status.num_train_samples
                if online
                else (previous.num_train_samples if previous else 0),
                device=status.device if online else (previous.device if previous else ""),
                retired=status.state == "retired",
                model_version=status.model_version
                if online
                else (previous.model_version if previous else None),
            )
            current = self._agents[status.agent_id]
            self._online += _online(current) - _online(previous)
            self._online_trainers += _online_trainer(current) - _online_trainer(previous)
            self._retired += _retired(current) - _retired(previous)
            self._changed.notify_all()
        if not online and previous is not None and previous.online and self._on_offline:
            self._on_offline(status.agent_id)
        new_model = (
            previous is not None
            and previous.online
            and previous.model_version != status.model_version
        )
        if online and not new_model and self._on_online:
            self._on_online(status.agent_id)

    def trainers(self) -> list[str]:
        """Agents that can train (hold labelled data), online or not, sorted."""
        with self._lock:
            return sorted(a for a, info in self._agents.items() if info.can_train)

    def declared_samples(self, agent_id: str) -> int:
        """Training windows ``agent_id`` declared in its last online status (0 if unknown)."""
        with self._lock:
            info = self._agents.get(agent_id)
            return info.num_train_samples if info is not None else 0

    def online(self) -> list[str]:
        """Online agents, sorted."""
        with self._lock:
            return sorted(a for a, info in self._agents.items() if info.online)

    def online_trainers(self) -> list[str]:
        """Online agents that can train, sorted."""
        with self._lock:
            return sorted(a for a, info in self._agents.items() if info.online and info.can_train)

    def counts(self) -> AgentCounts:
        """How many agents are online, online trainers, seen and retired (the lengths of
        :meth:`online`, :meth:`online_trainers`, :meth:`all` and :meth:`retired`) without
        listing them: read after every status, thousands of them at a fleet's start."""
        with self._lock:
            return AgentCounts(
                self._online, self._online_trainers, len(self._agents), self._retired
            )

    def membership_view(self) -> tuple[list[str], list[str]]:
        """(online agents that can train, retired agents), both sorted, read at one instant."""
        with self._lock:
            return self.online_trainers(), self.retired()

    def retired(self) -> list[str]:
        """Agents whose last status says they were retired, sorted."""
        with self._lock:
            return sorted(a for a, info in self._agents.items() if info.retired)

    def all(self) -> list[str]:
        """Every agent ever seen, sorted."""
        with self._lock:
            return sorted(self._agents)

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``predicate()`` holds (re-checked on every status change)."""
        with self._changed:
            return self._changed.wait_for(predicate, timeout=timeout_s)
