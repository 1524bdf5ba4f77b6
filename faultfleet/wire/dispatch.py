"""The paho-free half of the MQTT adapter: its types, message routing, connection state.

:class:`Dispatcher` decides what happens to an incoming message (size check, routing
table, guarded handlers); :class:`ConnectionState` tracks whether the broker connection
is up and which subscriptions it acknowledged, and lets callers wait for either. The
paho adapter :mod:`faultfleet.wire.mqtt` drives both and passes in the topic-filter
matcher, so paho stays imported in one module only. Import :class:`Will`,
:class:`PublishError` and :data:`Handler` from :mod:`faultfleet.wire.mqtt`.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from faultfleet.errors import FaultfleetError

logger = logging.getLogger(__name__)

Handler = Callable[[str, bytes], None]
"""Receives ``(topic, payload)`` of every message matching its route."""

TopicMatcher = Callable[[str, str], bool]
"""``matches(topic_filter, topic)``: whether an MQTT topic filter matches a topic."""


@functools.lru_cache(maxsize=1024)
def _filter_levels(topic_filter: str) -> tuple[str, ...]:
    return tuple(topic_filter.split("/"))


def topic_matches(topic_filter: str, topic: str) -> bool:
    """Whether ``topic_filter`` matches ``topic`` under MQTT's rules, as paho's
    ``topic_matches_sub`` decides (its tests compare the two on generated filters).

    ``+`` is one whole level, ``#`` as the last level the rest of the topic (none
    included: ``a/#`` matches ``a``); a filter starting with a wildcard matches no topic
    starting with ``$``. paho builds a one-filter trie for each call (about 4 µs); this
    splits each filter once and compares levels, on every message the network thread
    routes.
    """
    levels = _filter_levels(topic_filter)
    parts = topic.split("/")
    if topic[:1] == "$" and levels[0] in ("+", "#"):
        return False
    last = len(levels) - 1
    for index, level in enumerate(levels):
        if level == "#" and index == last:
            return True
        if index >= len(parts) or (level != "+" and level != parts[index]):
            return False
    return len(parts) == len(levels)


@dataclass(frozen=True)
class Will:
    """Message the broker publishes for a client that vanishes without a clean disconnect."""

    topic: str
    payload: bytes
    retain: bool = True
    qos: int = 1


class PublishError(FaultfleetError, RuntimeError):
    """A message could not be queued for sending (the local outgoing queue is full)."""


class Dispatcher:
    """Routing table from MQTT topic filters to handlers.

    A message matching several routes reaches each of their handlers, in the order the
    routes were added. A handler that raises is counted in :attr:`handler_errors` and
    reported to ``on_handler_error``, which then decides how to log it (logged here with
    its traceback when there is none); the remaining handlers and later messages are
    handled as usual.

    Parameters
    ----------
    matches : TopicMatcher
        Topic-filter matcher (MQTT wildcard rules).
    max_payload_bytes : int, bytes
        Larger messages reach no handler; they are counted in :attr:`oversized_messages`
        and reported to ``on_oversized``.
    on_handler_error : callable, optional
        Called with ``(topic, exception)`` when a handler raises; it logs the error.
    on_oversized : callable, optional
        Called with ``(topic, size_bytes)`` for a message above the limit.
    """

    def __init__(
        self,
        *,
        matches: TopicMatcher,
        max_payload_bytes: int,
        on_handler_error: Callable[[str, Exception], None] | None = None,
        on_oversized: Callable[[str, int], None] | None = None,
    ) -> None:
        self.matches = matches
        self.max_payload_bytes = max_payload_bytes
        self.on_handler_error = on_handler_error
        self.on_oversized = on_oversized
        self.handler_errors = 0
        self.oversized_messages = 0
        self._routes: list[tuple[str, Handler]] = []
        self._lock = threading.Lock()

    def add(self, topic_filter: str, handler: Handler) -> bool:
        """Add a route; True when ``topic_filter`` is new (needs a subscription)."""
        if not topic_filter:
            raise ValueError("topic_filter is empty; route a topic such as 'faultfleet/v1/#'")
        with self._lock:
            new = all(existing != topic_filter for existing, _ in self._routes)
            self._routes.append((topic_filter, handler))
        return new

    def remove(self, topic_filter: str, handler: Handler) -> bool:
        """Remove one route; True when no route uses ``topic_filter`` any more (unsubscribe).

        False as well when there was no such route.
        """
        with self._lock:
            if (topic_filter, handler) not in self._routes:
                return False
            self._routes.remove((topic_filter, handler))
            return all(existing != topic_filter for existing, _ in self._routes)

    def filters(self) -> list[str]:
        """The distinct topic filters, in the order they were first routed."""
        with self._lock:
            return list(dict.fromkeys(topic_filter for topic_filter, _ in self._routes))

    def dispatch(self, topic: str, payload: bytes) -> int:
        """Hand a message to every matching handler; returns how many were called."""
        if len(payload) > self.max_payload_bytes:
            self._reject_oversized(topic, len(payload))
            return 0
        with self._lock:
            handlers = [h for f, h in self._routes if self.matches(f, topic)]
        if not handlers:
            logger.debug("no route for a message on %s", topic)
        for handler in handlers:
            self._call(handler, topic, payload)
        return len(handlers)

    def _call(self, handler: Handler, topic: str, payload: bytes) -> None:
        try:
            handler(topic, payload)
        except Exception as error:
            self.handler_errors += 1
            if self.on_handler_error is None:
                logger.exception("handler %r failed on a message to %s", handler, topic)
                return
            try:
                self.on_handler_error(topic, error)  # it logs, counts, rate-limits
            except Exception:
                logger.exception("on_handler_error raised for a message to %s", topic)

    def _reject_oversized(self, topic: str, size: int) -> None:
        self.oversized_messages += 1
        logger.warning(
            "dropped a %d-byte message on %s: above broker.max_payload_bytes=%d",
            size,
            topic,
            self.max_payload_bytes,
        )
        if self.on_oversized is not None:
            try:
                self.on_oversized(topic, size)
            except Exception:
                logger.exception("on_oversized raised for a message to %s", topic)


class SubscriptionLedger:
    """Which topic filters the broker acknowledged (SUBACK) on the current connection.

    Not locked itself: used under :attr:`ConnectionState.lock`.
    """

    def __init__(self) -> None:
        self._pending: dict[int, str] = {}
        self.acked: set[str] = set()
        self.refused: set[str] = set()

    def reset(self) -> None:
        """Forget everything: a new connection starts without subscriptions."""
        self._pending.clear()
        self.acked.clear()
        self.refused.clear()

    def sent(self, message_id: int, topic_filter: str) -> None:
        """A SUBSCRIBE for ``topic_filter`` left with packet id ``message_id``."""
        self._pending[message_id] = topic_filter

    def answered(self, message_id: int, *, refused: bool) -> str | None:
        """Record the broker's SUBACK; returns its topic filter (None if unknown)."""
        topic_filter = self._pending.pop(message_id, None)
        if topic_filter is not None:
            (self.refused if refused else self.acked).add(topic_filter)
        return topic_filter

    def covers(self, topic_filters: list[str]) -> bool:
        """Whether every filter in ``topic_filters`` was acknowledged."""
        return set(topic_filters) <= self.acked


class ConnectionState:
    """Whether the broker connection is up, and what it has subscribed; waitable.

    Parameters
    ----------
    on_change : callable, optional
        Called with the new state (True: connected) after every change, outside the lock.

    Attributes
    ----------
    lock : threading.RLock
        Guards the state; hold it to change connection and subscriptions together.
    subscriptions : SubscriptionLedger
        Subscriptions acknowledged on the current connection.
    """

    def __init__(self, on_change: Callable[[bool], None] | None = None) -> None:
        self.on_change = on_change
        self.lock = threading.RLock()
        self.subscriptions = SubscriptionLedger()
        self._changed = threading.Condition(self.lock)
        self._connected = False

    @property
    def connected(self) -> bool:
        """Whether the broker accepted the connection and it has not been lost since."""
        return self._connected

    def mark(self, connected: bool) -> bool:
        """Set the state with :attr:`lock` held; True when it changed (then :meth:`report`)."""
        with self._changed:
            changed = connected != self._connected
            self._connected = connected
            self._changed.notify_all()
            return changed

    def report(self, connected: bool) -> None:
        """Tell ``on_change`` about a change; call it without holding :attr:`lock`."""
        if self.on_change is not None:
            try:
                self.on_change(connected)
            except Exception:
                logger.exception("on_connection_change(%s) raised", connected)

    def set(self, connected: bool) -> None:
        """:meth:`mark` then, on a change, :meth:`report`."""
        if self.mark(connected):
            self.report(connected)

    def answered(self, message_id: int, *, refused: bool) -> str | None:
        """Record a SUBACK and wake the waiters; returns its topic filter."""
        with self._changed:
            topic_filter = self.subscriptions.answered(message_id, refused=refused)
            self._changed.notify_all()
            return topic_filter

    def wait_connected(self, timeout_s: float) -> bool:
        """Block up to ``timeout_s`` seconds for the connection; True when connected."""
        with self._changed:
            return self._changed.wait_for(lambda: self._connected, timeout_s)

    def wait_subscribed(self, topic_filters: Callable[[], list[str]], timeout_s: float) -> bool:
        """Block until connected with every filter of ``topic_filters()`` acknowledged.

        Returns False after ``timeout_s`` seconds, or at once when one was refused.
        """
        ledger = self.subscriptions

        def settled() -> bool:
            return bool(ledger.refused) or (self._connected and ledger.covers(topic_filters()))

        with self._changed:
            return self._changed.wait_for(settled, timeout_s) and not ledger.refused
