"""The dispatcher's topic-filter matcher decides as paho's ``topic_matches_sub`` does."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from paho.mqtt.client import topic_matches_sub

from faultfleet.wire.dispatch import topic_matches

_LEVEL = st.sampled_from(["a", "b", "", "$s", "+", "#", "a+", "#b"])
_PATH = st.lists(_LEVEL, min_size=1, max_size=5).map("/".join)


@given(topic_filter=_PATH, topic=_PATH)
def test_any_filter_matches_any_topic_as_paho_decides(topic_filter: str, topic: str) -> None:
    assert topic_matches(topic_filter, topic) == topic_matches_sub(topic_filter, topic)


@pytest.mark.parametrize(
    ("topic_filter", "topic", "expected"),
    [
        ("faultfleet/v1/agents/+/results", "faultfleet/v1/agents/m01/results", True),
        ("faultfleet/v1/agents/+/results", "faultfleet/v1/agents/m01/status", False),
        ("faultfleet/v1/agents/+/results", "faultfleet/v1/agents/results", False),
        ("faultfleet/v1/#", "faultfleet/v1", True),
        ("faultfleet/v1/#", "faultfleet/v2/x", False),
        ("#", "$SYS/broker/uptime", False),
        ("+/broker/uptime", "$SYS/broker/uptime", False),
        ("$SYS/#", "$SYS/broker/uptime", True),
        ("a/#/c", "a/b/c", False),
    ],
)
def test_mqtt_wildcard_rules(topic_filter: str, topic: str, expected: bool) -> None:
    assert topic_matches(topic_filter, topic) is expected
    assert topic_matches_sub(topic_filter, topic) is expected
