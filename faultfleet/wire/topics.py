"""The MQTT topic tree, built in one place.

Every topic lives under a versioned root (``faultfleet/v1`` by default)::

    {root}/coordinator/status            retained presence of the coordinator (last will: offline)
    {root}/agents/{agent}/status         retained presence of an agent (last will: offline)
    {root}/agents/{agent}/tasks          coordinator → agent: fit, evaluate, losses, gradient
    {root}/agents/{agent}/results        agent → coordinator: their answers, or failures
    {root}/agents/{agent}/assignment     retained: the agent's cluster and model version
    {root}/agents/{agent}/diagnoses      agent → subscribers: one message per diagnosed window
    {root}/agents/{agent}/heartbeat      retained: when the agent was last seen, its last diagnosis
    {root}/clusters/{cluster}/model      retained: the cluster's ONNX model
    {root}/ingest/plan                   retained: the round ingest workers fold updates for
    {root}/ingest/{worker}/status        retained presence of an ingest worker (last will: offline)
    {root}/ingest/{worker}/summaries     ingest worker → coordinator: summaries, partial sums
    {root}/ingest/{worker}/answers/{agent}  ingest worker → coordinator: an agent's answer
                                         other than a fit update, forwarded unchanged

An agent's broker account may write only the topics under its own id that it publishes
(``status``, ``results``, ``diagnoses``, ``heartbeat``); ``deploy/mosquitto/faultfleet.acl``
enforces it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from faultfleet.wire.settings import DEFAULT_TOPIC_ROOT

NAME_PATTERN = r"[A-Za-z0-9_.-]{1,64}"
_NAME = re.compile(NAME_PATTERN)


def check_name(kind: str, value: str) -> str:
    """``value`` if it can be one level of a topic; a ValueError naming ``kind`` otherwise."""
    if not _NAME.fullmatch(value):
        raise ValueError(
            f"{kind} {value!r} cannot be used in a topic: use 1 to 64 letters, digits, '_', "
            "'.' or '-'"
        )
    return value


def shared(group: str, topic_filter: str) -> str:
    """The MQTT 5 shared subscription ``$share/{group}/{topic_filter}``: the broker hands
    each matching message to one subscriber of ``group``."""
    check_name("share group", group)
    return f"$share/{group}/{topic_filter}"


@dataclass(frozen=True)
class Topics:
    """Topic names under ``root``."""

    root: str = DEFAULT_TOPIC_ROOT

    def coordinator_status(self) -> str:
        return f"{self.root}/coordinator/status"

    def agent_status(self, agent_id: str) -> str:
        return self._agent(agent_id, "status")

    def tasks(self, agent_id: str) -> str:
        return self._agent(agent_id, "tasks")

    def results(self, agent_id: str) -> str:
        return self._agent(agent_id, "results")

    def assignment(self, agent_id: str) -> str:
        return self._agent(agent_id, "assignment")

    def diagnoses(self, agent_id: str) -> str:
        return self._agent(agent_id, "diagnoses")

    def heartbeat(self, agent_id: str) -> str:
        return self._agent(agent_id, "heartbeat")

    def cluster_model(self, cluster_id: str) -> str:
        return f"{self.root}/clusters/{check_name('cluster id', cluster_id)}/model"

    def ingest_plan(self) -> str:
        """Retained: the round ingest workers fold updates for (its models and bounds)."""
        return f"{self.root}/ingest/plan"

    def ingest_status(self, worker_id: str) -> str:
        """Retained presence of an ingest worker (its last will says ``offline``)."""
        return f"{self.root}/ingest/{check_name('worker id', worker_id)}/status"

    def ingest_summaries(self, worker_id: str) -> str:
        """Ingest worker → coordinator: a compact summary per accepted update, partial sums."""
        return f"{self.root}/ingest/{check_name('worker id', worker_id)}/summaries"

    def all_ingest_summaries(self) -> str:
        return f"{self.root}/ingest/+/summaries"

    def all_ingest_status(self) -> str:
        return f"{self.root}/ingest/+/status"

    def ingest_worker_of(self, topic: str) -> str | None:
        """The worker id of a ``{root}/ingest/{worker}/...`` topic, None for any other topic
        (the plan's included)."""
        prefix = f"{self.root}/ingest/"
        if not topic.startswith(prefix) or topic.count("/", len(prefix)) == 0:
            return None
        worker = topic[len(prefix) :].split("/", 1)[0]
        return worker if _NAME.fullmatch(worker) else None

    def forwarded_answer(self, worker_id: str, agent_id: str) -> str:
        """Ingest worker → coordinator: an answer of ``agent_id`` other than a fit update
        (evaluation, probe, failure), forwarded unchanged by the worker that received it."""
        worker = check_name("worker id", worker_id)
        return f"{self.root}/ingest/{worker}/answers/{check_name('agent id', agent_id)}"

    def forwarded_answers(self, worker_id: str) -> str:
        """Every answer ``worker_id`` forwards (a subscription filter)."""
        return f"{self.root}/ingest/{check_name('worker id', worker_id)}/answers/+"

    def forwarded_agent(self, worker_id: str, topic: str) -> str | None:
        """The agent of a topic :meth:`forwarded_answer` built for ``worker_id``; None for
        any other topic (another worker's included)."""
        prefix = f"{self.root}/ingest/{worker_id}/answers/"
        agent = topic[len(prefix) :] if topic.startswith(prefix) else ""
        return agent if _NAME.fullmatch(agent) else None

    # -- subscription filters ------------------------------------------------------------

    def all_agent_status(self) -> str:
        return f"{self.root}/agents/+/status"

    def all_results(self) -> str:
        return f"{self.root}/agents/+/results"

    def all_diagnoses(self) -> str:
        return f"{self.root}/agents/+/diagnoses"

    def all_heartbeats(self) -> str:
        return f"{self.root}/agents/+/heartbeat"

    def agent_of(self, topic: str) -> str | None:
        """The agent id of a ``{root}/agents/{agent}/...`` topic, None for any other topic."""
        prefix = f"{self.root}/agents/"
        if not topic.startswith(prefix):
            return None
        agent = topic[len(prefix) :].split("/", 1)[0]
        return agent if _NAME.fullmatch(agent) else None

    def _agent(self, agent_id: str, leaf: str) -> str:
        return f"{self.root}/agents/{check_name('agent id', agent_id)}/{leaf}"
