"""The coordinator service: federated rounds over MQTT, cluster models back as ONNX.

:class:`CoordinatorService` wires the adapters (MQTT connection, agent presence, journal,
metrics, model publisher) to the core (:class:`~coordinator.engine.RoundEngine` and a
strategy) and runs the loop:

1. wait until ``run.min_agents`` agents that can train are online; they are the federation
   (after a restart: the federation saved in the state);
2. per round: let agents join and leave the federation (strategies that allow it,
   :mod:`coordinator.membership`), fix the available agents, run the round through
   :class:`MqttFleet`, save the
   whole state (atomically) to ``state_dir``, update the metrics; evaluate every
   ``eval_every`` rounds; export and publish the cluster models every ``publish_every``
   rounds and after the last;
3. keep serving (presence, metrics, retained models) until stopped.

A round that misses its quorum is rolled back and tried again after ``retry_wait_s``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import TypeAdapter

from coordinator.engine import EvaluationReport, RoundEngine, RoundReport
from coordinator.journal import RoundJournal
from coordinator.membership import MembershipSync
from coordinator.metrics import CoordinatorMetrics
from coordinator.mqtt_fleet import MqttFleet
from coordinator.presence import AgentRegistry
from coordinator.publisher import ModelPublisher, cluster_id
from coordinator.round_tasks import QuorumError, RoundAbortedError
from coordinator.run_summary import RunSummary
from coordinator.settings import CoordinatorSettings, RunSettings
from coordinator.state import has_state, load_state, save_state
from coordinator.strategies.registry import make_strategy
from faultfleet.files import atomic_write
from faultfleet.models.weights import parameter_count
from faultfleet.models.zoo import build_model
from faultfleet.scoring import mean_client_accuracy
from faultfleet.simulation.runner import model_factory
from faultfleet.tasks import Split
from faultfleet.wire.codec import RejectReason, WireError, parse_envelope
from faultfleet.wire.messages import AgentStatus, CoordinatorStatus, ModelSpec
from faultfleet.wire.mqtt import MqttConnection, Will
from faultfleet.wire.topics import Topics

logger = logging.getLogger(__name__)

_STATUS = TypeAdapter(AgentStatus)
CLIENT_ID = "faultfleet-coordinator"


class ServiceError(RuntimeError):
    """The service cannot start or continue (bad state directory, incompatible state)."""


@dataclass(frozen=True)
class _Live:
    """The parts of a run that exist once the service is set up."""

    engine: RoundEngine
    fleet: MqttFleet
    publisher: ModelPublisher
    summary: RunSummary


def _identity(run: RunSettings) -> dict[str, Any]:
    """Settings a resumed run must share with the saved one."""
    return {
        "strategy": run.strategy,
        "model": run.model,
        "seed": run.seed,
        "sample_shape": list(run.sample_shape),
        "class_names": list(run.class_names),
    }


class CoordinatorService:
    """One coordinator process.

    Parameters
    ----------
    settings : CoordinatorSettings
    metrics : CoordinatorMetrics, optional
        A fresh registry by default.
    clock : callable
        Unix time in seconds.
    """

    def __init__(
        self,
        settings: CoordinatorSettings,
        metrics: CoordinatorMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.metrics = metrics or CoordinatorMetrics()
        self.clock = clock
        self.topics = Topics(settings.broker.topic_root)
        run = settings.run
        self.spec = ModelSpec(
            name=run.model, sample_shape=run.sample_shape, n_classes=len(run.class_names)
        )
        template = build_model(run.model, run.sample_shape, len(run.class_names))
        self.n_params = parameter_count(template)
        self.state_dir = settings.state_dir
        self.engine_dir = self.state_dir / "engine"
        self.fleet: MqttFleet | None = None
        self.engine: RoundEngine | None = None
        self.publisher: ModelPublisher | None = None
        self.summary: RunSummary | None = None
        self._chosen_keys: dict[str, str] = {}
        self.registry = AgentRegistry(on_offline=self._agent_offline)
        self._membership = MembershipSync(self.registry, self.metrics)
        will = CoordinatorStatus(state="offline").model_dump_json().encode()
        self.connection = MqttConnection(
            client_id=CLIENT_ID,
            settings=settings.broker,
            will=Will(self.topics.coordinator_status(), will),
            persistent_session=True,
            on_connection_change=self._connection_changed,
            on_oversized=self._on_oversized,
        )
        self.connection.route(self.topics.all_agent_status(), self._on_status)

    # -- adapters' callbacks ---------------------------------------------------------------

    def _connection_changed(self, connected: bool) -> None:
        self.metrics.broker_connected.set(1 if connected else 0)
        if connected:
            self._publish_status("online")

    def _on_status(self, topic: str, payload: bytes) -> None:
        if not payload:
            return
        try:
            status = parse_envelope(_STATUS, payload)
        except WireError as error:
            logger.warning("ignoring status on %s: %s", topic, error)
            return
        if self.topics.agent_of(topic) != status.agent_id:
            logger.warning("ignoring status of %s published on %s", status.agent_id, topic)
            return
        self.registry.update(status)
        self.metrics.set_agents(
            online=len(self.registry.online()), registered=len(self.registry.all())
        )

    def _on_oversized(self, topic: str, size_bytes: int) -> None:
        # The connection drops a message above broker.max_payload_bytes before any handler
        # sees it; an agent's result dropped that way is a rejected update all the same.
        agent = self.topics.agent_of(topic)
        if agent is not None and topic == self.topics.results(agent):
            self.metrics.reject(RejectReason.OVERSIZED)

    def _agent_offline(self, agent_id: str) -> None:
        if self.fleet is not None:
            self.fleet.agent_offline(agent_id)

    def _status(self, state: str) -> bytes:
        summary = self.summary
        status = CoordinatorStatus(
            state="online" if state == "online" else "offline",
            run_id=summary.run_id if summary else "",
            server_round=summary.server_round if summary else 0,
            strategy=self.settings.run.strategy,
            timestamp=self.clock(),
        )
        return status.model_dump_json().encode()

    def _publish_status(self, state: str) -> None:
        self.connection.publish(self.topics.coordinator_status(), self._status(state), retain=True)

    # -- the loop --------------------------------------------------------------------------

    def run(self, stop: threading.Event, *, exit_when_done: bool = False) -> RunSummary | None:
        """Serve until ``stop`` is set (or, with ``exit_when_done``, until the last round)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.connection.start()
        try:
            if not self._setup(stop):
                return self.summary
            self._train(stop)
            if self.summary is not None and self.summary.finished and not exit_when_done:
                logger.info("training finished; serving models until stopped")
                stop.wait()
            return self.summary
        finally:
            self.connection.stop(
                final=[(self.topics.coordinator_status(), self._status("offline"), True)]
            )

    def _setup(self, stop: threading.Event) -> bool:
        run = self.settings.run
        saved: dict[str, Any] | None = None
        if has_state(self.engine_dir):
            state = load_state(self.engine_dir)
            service = state.meta.get("service")
            if not isinstance(service, dict):
                raise ServiceError(
                    f"{self.engine_dir} holds a checkpoint of another program (no service "
                    "section); point state_dir at an empty folder"
                )
            self._check_compatible(service)
            run_id, clients = str(service["run_id"]), list(service["clients"])
            saved = service
        else:
            waited = self._wait_for_agents(stop)
            if waited is None:
                return False
            clients = waited
            run_id = uuid.uuid4().hex[:12]
        self.fleet = MqttFleet(
            self.connection,
            self.topics,
            self.registry,
            clients,
            run_id=run_id,
            model=self.spec,
            n_params=self.n_params,
            encoding=self.settings.wire,
            deadline_s=run.round_deadline_s,
            min_quorum=run.min_quorum,
            journal=RoundJournal(self.state_dir / "journal"),
            metrics=self.metrics,
            max_payload_bytes=self.settings.broker.max_payload_bytes,
            clock=self.clock,
        )
        strategy = make_strategy(run.strategy, fraction=run.fraction, options=run.strategy_options)
        factory = model_factory(run.model, run.sample_shape, len(run.class_names), run.seed)
        self.engine = RoundEngine(
            strategy,
            self.fleet,
            model_factory=factory,
            train_config=self.settings.train.config(),
            seed=run.seed,
        )
        self.publisher = ModelPublisher(
            self.connection, self.topics, self.spec, run.class_names, run_id, clock=self.clock
        )
        if saved is None:
            self.summary = RunSummary(
                run_id=run_id, strategy=run.strategy, rounds=run.rounds, agents=clients
            )
        else:
            self.engine.restore(state)
            self.summary = RunSummary(**saved["summary"])
            self.publisher.published_clusters = set(saved.get("published", []))
            logger.info("resumed run %s at round %d", run_id, self.engine.server_round)
        self.metrics.federation_agents.set(len(self.summary.agents))
        self._publish_status("online")
        return True

    def _parts(self) -> _Live:
        if (
            self.engine is None
            or self.fleet is None
            or self.publisher is None
            or self.summary is None
        ):
            raise RuntimeError("the coordinator service is not set up yet; call run()")
        return _Live(self.engine, self.fleet, self.publisher, self.summary)

    def _check_compatible(self, service: dict[str, Any]) -> None:
        run = self.settings.run
        saved = service.get("run", {})
        now = _identity(run)
        different = sorted(k for k, v in now.items() if saved.get(k) != v)
        if different:
            raise ServiceError(
                f"{self.state_dir} holds a run with other {', '.join(different)} "
                f"({', '.join(f'{k}={saved.get(k)!r}' for k in different)}); restore those "
                "settings to resume it, or point state_dir at an empty folder to start anew"
            )

    def _wait_for_agents(self, stop: threading.Event) -> list[str] | None:
        wanted = self.settings.run.min_agents
        last_log = 0.0
        while not stop.is_set():
            online = self.registry.online_trainers()
            if len(online) >= wanted:
                logger.info("%d agents online; starting the run", len(online))
                return online
            if time.monotonic() - last_log > 10:
                logger.info("waiting for agents: %d of %d online", len(online), wanted)
                last_log = time.monotonic()
            self.registry.wait_for(lambda: len(self.registry.online_trainers()) >= wanted, 1.0)
        return None

    def _train(self, stop: threading.Event) -> None:
        live = self._parts()
        run = self.settings.run

        def abort_on_stop() -> None:
            stop.wait()
            live.fleet.abort()

        threading.Thread(target=abort_on_stop, name="stop-watcher", daemon=True).start()
        replay = True
        while live.engine.server_round < run.rounds and not stop.is_set():
            server_round = live.engine.server_round + 1
            if not (replay and live.fleet.journal.replay_available(server_round)):
                self._sync_membership(live)
            if not live.fleet.begin_round(server_round, replay=replay):
                logger.warning(
                    "round %d: no agent of the federation is online; waiting", server_round
                )
                self.registry.wait_for(
                    lambda: (
                        bool(live.fleet.online_clients())
                        or stop.is_set()
                        or self._membership.has_newcomers(live.engine, live.summary.agents)
                    ),
                    max(1.0, run.retry_wait_s),
                )
                continue
            replay = False
            snapshot = live.engine.state()
            started = time.monotonic()
            try:
                report = live.engine.run_round()
                self._after_round(live, report, time.monotonic() - started)
            except QuorumError as error:
                logger.warning("%s; trying the round again in %g s", error, run.retry_wait_s)
                live.engine.restore(snapshot)
                live.summary.rounds_retried += 1
                stop.wait(run.retry_wait_s)
                continue
            except RoundAbortedError:
                live.engine.restore(snapshot)
                logger.info("stopped during round %d; its accepted updates are kept", server_round)
                break
        live.summary.finished = live.engine.server_round >= run.rounds
        self._write_summary()

    def _sync_membership(self, live: _Live) -> None:
        """Between rounds: agents that came online join, retired agents leave (if they may)."""
        after = self._membership.apply(live.engine, live.fleet, live.summary.agents)
        if after is live.summary.agents:
            return
        left = set(live.summary.agents) - set(after)
        live.summary.agents = after
        for agent in left:
            live.summary.accuracy_by_agent.pop(agent, None)
            # A retained assignment would greet the agent if it ever came back.
            self.connection.publish(self.topics.assignment(agent), b"", retain=True)
        # Saved at once, so that a round interrupted from here on replays with these members.
        self._checkpoint(live)

    def _after_round(self, live: _Live, report: RoundReport, duration_s: float) -> None:
        run = self.settings.run
        server_round = report.server_round
        self.metrics.observe_round(duration_s, server_round)
        last = server_round >= run.rounds
        live.summary.server_round = server_round
        if server_round % run.eval_every == 0 or last:
            self._evaluate(live)
        self._update_clusters(live)
        if server_round % run.publish_every == 0 or last:
            self._publish(live, server_round)
        self._checkpoint(live)
        live.fleet.end_round()
        self._publish_status("online")
        logger.info(
            "round %d/%d: %d of %d answered, %d cluster(s), %.1f s",
            server_round,
            run.rounds,
            len(report.answered),
            len(report.sampled),
            len(live.summary.clusters),
            duration_s,
        )

    def _serving(self, live: _Live) -> dict[str, str]:
        """Agent → model key that serves it (IFCA: the candidate it chose when evaluated).

        An agent whose model was never trained (a FAACL newcomer) is left out: it keeps
        the model it had, if any, until its cluster's first update.
        """
        serving: dict[str, str] = {}
        for agent in live.summary.agents:
            if not live.engine.strategy.model_ready(agent):
                continue
            candidates = live.engine.strategy.predict_models(agent)
            chosen = self._chosen_keys.get(agent, candidates[0])
            serving[agent] = chosen if chosen in candidates else candidates[0]
        return serving

    def _evaluate(self, live: _Live) -> None:
        report: EvaluationReport = live.engine.evaluate(Split.TEST, live.fleet.online_clients())
        self._chosen_keys = {r.client_id: r.model_key for r in report.results}
        live.summary.accuracy_by_agent = report.accuracy_by_client()
        live.summary.accuracy = None if not report.results else report.accuracy

    def _update_clusters(self, live: _Live) -> None:
        clusters: dict[str, list[str]] = {}
        for agent, key in sorted(self._serving(live).items()):
            clusters.setdefault(cluster_id(key), []).append(agent)
        live.summary.clusters = clusters
        accuracy = live.summary.accuracy_by_agent
        by_cluster = {}
        for cid, members in clusters.items():
            known = [accuracy[a] for a in members if a in accuracy]
            if known:
                by_cluster[cid] = mean_client_accuracy(known)
        live.summary.accuracy_by_cluster = by_cluster
        self.metrics.set_clusters({cid: len(m) for cid, m in clusters.items()})
        self.metrics.set_cluster_accuracy(by_cluster)

    def _publish(self, live: _Live, server_round: int) -> None:
        version = live.summary.model_version + 1
        publication = live.publisher.publish(
            version, server_round, live.engine.strategy.models, self._serving(live)
        )
        live.summary.model_version = version
        self.metrics.models_published.inc(len(publication.clusters))
        self.metrics.payload_sent_bytes.inc(publication.bytes_sent)

    def _checkpoint(self, live: _Live) -> None:
        state = live.engine.state()
        run = self.settings.run
        state.meta["service"] = {
            "run_id": live.summary.run_id,
            "clients": live.summary.agents,
            "run": _identity(run),
            "summary": asdict(live.summary),
            "published": sorted(live.publisher.published_clusters),
        }
        save_state(self.engine_dir, state)
        self._write_summary()

    def _write_summary(self) -> None:
        if self.summary is None:
            return
        text = json.dumps(asdict(self.summary), indent=2, sort_keys=True).encode()
        atomic_write(self.state_dir / "summary.json", lambda f: f.write(text))
