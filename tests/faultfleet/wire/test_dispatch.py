"""The paho-free routing table and connection bookkeeping."""

from __future__ import annotations

import logging
import threading

import pytest

from faultfleet.wire.dispatch import ConnectionState, Dispatcher


def _matches(topic_filter: str, topic: str) -> bool:
    # Enough of MQTT's rules for these tests: exact topics and a trailing '#'.
    if topic_filter.endswith("/#"):
        return topic.startswith(topic_filter[:-1])
    return topic_filter == topic


def test_dispatch_calls_every_matching_handler_in_route_order() -> None:
    # Prepare
    calls: list[str] = []
    dispatcher = Dispatcher(matches=_matches, max_payload_bytes=10)
    assert dispatcher.add("a/#", lambda t, p: calls.append(f"wide {t}"))
    assert dispatcher.add("a/b", lambda t, p: calls.append(f"exact {t}"))
    assert not dispatcher.add("a/#", lambda t, p: calls.append(f"wide again {t}"))

    # Execute
    called = dispatcher.dispatch("a/b", b"x")
    uncalled = dispatcher.dispatch("z", b"x")

    # Assert
    assert (called, uncalled) == (3, 0)
    assert calls == ["wide a/b", "exact a/b", "wide again a/b"]
    assert dispatcher.filters() == ["a/#", "a/b"]


def test_remove_drops_one_route_and_says_when_the_filter_is_unused() -> None:
    # Prepare
    calls: list[str] = []

    def first(topic: str, payload: bytes) -> None:
        calls.append(f"first {topic}")

    def second(topic: str, payload: bytes) -> None:
        calls.append(f"second {topic}")

    dispatcher = Dispatcher(matches=_matches, max_payload_bytes=10)
    dispatcher.add("a/#", first)
    dispatcher.add("a/#", second)

    # Execute
    still_used = dispatcher.remove("a/#", first)
    unknown = dispatcher.remove("a/#", first)
    dispatcher.dispatch("a/b", b"x")
    unused = dispatcher.remove("a/#", second)

    # Assert
    assert (still_used, unknown, unused) == (False, False, True)
    assert calls == ["second a/b"]
    assert dispatcher.filters() == []


def test_a_raising_handler_does_not_stop_the_others() -> None:
    # Prepare
    calls: list[bytes] = []
    errors: list[str] = []

    def broken(topic: str, payload: bytes) -> None:
        raise RuntimeError("boom")

    dispatcher = Dispatcher(
        matches=_matches, max_payload_bytes=10, on_handler_error=lambda t, e: errors.append(t)
    )
    dispatcher.add("t", broken)
    dispatcher.add("t", lambda t, p: calls.append(p))

    # Execute
    dispatcher.dispatch("t", b"1")
    dispatcher.dispatch("t", b"2")

    # Assert
    assert calls == [b"1", b"2"]
    assert dispatcher.handler_errors == 2
    assert errors == ["t", "t"]


@pytest.mark.parametrize("reported", [True, False])
def test_a_handler_error_is_logged_here_only_without_a_reporter(
    reported: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: the reporter, when there is one, decides how to log
    errors: list[Exception] = []

    def broken(topic: str, payload: bytes) -> None:
        raise RecursionError("deep")

    dispatcher = Dispatcher(
        matches=_matches,
        max_payload_bytes=10,
        on_handler_error=(lambda t, e: errors.append(e)) if reported else None,
    )
    dispatcher.add("t", broken)

    # Execute
    with caplog.at_level(logging.ERROR, logger="faultfleet.wire.dispatch"):
        for _ in range(3):
            dispatcher.dispatch("t", b"1")

    # Assert
    assert dispatcher.handler_errors == 3
    assert len(errors) == (3 if reported else 0)
    assert len(caplog.records) == (0 if reported else 3)


def test_oversized_message_reaches_no_handler() -> None:
    # Prepare
    calls: list[bytes] = []
    oversized: list[tuple[str, int]] = []
    dispatcher = Dispatcher(
        matches=_matches, max_payload_bytes=4, on_oversized=lambda t, n: oversized.append((t, n))
    )
    dispatcher.add("t", lambda t, p: calls.append(p))

    # Execute
    dispatcher.dispatch("t", b"12345")
    dispatcher.dispatch("t", b"1234")

    # Assert
    assert calls == [b"1234"]
    assert oversized == [("t", 5)]
    assert dispatcher.oversized_messages == 1


def test_empty_topic_filter_is_rejected() -> None:
    dispatcher = Dispatcher(matches=_matches, max_payload_bytes=4)
    with pytest.raises(ValueError, match="topic_filter is empty"):
        dispatcher.add("", lambda t, p: None)


def test_wait_subscribed_needs_connection_and_every_suback() -> None:
    # Prepare
    changes: list[bool] = []
    state = ConnectionState(on_change=changes.append)
    filters = ["a", "b"]

    # Execute / Assert: not connected yet.
    assert not state.wait_subscribed(lambda: filters, 0.01)
    state.set(True)
    state.subscriptions.sent(1, "a")
    state.subscriptions.sent(2, "b")
    assert state.answered(1, refused=False) == "a"
    assert not state.wait_subscribed(lambda: filters, 0.01)
    waiter = threading.Timer(0.05, state.answered, args=(2,), kwargs={"refused": False})
    waiter.start()
    assert state.wait_subscribed(lambda: filters, 30.0)  # a bound no busy machine reaches
    waiter.join()
    state.set(True)  # no change, no report
    assert changes == [True]


def test_a_refused_subscription_ends_the_wait_with_false() -> None:
    state = ConnectionState()
    state.set(True)
    state.subscriptions.sent(7, "secret/#")
    state.answered(7, refused=True)
    assert not state.wait_subscribed(lambda: ["secret/#"], 2.0)
    assert state.subscriptions.refused == {"secret/#"}
