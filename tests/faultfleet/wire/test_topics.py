"""Tests of the topic tree: names under the root, agent ids parsed back, names checked."""

from __future__ import annotations

import pytest

from faultfleet.wire.settings import DEFAULT_TOPIC_ROOT
from faultfleet.wire.topics import Topics, check_name


def test_topic_names_under_the_default_root() -> None:
    topics = Topics()

    assert DEFAULT_TOPIC_ROOT == "faultfleet/v1"
    assert topics.coordinator_status() == "faultfleet/v1/coordinator/status"
    assert topics.agent_status("m07") == "faultfleet/v1/agents/m07/status"
    assert topics.tasks("m07") == "faultfleet/v1/agents/m07/tasks"
    assert topics.results("m07") == "faultfleet/v1/agents/m07/results"
    assert topics.assignment("m07") == "faultfleet/v1/agents/m07/assignment"
    assert topics.diagnoses("m07") == "faultfleet/v1/agents/m07/diagnoses"
    assert topics.heartbeat("m07") == "faultfleet/v1/agents/m07/heartbeat"
    assert topics.cluster_model("cluster-3") == "faultfleet/v1/clusters/cluster-3/model"


def test_subscription_filters_use_single_level_wildcards() -> None:
    topics = Topics("plant-a/ff")

    assert topics.all_agent_status() == "plant-a/ff/agents/+/status"
    assert topics.all_results() == "plant-a/ff/agents/+/results"
    assert topics.all_diagnoses() == "plant-a/ff/agents/+/diagnoses"
    assert topics.all_heartbeats() == "plant-a/ff/agents/+/heartbeat"


def test_a_custom_root_prefixes_every_topic() -> None:
    topics = Topics("plant-a/ff")

    assert topics.coordinator_status() == "plant-a/ff/coordinator/status"
    assert topics.results("gw_1.a") == "plant-a/ff/agents/gw_1.a/results"
    assert topics.cluster_model("global") == "plant-a/ff/clusters/global/model"


@pytest.mark.parametrize(
    ("topic", "agent"),
    [
        ("faultfleet/v1/agents/m07/results", "m07"),
        ("faultfleet/v1/agents/gw-2.line_3/status", "gw-2.line_3"),
        ("faultfleet/v1/agents/m07", "m07"),
    ],
)
def test_agent_of_parses_the_agent_level(topic: str, agent: str) -> None:
    assert Topics().agent_of(topic) == agent


@pytest.mark.parametrize(
    "topic",
    [
        "faultfleet/v1/coordinator/status",
        "faultfleet/v1/clusters/cluster-0/model",
        "faultfleet/v2/agents/m07/results",
        "other/faultfleet/v1/agents/m07/results",
        "faultfleet/v1/agents//results",
        "faultfleet/v1/agents/+/results",
        "faultfleet/v1/agents/m 07/results",
        f"faultfleet/v1/agents/{'a' * 65}/results",
    ],
)
def test_agent_of_is_none_for_other_topics_and_invalid_ids(topic: str) -> None:
    assert Topics().agent_of(topic) is None


def test_agent_of_round_trips_every_agent_topic() -> None:
    topics = Topics("x/y")
    builders = (
        topics.agent_status,
        topics.tasks,
        topics.results,
        topics.assignment,
        topics.diagnoses,
    )

    parsed = {topics.agent_of(build("a.b-c_9")) for build in builders}

    assert parsed == {"a.b-c_9"}


@pytest.mark.parametrize("name", ["m07", "a", "A-Z_a.z-0.9", "x" * 64, "..", "-"])
def test_check_name_returns_valid_names(name: str) -> None:
    assert check_name("agent id", name) == name


@pytest.mark.parametrize(
    "name",
    ["", "+", "#", "m/07", "m07/#", "m+", "a b", "m07\n", "é", "x" * 65, "\0"],
)
def test_check_name_rejects_what_cannot_be_one_topic_level(name: str) -> None:
    with pytest.raises(ValueError, match=r"agent id .* cannot be used in a topic: use 1 to 64"):
        check_name("agent id", name)


@pytest.mark.parametrize("name", ["+", "m/07", "", "c" * 65])
def test_builders_refuse_unusable_agent_and_cluster_ids(name: str) -> None:
    topics = Topics()

    with pytest.raises(ValueError, match="agent id"):
        topics.tasks(name)
    with pytest.raises(ValueError, match="agent id"):
        topics.agent_status(name)
    with pytest.raises(ValueError, match="cluster id"):
        topics.cluster_model(name)
