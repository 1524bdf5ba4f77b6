"""When the retained messages have all arrived: no new topic for a while, bounded.

The messages reach the reader through its connection's real routing table, "during" the
waits of a fake clock, so the test says what arrived when without timing anything.
"""

from __future__ import annotations

from collections.abc import Sequence

from faultfleet.wire.messages import AgentHeartbeat
from faultfleet.wire.settings import BrokerSettings
from faultfleet.wire.topics import Topics
from faultfleet_apps.fleet_status.reader import QUIET_S, FleetReader
from faultfleet_apps.fleet_status.view import FleetView
from tests.clocks import FakeClock, Wait

TOPICS = Topics()


def reader_hearing(arrivals: Sequence[Sequence[str]]) -> tuple[FleetReader, FakeClock]:
    """A reader (never connected) whose ``n``-th wait brings the heartbeats of ``arrivals[n]``."""

    def deliver(wait: Wait) -> None:
        index = len(clock.waits) - 1
        for agent in arrivals[index] if index < len(arrivals) else ():
            payload = AgentHeartbeat(agent_id=agent, timestamp=clock.time()).model_dump_json()
            reader.connection.dispatcher.dispatch(TOPICS.heartbeat(agent), payload.encode())

    clock = FakeClock(on_wait=deliver)
    reader = FleetReader(BrokerSettings(), FleetView(TOPICS), clock=clock)
    return reader, clock


def test_settles_once_a_wait_brings_no_new_topic() -> None:
    # Prepare: new agents in the first two waits; the third only repeats one already heard
    reader, clock = reader_hearing([["m01", "m02"], ["m03"], ["m01"], ["m04"]])

    # Execute
    reader.settle(timeout_s=30.0)

    # Assert
    assert clock.timeouts == [QUIET_S] * 3
    snapshot = reader.view.snapshot(now=clock.time(), broker=reader.broker)
    assert [row["agent_id"] for row in snapshot["agents"]] == ["m01", "m02", "m03"]


def test_a_fleet_that_never_falls_quiet_is_read_until_the_timeout() -> None:
    # Prepare: a new agent in every wait
    reader, clock = reader_hearing([[f"m{i:03d}"] for i in range(100)])

    # Execute
    reader.settle(timeout_s=2.0, quiet_s=0.5)

    # Assert
    assert clock.timeouts == [0.5] * 4
    assert clock.monotonic() == 2.0
