"""The coordinator service: federated rounds over MQTT, cluster models back as ONNX.

:class:`CoordinatorService` wires the adapters (MQTT connection, agent presence, journal,
metrics, model publisher) to the core (:class:`~coordinator.engine.rounds.RoundEngine` and a
strategy) and runs the loop:

1. wait until ``run.min_agents`` agents that can train are online; they are the federation
   (after a restart: the federation saved in the state, :mod:`coordinator.runtime.checkpoint`);
2. train in campaigns (:class:`~coordinator.runtime.campaigns.CampaignRunner`): the first at
   the first start (``run.rounds`` rounds), the next ones on a schedule, when the agents
   report enough newly labelled windows, or on an operator's command. A campaign runs its
   rounds (:class:`~coordinator.runtime.round_loop.RoundLoop`): per round, let agents join
   and leave the federation, run the round through :class:`MqttFleet`, save the whole
   state to ``state_dir``, update the metrics; evaluate every ``eval_every`` rounds; export
   and register the cluster models every ``publish_every`` rounds and after the last, and
   publish those the promotion gate passes (:mod:`coordinator.runtime.serving`,
   :mod:`coordinator.runtime.promotion`);
3. between campaigns keep serving (presence, metrics, retained models) until stopped,
   publishing the pins and rollbacks operators ask for (``faultfleet models``);
4. between campaigns at every poll and before every round, place every agent that joined
   (or whose data changed) on the serving cluster model that fits its validation windows
   best and serve it at once (:mod:`coordinator.runtime.newcomers`).

A round that misses its quorum is rolled back and tried again after ``retry_wait_s``.

The MQTT session is persistent (client id ``faultfleet-coordinator``), so the broker queues
answers while the coordinator is away. A broker restart may still lose tasks or answers in
flight: every agent's ``online`` status — which a reconnecting coordinator receives again as
retained messages, and which a reconnecting agent publishes again — sends that agent's
unanswered tasks of the round in flight once more
(:meth:`~coordinator.adapters.mqtt_answers.AnswerCollector.resend`; a retained status only
those that left on an earlier connection), so no round waits out its deadline for them.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

from pydantic import TypeAdapter

from coordinator.adapters.campaign_store import CampaignStore
from coordinator.adapters.journal import RoundJournal
from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.model_registry import ModelRegistry
from coordinator.adapters.mqtt_fleet import MqttFleet
from coordinator.adapters.placement_store import PlacementStore
from coordinator.adapters.presence import AgentRegistry
from coordinator.adapters.publisher import ModelPublisher
from coordinator.engine.rounds import RoundEngine
from coordinator.runtime.campaign_book import CampaignBook, LabelledCounts
from coordinator.runtime.campaigns import CampaignRunner
from coordinator.runtime.checkpoint import SavedRun, ServiceCheckpoint
from coordinator.runtime.ingest_settings import worker_ingest
from coordinator.runtime.membership import MembershipSync
from coordinator.runtime.newcomers import Newcomers
from coordinator.runtime.promotion import ModelPromotion
from coordinator.runtime.round_loop import LiveRun, RoundLoop
from coordinator.runtime.run_summary import RunSummary
from coordinator.runtime.settings import CoordinatorSettings
from coordinator.runtime.signing_key import signing_key
from coordinator.strategies.privacy import check_accountant
from coordinator.strategies.registry import make_strategy
from coordinator.strategies.robust import Averaging
from faultfleet.clock import SYSTEM_CLOCK, Clock
from faultfleet.models.weights import parameter_count
from faultfleet.models.zoo import build_model, model_factory
from faultfleet.wire.campaign_messages import CampaignNote, PlacementNote, PromotionNote
from faultfleet.wire.codec import RejectReason, WireError, parse_envelope
from faultfleet.wire.messages import AgentStatus, CoordinatorStatus, ModelSpec
from faultfleet.wire.mqtt import MqttConnection, Will
from faultfleet.wire.topics import Topics

logger = logging.getLogger(__name__)

_STATUS = TypeAdapter(AgentStatus)
CLIENT_ID = "faultfleet-coordinator"


class CoordinatorService:
    """One coordinator process.

    Parameters
    ----------
    settings : CoordinatorSettings
    metrics : CoordinatorMetrics, optional
        A fresh registry by default.
    clock : callable
        Unix time in seconds.
    round_clock : Clock
        Measures round deadlines and waits for answers (the system clock by default).
    """

    def __init__(
        self,
        settings: CoordinatorSettings,
        metrics: CoordinatorMetrics | None = None,
        clock: Callable[[], float] = time.time,
        round_clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.settings = settings
        self.metrics = metrics or CoordinatorMetrics()
        self.clock = clock
        self.round_clock = round_clock
        self.topics = Topics(settings.broker.topic_root)
        run = settings.run
        self.spec = ModelSpec(
            name=run.model, sample_shape=run.sample_shape, n_classes=len(run.class_names)
        )
        template = build_model(run.model, run.sample_shape, len(run.class_names))
        self.n_params = parameter_count(template)
        self.checkpoint = ServiceCheckpoint(settings.state_dir, run)
        self.state_dir = self.checkpoint.state_dir
        self.engine_dir = self.checkpoint.engine_dir
        self.signer = signing_key(settings.signing.key_file, self.state_dir)
        if settings.aggregation.noise_multiplier > 0:
            check_accountant()
        self.fleet: MqttFleet | None = None
        self.engine: RoundEngine | None = None
        self.publisher: ModelPublisher | None = None
        self.summary: RunSummary | None = None
        self.newcomers: Newcomers | None = None
        self.registry = AgentRegistry(on_offline=self._agent_offline, on_online=self._agent_online)
        self.labelled = LabelledCounts()
        self.campaigns = CampaignBook(
            CampaignStore(self.state_dir / "campaigns"),
            settings.campaigns,
            first_rounds=run.rounds,
            clock=clock,
        )
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
            self.metrics.reject(error.reason)
            logger.warning("ignoring status on %s: %s", topic, error)
            return
        if self.topics.agent_of(topic) != status.agent_id:
            logger.warning("ignoring status of %s published on %s", status.agent_id, topic)
            return
        limit = self.settings.aggregation.max_samples_per_agent
        if status.state == "online" and status.can_train and status.num_train_samples > limit:
            self.metrics.reject(RejectReason.TOO_MANY_SAMPLES)
            logger.warning(
                "agent %s declares %d training windows, above aggregation.max_samples_per_agent "
                "= %d: it is not asked to train (raise the limit if it really holds that much)",
                status.agent_id,
                status.num_train_samples,
                limit,
            )
            status = status.model_copy(update={"can_train": False})
        self.registry.update(status)
        self.labelled.update(status)
        counts = self.registry.counts()
        self.metrics.set_agents(
            online=counts.online, registered=counts.registered, retired=counts.retired
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

    def _agent_online(self, agent_id: str) -> None:
        # After a broker restart the agent's tasks or answers may be lost: ask again. Called
        # from the status handler on the network thread, where the connection tells whether
        # the status is a retained one delivered on this coordinator's subscription.
        if self.fleet is not None:
            self.fleet.resend(agent_id, retained=self.connection.delivering_retained)

    def _status(self, state: str) -> bytes:
        summary = self.summary
        status = CoordinatorStatus(
            state="online" if state == "online" else "offline",
            run_id=summary.run_id if summary else "",
            server_round=summary.server_round if summary else 0,
            strategy=self.settings.run.strategy,
            timestamp=self.clock(),
            campaign=None
            if summary is None or summary.campaign is None
            else CampaignNote.model_validate(summary.campaign),
            recent_promotions=tuple(
                PromotionNote.model_validate(p)
                for p in (summary.recent_promotions if summary else [])
            ),
            placements=tuple(
                PlacementNote.model_validate(p) for p in (summary.placements if summary else [])
            ),
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
            runner = self._runner()
            runner.start()
            runner.serve(stop, exit_when_done=exit_when_done)
            return self.summary
        finally:
            self.connection.stop(
                final=[(self.topics.coordinator_status(), self._status("offline"), True)]
            )
            if self.fleet is not None:
                self.fleet.close()

    def _setup(self, stop: threading.Event) -> bool:
        run = self.settings.run
        saved: SavedRun | None = self.checkpoint.load()
        if saved is not None:
            run_id, clients = saved.run_id, saved.clients
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
            round_clock=self.round_clock,
            ingest=worker_ingest(
                self.settings.ingest, self.connection, self.metrics, self.round_clock
            ),
        ).start()
        strategy = make_strategy(run.strategy, fraction=run.fraction, options=run.strategy_options)
        # The noise of differential privacy comes from the OS's entropy, never from a seed.
        strategy.averaging = Averaging(self.settings.aggregation.policy())
        factory = model_factory(run.model, run.sample_shape, len(run.class_names), run.seed)
        self.engine = RoundEngine(
            strategy,
            self.fleet,
            model_factory=factory,
            train_config=self.settings.train.config(),
            seed=run.seed,
        )
        self.publisher = ModelPublisher(
            self.connection,
            self.topics,
            self.spec,
            run.class_names,
            run_id,
            self.signer,
            clock=self.clock,
        )
        if saved is None:
            self.summary = RunSummary(
                run_id=run_id, strategy=run.strategy, rounds=run.rounds, agents=clients
            )
        else:
            self.engine.restore(saved.state)
            self.summary = RunSummary(**saved.service["summary"])
            self.publisher.published_clusters = set(saved.service.get("published", []))
            logger.info("resumed run %s at round %d", run_id, self.engine.server_round)
        self.metrics.federation_agents.set(len(self.summary.agents))
        self._publish_status("online")
        return True

    def _parts(self) -> LiveRun:
        if (
            self.engine is None
            or self.fleet is None
            or self.publisher is None
            or self.summary is None
        ):
            raise RuntimeError("the coordinator service is not set up yet; call run()")
        promotion = ModelPromotion(
            ModelRegistry(self.state_dir / "models"),
            self.publisher,
            self.fleet,
            self.metrics,
            margin=self.settings.models.promotion_margin,
            keep_versions=self.settings.models.keep_versions,
            clock=self.clock,
        )
        promotion.report_serving()
        newcomers = Newcomers(
            self.engine,
            self.fleet,
            promotion,
            self.registry,
            self.labelled,
            PlacementStore(self.state_dir),
            self.summary,
            margin=self.settings.models.promotion_margin,
            clock=self.clock,
        )
        self.newcomers = newcomers
        return LiveRun(self.engine, self.fleet, self.publisher, self.summary, promotion, newcomers)

    def _wait_for_agents(self, stop: threading.Event) -> list[str] | None:
        wanted = self.settings.run.min_agents
        last_log = 0.0
        while not stop.is_set():
            online = self.registry.online_trainers()
            if len(online) >= wanted:
                logger.info("%d agents online; starting the run", len(online))
                return online
            if time.monotonic() - last_log > 10:
                logger.info(
                    "waiting for agents: %d of %d online%s",
                    len(online),
                    wanted,
                    self._broker_note(),
                )
                last_log = time.monotonic()
            self.registry.wait_for(lambda: self.registry.counts().online_trainers >= wanted, 1.0)
        return None

    def _broker_note(self) -> str:
        """`` (not connected to broker h:p: why)`` while the connection is down, else ``""``."""
        connection = self.connection
        if connection.connected:
            return ""
        failure = connection.connect_failure
        why = f": {failure.kind}, {failure.detail}" if failure is not None else ""
        return f" (not connected to broker {connection.broker_address}{why})"

    def _runner(self) -> CampaignRunner:
        loop = RoundLoop(
            self._parts(),
            self.settings.run,
            registry=self.registry,
            membership=self._membership,
            checkpoint=self.checkpoint,
            metrics=self.metrics,
            connection=self.connection,
            topics=self.topics,
            publish_status=self._publish_status,
        )
        return CampaignRunner(
            loop,
            self.campaigns,
            self.labelled,
            self.settings.run,
            self.metrics,
            poll_s=self.settings.models.request_poll_s,
            publish_status=self._publish_status,
            serve_newcomers=self.serve_newcomers,
            clock=self.round_clock,
        )

    def serve_newcomers(self) -> None:
        """Between campaigns and before every round: place and serve agents that joined
        (:mod:`coordinator.runtime.newcomers`), then report them."""
        if self.newcomers is None or self.summary is None:
            return
        if self.newcomers.serve():
            self.checkpoint.write_summary(self.summary)
            self._publish_status("online")
