"""Tests of the agent registry built from retained status messages."""

from __future__ import annotations

import threading

from hypothesis import given
from hypothesis import strategies as st

from coordinator.adapters.presence import AgentRegistry
from faultfleet.wire.messages import AgentStatus


def online(agent_id: str, *, can_train: bool = True, samples: int = 100) -> AgentStatus:
    return AgentStatus(
        agent_id=agent_id,
        state="online",
        can_train=can_train,
        num_train_samples=samples,
        device="cpu",
    )


def offline(agent_id: str) -> AgentStatus:
    """The last will the broker publishes: nothing but the id and the state."""
    return AgentStatus(agent_id=agent_id, state="offline")


class OfflineLog:
    """Records the on_offline calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, agent_id: str) -> None:
        self.calls.append(agent_id)


def test_an_empty_registry() -> None:
    registry = AgentRegistry()

    assert registry.all() == registry.online() == registry.trainers() == []
    assert registry.online_trainers() == []


def test_online_agents_are_listed_sorted() -> None:
    registry = AgentRegistry()

    for agent in ("m07", "m01", "m03"):
        registry.update(online(agent))

    assert registry.online() == ["m01", "m03", "m07"]
    assert registry.all() == ["m01", "m03", "m07"]
    assert registry.online_trainers() == ["m01", "m03", "m07"]


def test_agents_without_data_are_online_but_not_trainers() -> None:
    registry = AgentRegistry()

    registry.update(online("m01"))
    registry.update(online("viewer", can_train=False, samples=0))

    assert registry.online() == ["m01", "viewer"]
    assert registry.trainers() == ["m01"]
    assert registry.online_trainers() == ["m01"]


def test_an_offline_agent_stays_a_trainer_but_is_not_online() -> None:
    registry = AgentRegistry()
    registry.update(online("m01", samples=42))
    registry.update(online("m02"))

    registry.update(offline("m01"))

    assert registry.online() == ["m02"]
    assert registry.trainers() == ["m01", "m02"]
    assert registry.online_trainers() == ["m02"]
    assert registry.all() == ["m01", "m02"]


def test_known_agents_are_registered_offline_as_trainers() -> None:
    registry = AgentRegistry(known=["m02", "m01"])

    assert registry.all() == ["m01", "m02"]
    assert registry.trainers() == ["m01", "m02"]
    assert registry.online() == []
    assert registry.online_trainers() == []


def test_a_known_agent_comes_online_with_its_status() -> None:
    registry = AgentRegistry(known=["m01", "m02"])

    registry.update(online("m02", can_train=False))

    assert registry.online() == ["m02"]
    assert registry.trainers() == ["m01"]


def test_an_unknown_agent_first_seen_offline_is_no_trainer() -> None:
    log = OfflineLog()
    registry = AgentRegistry(on_offline=log)

    registry.update(offline("ghost"))

    assert registry.all() == ["ghost"]
    assert registry.trainers() == []
    assert log.calls == []


def test_on_offline_fires_only_on_an_online_to_offline_transition() -> None:
    log = OfflineLog()
    registry = AgentRegistry(known=["m01"], on_offline=log)

    registry.update(offline("m01"))  # known, never seen online: retained will at start-up
    registry.update(online("m01"))
    registry.update(online("m01"))  # a repeated online status is no transition
    registry.update(offline("m01"))
    registry.update(offline("m01"))  # already offline
    registry.update(online("m02"))
    registry.update(offline("m02"))

    assert log.calls == ["m01", "m02"]


def test_on_offline_may_read_the_registry() -> None:
    seen: list[list[str]] = []
    registry: AgentRegistry

    def on_offline(agent_id: str) -> None:
        seen.append(registry.online())

    registry = AgentRegistry(on_offline=on_offline)
    registry.update(online("m01"))
    registry.update(online("m02"))

    registry.update(offline("m01"))

    assert seen == [["m02"]]


def test_wait_for_returns_at_once_when_the_predicate_holds() -> None:
    registry = AgentRegistry()
    registry.update(online("m01"))

    assert registry.wait_for(lambda: "m01" in registry.online(), timeout_s=0.0)


def test_wait_for_times_out_when_nothing_changes() -> None:
    registry = AgentRegistry()

    assert not registry.wait_for(lambda: len(registry.online()) >= 1, timeout_s=0.05)


def test_wait_for_wakes_on_an_update_from_another_thread() -> None:
    registry = AgentRegistry()
    waiting = threading.Event()

    def predicate() -> bool:
        waiting.set()
        return len(registry.online_trainers()) >= 2

    def publish() -> None:
        waiting.wait(5.0)
        registry.update(online("m01"))
        registry.update(online("m02"))

    sender = threading.Thread(target=publish)
    sender.start()
    try:
        reached = registry.wait_for(predicate, timeout_s=60.0)
    finally:
        sender.join(60.0)

    assert reached
    assert registry.online_trainers() == ["m01", "m02"]


def test_a_retired_agent_is_offline_and_listed_until_it_comes_back() -> None:
    # Prepare
    gone = OfflineLog()
    registry = AgentRegistry(on_offline=gone)
    registry.update(online("m01"))
    registry.update(online("m02"))

    # Execute: m01 stops cleanly, then is retired; m02 only goes offline
    registry.update(offline("m01"))
    registry.update(AgentStatus(agent_id="m01", state="retired"))
    registry.update(offline("m02"))
    retired_then = registry.retired()
    registry.update(online("m01"))

    # Assert
    assert retired_then == ["m01"]
    assert registry.retired() == []
    assert registry.online_trainers() == ["m01"]
    assert gone.calls == ["m01", "m02"]


def test_every_online_status_but_a_new_models_is_reported_online() -> None:
    # Prepare
    reported = OfflineLog()
    registry = AgentRegistry(on_online=reported)

    # Execute: first status; the same again (a reconnection, or the retained status
    # delivered anew); the status after loading model 3; offline; online again
    registry.update(online("m01"))
    registry.update(online("m01"))
    registry.update(online("m01").model_copy(update={"model_version": 3}))
    registry.update(offline("m01"))
    registry.update(online("m01").model_copy(update={"model_version": 3}))

    # Assert: the first status and both reconnections, not the model announcement
    assert reported.calls == ["m01", "m01", "m01"]


def test_declared_samples_come_from_the_last_online_status() -> None:
    registry = AgentRegistry(known=["old"])
    registry.update(online("a", samples=250))
    registry.update(offline("a"))

    assert registry.declared_samples("a") == 250  # kept while offline
    assert registry.declared_samples("old") == 0  # not heard from since a restart
    assert registry.declared_samples("nobody") == 0


_STATUS = st.tuples(
    st.sampled_from(["m01", "m02", "m03"]),
    st.sampled_from(["online", "offline", "retired"]),
    st.booleans(),
)


@given(statuses=st.lists(_STATUS, max_size=30), known=st.sets(st.sampled_from(["m01", "m04"])))
def test_the_kept_counts_are_the_lengths_of_the_lists_after_any_statuses(
    statuses: list[tuple[str, str, bool]], known: set[str]
) -> None:
    # Prepare: a registry with some agents known from before a restart
    registry = AgentRegistry(known=sorted(known))
    counts: list[tuple[int, ...]] = []
    lengths: list[tuple[int, ...]] = []

    # Execute: any sequence of statuses, an agent coming online with or without data,
    # dropping, retiring, announcing itself twice
    for agent, state, can_train in statuses:
        if state == "online":
            registry.update(online(agent, can_train=can_train, samples=int(can_train)))
        else:
            registry.update(AgentStatus(agent_id=agent, state=state))  # type: ignore[arg-type]
        kept = registry.counts()
        counts.append((kept.online_trainers, kept.online, kept.registered, kept.retired))
        lengths.append(
            (
                len(registry.online_trainers()),
                len(registry.online()),
                len(registry.all()),
                len(registry.retired()),
            )
        )

    # Assert: the kept counts never differ from the lists they stand for
    assert counts == lengths
