"""The rounds of a campaign, once the service has set the run up.

:class:`RoundLoop` runs rounds from the engine's current one to the campaign's last
(``end_round``, :mod:`coordinator.runtime.campaigns`). Per round: let placed agents join
the federation and retired ones leave (:mod:`coordinator.runtime.membership`,
:mod:`coordinator.runtime.newcomers`), fix the available agents, run the round through the
:class:`~coordinator.adapters.mqtt_fleet.MqttFleet`, save the whole state (atomically,
:mod:`coordinator.runtime.checkpoint`), update the metrics; evaluate every ``eval_every`` rounds;
export and publish the cluster models every ``publish_every`` rounds and after the
campaign's last (:mod:`coordinator.runtime.serving`); judge the clustering without ground
truth (:mod:`coordinator.runtime.quality_watch`); count the updates the averaging clipped
and, with differential privacy, write the privacy spent to the summary.

A round that misses its quorum is rolled back and tried again after ``retry_wait_s``; a
round interrupted by a stop is rolled back and left to the journal, so that a restarted
service replays it. Before each round the loop calls :attr:`RoundHooks.between_rounds`
(the campaign runner serves newcomers and reads the operators' requests there); a False
answer ends the campaign before that round, and :meth:`RoundLoop.publish_last` publishes
the last round's models if that round did not.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.adapters.mqtt_fleet import MqttFleet
from coordinator.adapters.presence import AgentRegistry
from coordinator.adapters.publisher import ModelPublisher
from coordinator.adapters.round_tasks import QuorumError, RoundAbortedError
from coordinator.engine.rounds import RoundEngine, RoundReport
from coordinator.runtime.checkpoint import ServiceCheckpoint
from coordinator.runtime.membership import MembershipSync
from coordinator.runtime.newcomers import Newcomers
from coordinator.runtime.promotion import ModelPromotion
from coordinator.runtime.quality_watch import QualityWatch
from coordinator.runtime.run_summary import RunSummary
from coordinator.runtime.serving import ModelServing
from coordinator.runtime.settings import RunSettings
from coordinator.strategies.privacy import privacy_report, sampling_rate
from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.topics import Topics

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveRun:
    """The parts of a run that exist once the service is set up."""

    engine: RoundEngine
    fleet: MqttFleet
    publisher: ModelPublisher
    summary: RunSummary
    promotion: ModelPromotion
    newcomers: Newcomers


def _go_on() -> bool:
    return True


def _nothing() -> None:
    return None


@dataclass
class RoundHooks:
    """What the campaign runner does around the rounds of a campaign.

    Attributes
    ----------
    between_rounds : callable
        Called before every round (and every retry); False ends the campaign before it.
    after_round : callable
        Called after a round's models were handled, before its checkpoint and status.
    """

    between_rounds: Callable[[], bool] = field(default=_go_on)
    after_round: Callable[[], None] = field(default=_nothing)


class RoundLoop:
    """Runs the rounds of a set-up run, one campaign at a time, until its last or a stop.

    Parameters
    ----------
    live : LiveRun
    run : RunSettings
    registry : AgentRegistry
        Presence of the agents: the loop waits on it when no member is online.
    membership : MembershipSync
    checkpoint : ServiceCheckpoint
    metrics : CoordinatorMetrics
    connection : MqttConnection
    topics : Topics
    publish_status : callable
        Publishes the coordinator's retained status (called with ``"online"``).
    """

    def __init__(
        self,
        live: LiveRun,
        run: RunSettings,
        *,
        registry: AgentRegistry,
        membership: MembershipSync,
        checkpoint: ServiceCheckpoint,
        metrics: CoordinatorMetrics,
        connection: MqttConnection,
        topics: Topics,
        publish_status: Callable[[str], None],
    ) -> None:
        self.live = live
        self.run = run
        self.registry = registry
        self.membership = membership
        self.checkpoint = checkpoint
        self.metrics = metrics
        self.connection = connection
        self.topics = topics
        self.publish_status = publish_status
        self.quality = QualityWatch(metrics)
        self.serving = ModelServing(live.engine, live.fleet, live.promotion, live.summary, metrics)
        self.end_round = run.rounds
        self.hooks = RoundHooks()
        self._published_round = -1
        self._watching = False
        self._replay = True

    def train(
        self, stop: threading.Event, *, end_round: int, hooks: RoundHooks | None = None
    ) -> bool:
        """Run rounds until ``end_round`` or until ``stop`` is set; write the summary.

        Returns
        -------
        bool
            True when :attr:`RoundHooks.between_rounds` ended the campaign early.
        """
        live = self.live
        run = self.run
        self.end_round = end_round
        self.hooks = hooks or RoundHooks()
        self._watch(stop)
        ended_early = False
        while live.engine.server_round < end_round and not stop.is_set():
            if not self.hooks.between_rounds():
                ended_early = True
                break
            replay = self._replay
            server_round = live.engine.server_round + 1
            if not (replay and live.fleet.journal.replay_available(server_round)):
                self._sync_membership()
            if not live.fleet.begin_round(server_round, replay=replay):
                logger.warning(
                    "round %d: no agent of the federation is online; waiting", server_round
                )
                self.registry.wait_for(
                    lambda: (
                        bool(live.fleet.online_clients())
                        or stop.is_set()
                        or self.membership.has_newcomers(
                            live.summary.agents, live.newcomers.joins()
                        )
                    ),
                    max(1.0, run.retry_wait_s),
                )
                continue
            self._replay = False
            snapshot = live.engine.state()
            started = time.monotonic()
            try:
                report = live.engine.run_round()
                self._after_round(report, time.monotonic() - started)
            except QuorumError as error:
                logger.warning("%s; trying the round again in %g s", error, run.retry_wait_s)
                live.engine.restore(snapshot)
                live.summary.rounds_retried += 1
                self.metrics.rounds_without_quorum.inc()
                stop.wait(run.retry_wait_s)
                continue
            except RoundAbortedError:
                live.engine.restore(snapshot)
                logger.info("stopped during round %d; its accepted updates are kept", server_round)
                break
        self.checkpoint.write_summary(live.summary)
        return ended_early

    def _watch(self, stop: threading.Event) -> None:
        """Abort the round in progress once ``stop`` is set (one watcher per loop)."""
        if self._watching:
            return
        self._watching = True
        fleet = self.live.fleet

        def abort_on_stop() -> None:
            stop.wait()
            fleet.abort()

        threading.Thread(target=abort_on_stop, name="stop-watcher", daemon=True).start()

    def publish_last(self) -> None:
        """Evaluate and publish the last round's models if that round did not (a campaign
        ended early); nothing before the first round."""
        server_round = self.live.engine.server_round
        if server_round in (0, self._published_round):
            return
        self.serving.evaluate()
        self.serving.update_clusters()
        self.serving.publish(server_round)
        self._published_round = server_round
        self._save()
        self.publish_status("online")

    def save(self) -> None:
        """Checkpoint the engine with the service's section, then ``summary.json``."""
        self._save()

    def _save(self) -> None:
        self.checkpoint.save(self.live.engine, self.live.summary, self.live.publisher)

    def _sync_membership(self) -> None:
        """Between rounds: placed agents join, members whose data moved them move, retired
        agents leave."""
        live = self.live
        moves = live.newcomers.moves()
        after = self.membership.apply(
            live.engine,
            live.fleet,
            live.summary.agents,
            placed=live.newcomers.joins(),
            moves=moves,
        )
        if after is live.summary.agents:
            if moves:
                live.newcomers.settled(after)
            return
        left = set(live.summary.agents) - set(after)
        live.summary.agents = after
        live.newcomers.settled(after)
        for agent in left:
            live.summary.accuracy_by_agent.pop(agent, None)
            # A retained assignment would greet the agent if it ever came back.
            self.connection.publish(self.topics.assignment(agent), b"", retain=True)
        # Saved at once, so that a round interrupted from here on replays with these members.
        self._save()

    def _account_averaging(self, server_round: int) -> None:
        """Count what the round's averaging clipped; the privacy spent so far, if private."""
        strategy = self.live.engine.strategy
        tally = strategy.averaged_.report
        self.metrics.count_clipped(norm=tally.norm_clipped, weight=tally.weight_capped)
        rate = sampling_rate(
            self.run.fraction, len(self.live.summary.agents), strategy.full_participation
        )
        spent = privacy_report(strategy.averaging.policy, rate, server_round)
        if spent is not None:
            self.live.summary.privacy = spent.to_json()

    def _after_round(self, report: RoundReport, duration_s: float) -> None:
        live = self.live
        run = self.run
        server_round = report.server_round
        self.metrics.observe_round(duration_s, server_round)
        self._account_averaging(server_round)
        last = server_round >= self.end_round
        live.summary.server_round = server_round
        if server_round % run.eval_every == 0 or last:
            self.serving.evaluate()
        self.serving.update_clusters()
        self.quality.observe(live.engine.strategy, server_round, live.summary)
        if server_round % run.publish_every == 0 or last:
            self.serving.publish(server_round, report.train_loss)
            self._published_round = server_round
        self.serving.apply_requests()
        self.hooks.after_round()
        self._save()
        live.fleet.end_round()
        self.publish_status("online")
        logger.info(
            "round %d/%d: %d of %d answered, %d cluster(s), %.1f s",
            server_round,
            self.end_round,
            len(report.answered),
            len(report.sampled),
            len(live.summary.clusters),
            duration_s,
        )
