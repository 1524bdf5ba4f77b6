"""The fleet as ``faultfleet status`` shows it, folded from the broker's messages.

:class:`FleetView` takes the retained coordinator status, every agent's retained status and
heartbeat, every ingest worker's retained status, and (with ``--watch``) the live
diagnoses, and answers :meth:`FleetView.snapshot`: a JSON-ready dict whose schema
(``STATUS_SCHEMA_VERSION``) docs/runtime.md documents. Each
agent is ``online``, ``offline`` (``offline_cause``: ``stopped`` when the agent said so,
``lost`` when the broker published its last will), ``retired`` or ``unknown`` (heard of by
its heartbeat only); ``last_seen`` is its newest sign of life (its own status, heartbeat or
diagnosis). The coordinator's ``campaign`` and ``recent_promotions`` are read from its
retained status (schema 5), or from its ``summary.json`` (``--state-dir``) when the status
lacks them; they are null and empty before the first campaign. A message that cannot be
read is logged, counted and skipped.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import TypeAdapter

from faultfleet.wire.codec import WireError, parse_envelope
from faultfleet.wire.ingest_messages import WORKER_STATUS_ADAPTER
from faultfleet.wire.messages import AgentHeartbeat, AgentStatus, CoordinatorStatus, Diagnosis
from faultfleet.wire.mqtt import Handler
from faultfleet.wire.topics import Topics

logger = logging.getLogger(__name__)

STATUS_SCHEMA_VERSION = 1
"""Version of the ``faultfleet status --json`` document; raised when a field changes meaning
or disappears (new fields may appear without it)."""

STATES = ("online", "offline", "retired", "unknown")

_AGENT_STATUS = TypeAdapter(AgentStatus)
_HEARTBEAT = TypeAdapter(AgentHeartbeat)
_COORDINATOR = TypeAdapter(CoordinatorStatus)
_DIAGNOSIS = TypeAdapter(Diagnosis)

AgentMessage = TypeVar("AgentMessage", AgentStatus, AgentHeartbeat, Diagnosis)


@dataclass
class _Agent:
    status: AgentStatus | None = None
    heartbeat: AgentHeartbeat | None = None
    live_diagnosis: Diagnosis | None = None


@dataclass
class FleetView:
    """Thread-safe fold of the messages ``faultfleet status`` subscribes to.

    Parameters
    ----------
    topics : Topics
        The topic tree of the fleet (its root).
    summary : dict, optional
        The coordinator's ``summary.json`` (``--state-dir``), for the campaign and the
        recent promotions when its retained status does not carry them.
    """

    topics: Topics
    summary: dict[str, Any] | None = None
    unreadable: int = 0
    """Messages skipped because they could not be read."""
    _agents: dict[str, _Agent] = field(default_factory=dict)
    _coordinator: dict[str, Any] | None = None
    _ingest_workers: dict[str, str] = field(default_factory=dict)
    """Each ingest worker's retained state (``online``/``offline``), by worker id."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def routes(self, *, live: bool) -> dict[str, Handler]:
        """Topic filter → handler for every topic the view reads (diagnoses when ``live``)."""
        routes: dict[str, Handler] = {
            self.topics.coordinator_status(): self.on_coordinator_status,
            self.topics.all_agent_status(): self.on_agent_status,
            self.topics.all_heartbeats(): self.on_heartbeat,
            self.topics.all_ingest_status(): self.on_ingest_status,
        }
        if live:
            routes[self.topics.all_diagnoses()] = self.on_diagnosis
        return routes

    # -- handlers (the MQTT network thread) --------------------------------------------------

    def on_coordinator_status(self, topic: str, payload: bytes) -> None:
        status = self._parse(_COORDINATOR, topic, payload)
        if status is not None:
            with self._lock:
                self._coordinator = status.model_dump(mode="json")

    def on_ingest_status(self, topic: str, payload: bytes) -> None:
        status = self._parse(WORKER_STATUS_ADAPTER, topic, payload)
        if status is None:
            return
        if self.topics.ingest_worker_of(topic) != status.worker_id:
            self._skip(topic, f"it speaks for ingest worker {status.worker_id!r}")
            return
        with self._lock:
            self._ingest_workers[status.worker_id] = status.state

    def on_agent_status(self, topic: str, payload: bytes) -> None:
        status = self._parse_agent(_AGENT_STATUS, topic, payload)
        if status is not None:
            with self._lock:
                self._agents.setdefault(status.agent_id, _Agent()).status = status

    def on_heartbeat(self, topic: str, payload: bytes) -> None:
        heartbeat = self._parse_agent(_HEARTBEAT, topic, payload)
        if heartbeat is not None:
            with self._lock:
                self._agents.setdefault(heartbeat.agent_id, _Agent()).heartbeat = heartbeat

    def on_diagnosis(self, topic: str, payload: bytes) -> None:
        diagnosis = self._parse_agent(_DIAGNOSIS, topic, payload)
        if diagnosis is not None:
            with self._lock:
                self._agents.setdefault(diagnosis.agent_id, _Agent()).live_diagnosis = diagnosis

    def _parse_agent(
        self, adapter: TypeAdapter[AgentMessage], topic: str, payload: bytes
    ) -> AgentMessage | None:
        message: AgentMessage | None = self._parse(adapter, topic, payload)
        if message is not None and self.topics.agent_of(topic) != message.agent_id:
            self._skip(topic, f"it speaks for agent {message.agent_id!r}")
            return None
        return message

    def _parse(self, adapter: TypeAdapter[Any], topic: str, payload: bytes) -> Any:
        if not payload:  # a cleared retained message
            return None
        try:
            return parse_envelope(adapter, payload)
        except WireError as error:
            self._skip(topic, str(error))
            return None

    def _skip(self, topic: str, why: str) -> None:
        with self._lock:
            self.unreadable += 1
        logger.warning("ignoring the message on %s: %s", topic, why)

    # -- the snapshot ------------------------------------------------------------------------

    def snapshot(self, *, now: float, broker: str) -> dict[str, Any]:
        """The fleet now, as the ``--json`` document (docs/runtime.md, *faultfleet status*)."""
        with self._lock:
            agents = [agent_row(agent_id, a) for agent_id, a in sorted(self._agents.items())]
            coordinator = coordinator_row(self._coordinator, self.summary)
            workers = [
                {"worker_id": worker, "state": state}
                for worker, state in sorted(self._ingest_workers.items())
            ]
            unreadable = self.unreadable
        placed = {p["agent_id"]: p for p in (coordinator or {}).get("placements", [])}
        for row in agents:
            row["placement"] = placement_of(placed.get(row["agent_id"]))
        counts = dict.fromkeys(STATES, 0)
        for row in agents:
            counts[row["state"]] += 1
        return {
            "schema_version": STATUS_SCHEMA_VERSION,
            "generated_at": now,
            "broker": broker,
            "topic_root": self.topics.root,
            "coordinator": coordinator,
            "counts": counts,
            "agents": agents,
            "ingest_workers": workers,
            "unreadable_messages": unreadable,
        }


def agent_row(agent_id: str, agent: _Agent) -> dict[str, Any]:
    """One agent's entry of the snapshot."""
    status, heartbeat = agent.status, agent.heartbeat
    state = status.state if status is not None else "unknown"
    status_time = status.timestamp if status is not None and status.timestamp > 0 else None
    signs = [heartbeat.timestamp if heartbeat is not None else None]
    if status is not None and status.state != "retired":
        signs.append(status_time)
    last = _newest(heartbeat.last_diagnosis if heartbeat else None, agent.live_diagnosis)
    if last is not None:
        signs.append(last.timestamp)
    known = [t for t in signs if t is not None]
    # The serving version from whichever of the two the agent sent last (a rollback lowers it).
    reports = [(heartbeat.timestamp, heartbeat.model_version)] if heartbeat is not None else []
    if status is not None and status.state == "online" and status.model_version is not None:
        reports.append((status.timestamp, status.model_version))
    serving = max(reports, key=lambda report: report[0])[1] if reports else None
    return {
        "agent_id": agent_id,
        "state": state,
        "offline_cause": (
            ("stopped" if status_time is not None else "lost") if state == "offline" else None
        ),
        "status_time": status_time,
        "last_seen": max(known) if known else None,
        "cluster_id": heartbeat.cluster_id if heartbeat is not None else None,
        "serving_model_version": serving,
        "last_diagnosis": None
        if last is None
        else {
            "class_name": last.class_name,
            "probability": last.probability,
            "timestamp": last.timestamp,
            "model_version": last.model_version,
        },
        "streak": None
        if heartbeat is None or heartbeat.streak_class is None
        else {"class_name": heartbeat.streak_class, "windows": heartbeat.streak_windows},
        "windows_diagnosed": heartbeat.windows_diagnosed if heartbeat is not None else None,
        "can_train": status.can_train if status is not None and state == "online" else None,
        "device": (status.device or None) if status is not None else None,
        "software_version": (status.software_version or None) if status is not None else None,
    }


def coordinator_row(
    status: dict[str, Any] | None, summary: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The coordinator's entry: its retained status, with campaign and promotions if known."""
    if status is None and summary is None:
        return None
    status = status or {}
    summary = summary or {}
    return {
        "state": status.get("state"),
        "run_id": status.get("run_id") or summary.get("run_id") or None,
        "strategy": status.get("strategy") or summary.get("strategy") or None,
        "server_round": status.get("server_round", summary.get("server_round")),
        "timestamp": status.get("timestamp") or None,
        "campaign": _first_known(status.get("campaign"), summary.get("campaign")),
        "recent_promotions": list(
            status.get("recent_promotions") or summary.get("recent_promotions") or []
        ),
        "placements": list(status.get("placements") or summary.get("placements") or []),
    }


def placement_of(note: dict[str, Any] | None) -> dict[str, Any] | None:
    """An agent's placement as its row shows it: cluster, version, basis, whether verified,
    and the round it joined the federation from (None before)."""
    if note is None:
        return None
    keys = ("cluster_id", "model_version", "basis", "verified", "joined_round", "placed_at")
    return {key: note.get(key) for key in keys}


def _first_known(*values: Any) -> Any:
    """The first value that is not None (None when all are)."""
    return next((value for value in values if value is not None), None)


def _newest(*diagnoses: Diagnosis | None) -> Diagnosis | None:
    known = [d for d in diagnoses if d is not None]
    return max(known, key=lambda d: d.timestamp) if known else None
