"""Reading the fleet's retained messages from the broker for ``faultfleet status``.

:class:`FleetReader` logs in (a read-only account is enough: ``status`` in
``deploy/mosquitto/faultfleet.acl``), subscribes to the topics a
:class:`~faultfleet_apps.fleet_status.view.FleetView` reads and feeds it. The broker sends
the retained messages right after acknowledging a subscription, one per topic;
:meth:`FleetReader.settle` waits until no message on a topic not heard before has come for
``quiet_s``, since MQTT marks no end of them (the live heartbeats and diagnoses that keep
coming are on topics already heard). It never publishes anything.
"""

from __future__ import annotations

import os
import secrets
import threading
from types import TracebackType

from faultfleet.clock import SYSTEM_CLOCK, Clock
from faultfleet.errors import UsageError
from faultfleet.wire.mqtt import Handler, MqttConnection
from faultfleet.wire.settings import BrokerSettings
from faultfleet_apps.fleet_status.view import FleetView

QUIET_S = 0.5
"""A retained message arrives within milliseconds of the subscription's acknowledgement;
this long without one means they have all arrived."""


class StatusError(UsageError):
    """The fleet's status could not be read: broker unreachable, login or ACL refused.

    A user error: the broker address, the login or the ACL is the user's to fix.
    """


class FleetReader:
    """A read-only MQTT session that keeps a :class:`FleetView` up to date.

    Parameters
    ----------
    settings : BrokerSettings
        Broker address and the read-only login.
    view : FleetView
    live : bool
        Also follow every agent's diagnoses (``--watch``).
    clock : Clock
    """

    def __init__(
        self,
        settings: BrokerSettings,
        view: FleetView,
        *,
        live: bool = False,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.settings = settings
        self.view = view
        self.clock = clock
        self._topics: set[str] = set()
        self._lock = threading.Lock()
        self._never = threading.Event()
        client_id = f"faultfleet-status-{os.getpid()}-{secrets.token_hex(3)}"
        self.connection = MqttConnection(client_id=client_id, settings=settings)
        for topic_filter, handler in view.routes(live=live).items():
            self.connection.route(topic_filter, self._counting(handler))

    def _counting(self, handler: Handler) -> Handler:
        def handle(topic: str, payload: bytes) -> None:
            handler(topic, payload)
            with self._lock:
                self._topics.add(topic)

        return handle

    @property
    def broker(self) -> str:
        """``host:port`` of the broker."""
        return self.connection.broker_address

    def start(self, timeout_s: float) -> None:
        """Connect and subscribe; :class:`StatusError` when that fails within ``timeout_s``."""
        self.connection.start()
        who = self.settings.username or "an anonymous client"
        if not self.connection.wait_connected(timeout_s):
            failure = self.connection.connect_failure
            why = f": {failure}" if failure is not None else ""
            raise StatusError(
                f"could not connect to the MQTT broker at {self.broker} as {who} within "
                f"{timeout_s:g} s{why}"
            )
        if not self.connection.wait_subscribed(timeout_s):
            raise StatusError(
                f"the broker at {self.broker} did not grant {who} the subscriptions to "
                f"{', '.join(self.connection.dispatcher.filters())} within {timeout_s:g} s; "
                "its ACL must let this account read them (the 'status' account of "
                "deploy/mosquitto/faultfleet.acl does)"
            )

    def settle(self, timeout_s: float, quiet_s: float = QUIET_S) -> None:
        """Return once no new topic was heard for ``quiet_s`` seconds, or after ``timeout_s``."""
        deadline = self.clock.monotonic() + timeout_s
        while True:
            with self._lock:
                heard = len(self._topics)
            self.clock.wait(self._never, quiet_s)
            with self._lock:
                quiet = len(self._topics) == heard
            if quiet or self.clock.monotonic() >= deadline:
                return

    def stop(self) -> None:
        """Disconnect (publishes nothing)."""
        self.connection.stop()

    def __enter__(self) -> FleetReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
