"""Clocks a test moves by hand (:class:`faultfleet.clock.Clock`), so no test times anything.

* :class:`FakeClock` — for code a test drives from its own thread: every wait returns at
  once, as if its whole timeout passed (time advances by it), unless the waited-on event is
  set; each wait is recorded, and a hook may act "during" it (set a stop event, write a
  file, push samples).
* :class:`ManualClock` — for code running in other threads beside real components (a
  broker, agents): time stands still until the test calls :meth:`ManualClock.advance`,
  and a wait blocks until it is woken or the test moved time past its end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from faultfleet.clock import Waitable

WALL_CLOCK_OFFSET_S = 1_700_000_000.0
"""Unix time of monotonic time 0 on these clocks."""


@dataclass(frozen=True)
class Wait:
    """One wait asked of a clock: on what, for how long (seconds) and when (monotonic)."""

    waitable: Waitable
    timeout_s: float
    at_s: float


class FakeClock:
    """A clock whose waits return at once, advancing time by their timeout.

    Parameters
    ----------
    on_wait : callable, optional
        Called with each :class:`Wait` before it returns, e.g. to set the stop event
        "during" the wait; a set event ends the wait early (time does not advance).
    """

    def __init__(self, on_wait: Callable[[Wait], None] | None = None) -> None:
        self.now_s = 0.0
        self.waits: list[Wait] = []
        self.on_wait = on_wait

    def time(self) -> float:
        """Unix time: :data:`WALL_CLOCK_OFFSET_S` plus the monotonic time."""
        return WALL_CLOCK_OFFSET_S + self.now_s

    def monotonic(self) -> float:
        """Seconds since the clock was made, as advanced by waits and :meth:`advance`."""
        return self.now_s

    def advance(self, seconds: float) -> None:
        """Move time forward, as work between two waits would."""
        self.now_s += seconds

    def wait(self, waitable: Waitable, timeout_s: float) -> bool:
        """Record the wait, run the hook; True if ``waitable`` is a set event, else time out."""
        wait = Wait(waitable, timeout_s, self.now_s)
        self.waits.append(wait)
        if self.on_wait is not None:
            self.on_wait(wait)
        if isinstance(waitable, threading.Event) and waitable.is_set():
            return True
        self.now_s += timeout_s
        return False

    @property
    def timeouts(self) -> list[float]:
        """The timeout of every wait so far, in order, seconds."""
        return [wait.timeout_s for wait in self.waits]


class ManualClock:
    """A thread-safe clock that moves only when the test calls :meth:`advance`.

    A wait blocks until the waitable wakes it or the test advanced time past the wait's
    end; it looks at the time every 10 ms of real time. A wait on a condition returns after
    at most 10 ms (a spurious wakeup: its caller checks its predicate again).
    """

    _SLICE_S = 0.01

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._now_s = 0.0
        self._waiting: list[float] = []

    def time(self) -> float:
        """Unix time: :data:`WALL_CLOCK_OFFSET_S` plus the monotonic time."""
        return WALL_CLOCK_OFFSET_S + self.monotonic()

    def monotonic(self) -> float:
        """Seconds the test advanced the clock by so far."""
        with self._lock:
            return self._now_s

    def advance(self, seconds: float) -> None:
        """Move time forward; waits whose end it reaches return within 10 ms."""
        with self._lock:
            self._now_s += seconds

    def waiting_until(self) -> list[float]:
        """The monotonic end of every wait in progress."""
        with self._lock:
            return list(self._waiting)

    def wait(self, waitable: Waitable, timeout_s: float) -> bool:
        """Wait until ``waitable`` wakes (True) or this clock passes the wait's end (False)."""
        with self._lock:
            end_s = self._now_s + timeout_s
            self._waiting.append(end_s)
        try:
            while self.monotonic() < end_s:
                if waitable.wait(self._SLICE_S):
                    return True
                if isinstance(waitable, threading.Condition):
                    # A notify that races a slice's timeout is lost (CPython's Condition
                    # drops it), so hand back a spurious wakeup, which every condition wait
                    # tolerates: its caller looks at its predicate again.
                    return True
            return False
        finally:
            with self._lock:
                self._waiting.remove(end_s)
