"""deploy/mosquitto with a real Mosquitto: the config loads and the ACL holds agents to their ids.

The broker runs ``deploy/mosquitto/faultfleet.conf`` (its listener lines replaced by the
test broker's own, its file paths pointed at the test's password file and at the real
``faultfleet.acl``), plus ``tls.conf.example`` on a second listener with a throw-away CA.
"Not delivered" is shown without sleeping: each client's messages reach
a subscriber in the order they were sent, so once a permitted message sent *after* a
forbidden one has arrived, the forbidden one would have arrived first had it been delivered.
"""

from __future__ import annotations

import pytest

from faultfleet_apps.brokers.launch import RunningBroker

from .plant_broker import PASSWORDS, ROOT, TIMEOUT_S, Client, Plant, login

pytestmark = pytest.mark.integration  # a real Mosquitto with the plant's configuration


def test_the_plant_config_loads_without_errors(broker: RunningBroker) -> None:
    # Execute
    log = broker.log_tail(200)

    # Assert
    assert broker.running
    assert "Error" not in log
    assert "Config loaded" in log


def test_an_agent_reaches_the_coordinator_with_a_paper_sized_update(broker: RunningBroker) -> None:
    # Prepare
    update = bytes(17_600_000)
    with login(broker, "coordinator") as coordinator, login(broker, "m01") as m01:
        coordinator.subscribe(f"{ROOT}/agents/+/results")

        # Execute
        m01.publish(f"{ROOT}/agents/m01/results", update)
        received = coordinator.messages.get(timeout=TIMEOUT_S)

    # Assert
    assert received.topic == f"{ROOT}/agents/m01/results"
    assert len(received.payload) == len(update)


def test_an_agent_cannot_write_under_another_id_nor_its_own_tasks(broker: RunningBroker) -> None:
    # Prepare
    forbidden = [
        f"{ROOT}/agents/m02/results",
        f"{ROOT}/agents/m02/status",
        f"{ROOT}/agents/m01/tasks",
        f"{ROOT}/agents/m01/assignment",
        f"{ROOT}/clusters/cluster-0/model",
        f"{ROOT}/coordinator/status",
    ]
    sentinel = f"{ROOT}/agents/m01/diagnoses"
    with login(broker, "coordinator") as coordinator, login(broker, "m01") as m01:
        coordinator.subscribe(f"{ROOT}/#")

        # Execute
        for topic in forbidden:
            m01.publish(topic)
        m01.publish(sentinel)
        received = coordinator.topics_until(sentinel)

    # Assert
    assert received == [sentinel]


def test_an_agent_reads_its_tasks_and_the_models_but_not_another_agents_tasks(
    broker: RunningBroker,
) -> None:
    # Prepare
    model = f"{ROOT}/clusters/cluster-7/model"
    with login(broker, "coordinator") as coordinator, login(broker, "m01") as m01:
        coordinator.publish(model, b"onnx", retain=True)
        m01.subscribe(
            f"{ROOT}/agents/m01/tasks", f"{ROOT}/agents/m02/tasks", f"{ROOT}/clusters/+/model"
        )

        # Execute
        coordinator.publish(f"{ROOT}/agents/m02/tasks")
        coordinator.publish(f"{ROOT}/agents/m01/tasks")
        received = m01.topics_until(f"{ROOT}/agents/m01/tasks")
        coordinator.publish(model, b"", retain=True)  # clear the retained model

    # Assert: the retained model arrives on subscribing, then only m01's own task
    assert received == [model, f"{ROOT}/agents/m01/tasks"]


def test_an_agent_reads_its_own_retained_status_but_not_another_agents(
    broker: RunningBroker,
) -> None:
    # Prepare: both statuses retained, as the agents leave them
    own, other = f"{ROOT}/agents/m01/status", f"{ROOT}/agents/m02/status"
    with login(broker, "coordinator") as coordinator:
        coordinator.publish(other, b"online", retain=True)
        coordinator.publish(own, b"online", retain=True)

    # Execute
    with login(broker, "m01") as m01:
        m01.subscribe(other, own)
        received = m01.topics_until(own)
    with login(broker, "coordinator") as coordinator:
        coordinator.publish(other, b"", retain=True)
        coordinator.publish(own, b"", retain=True)

    # Assert
    assert received == [own]


def test_a_wrong_password_is_refused(broker: RunningBroker) -> None:
    # Execute
    with Client(broker, "m01", "not-the-password") as intruder:
        reason = intruder.reason

    # Assert
    assert reason.is_failure
    assert "authori" in str(reason).lower()


def test_an_agent_logs_in_over_tls_with_the_example_listener(plant: Plant) -> None:
    # Prepare
    with login(plant.broker, "coordinator") as coordinator:
        coordinator.subscribe(f"{ROOT}/agents/+/status")

        # Execute
        with Client(plant.broker, "m02", PASSWORDS["m02"], tls=plant) as m02:
            m02.publish(f"{ROOT}/agents/m02/status", b"online")
            received = coordinator.messages.get(timeout=TIMEOUT_S)

    # Assert
    assert not m02.reason.is_failure
    assert (received.topic, received.payload) == (f"{ROOT}/agents/m02/status", b"online")


def test_the_status_account_reads_the_fleet_but_no_task_result_or_model(
    broker: RunningBroker,
) -> None:
    # Prepare
    readable = [
        f"{ROOT}/coordinator/status",
        f"{ROOT}/agents/m01/status",
        f"{ROOT}/agents/m01/heartbeat",
        f"{ROOT}/ingest/ingest-1/status",
        f"{ROOT}/agents/m01/diagnoses",
    ]
    hidden = [
        f"{ROOT}/agents/m01/tasks",
        f"{ROOT}/agents/m01/results",
        f"{ROOT}/agents/m01/assignment",
        f"{ROOT}/clusters/cluster-0/model",
        f"{ROOT}/ingest/plan",
        f"{ROOT}/ingest/ingest-1/summaries",
        f"{ROOT}/ingest/ingest-1/answers/m01",
    ]
    with login(broker, "coordinator") as coordinator, login(broker, "status") as status:
        status.subscribe(f"{ROOT}/#")

        # Execute: everything published in order; the last readable topic ends the wait
        for topic in hidden + readable:
            coordinator.publish(topic)
        received = status.topics_until(readable[-1])

    # Assert
    assert received == readable


def test_the_status_account_writes_nothing(broker: RunningBroker) -> None:
    # Prepare: status tries every topic it may read, and the others
    attempts = [
        f"{ROOT}/coordinator/status",
        f"{ROOT}/agents/m01/status",
        f"{ROOT}/agents/m01/heartbeat",
        f"{ROOT}/agents/m01/diagnoses",
        f"{ROOT}/ingest/ingest-1/status",
        f"{ROOT}/agents/m01/tasks",
        f"{ROOT}/agents/status/results",
        f"{ROOT}/clusters/cluster-0/model",
    ]
    sentinel = f"{ROOT}/agents/m01/heartbeat"
    with (
        login(broker, "coordinator") as coordinator,
        login(broker, "status") as status,
        login(broker, "m01") as m01,
    ):
        coordinator.subscribe(f"{ROOT}/#")

        # Execute
        for topic in attempts:
            status.publish(topic, b"forged")
        m01.publish(sentinel, b"genuine")
        received = coordinator.messages.get(timeout=TIMEOUT_S)

    # Assert: the agent's own heartbeat is the first message the coordinator sees
    assert (received.topic, received.payload) == (sentinel, b"genuine")


def test_an_ingest_worker_shares_the_results_and_writes_only_under_ingest(
    broker: RunningBroker,
) -> None:
    # Prepare: the worker takes results through the shared subscription, as it runs
    results, plan = f"{ROOT}/agents/m01/results", f"{ROOT}/ingest/plan"
    forwarded = f"{ROOT}/ingest/ingest-1/answers/m01"
    summaries = f"{ROOT}/ingest/ingest-1/summaries"
    forged = [
        f"{ROOT}/agents/m01/results",
        f"{ROOT}/agents/ingest/status",
        f"{ROOT}/agents/m01/tasks",
        f"{ROOT}/clusters/cluster-0/model",
        f"{ROOT}/coordinator/status",
        plan,
    ]
    with (
        login(broker, "coordinator") as coordinator,
        login(broker, "ingest") as ingest,
        login(broker, "m01") as m01,
    ):
        ingest.subscribe(f"$share/faultfleet-ingest/{ROOT}/agents/+/results", plan)
        coordinator.publish(plan, b"plan")
        m01.publish(results, b"update")
        taken = {ingest.messages.get(timeout=TIMEOUT_S).topic for _ in range(2)}
        coordinator.subscribe(f"{ROOT}/#")

        # Execute: forged writes first, then the two it may make
        for topic in forged:
            ingest.publish(topic, b"forged")
        ingest.publish(forwarded, b"forwarded")
        ingest.publish(summaries, b"summary")
        received = coordinator.topics_until(summaries)

    # Assert
    assert taken == {results, plan}
    assert received == [forwarded, summaries]
