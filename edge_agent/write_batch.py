"""Records that wait in memory for one write to disk, for at most a bounded delay.

The agent's diagnosis thread produces a log line for every window it diagnoses
(:mod:`edge_agent.diagnosis_log`). Writing each at once costs a system call per window, as
much as the inference itself; collected in a :class:`WriteBatch` they are written together
once the first of them has waited ``delay_s`` seconds or ``max_bytes`` wait, whichever comes
first. The owner checks
:meth:`WriteBatch.add`'s answer after each record and :meth:`WriteBatch.due` from a thread
that wakes regularly (the agent's outbox thread, every 0.5 s), so nothing waits much longer
than ``delay_s`` even when no further record comes. ``delay_s = 0`` writes every record at
once.

What that costs: a record that waits is lost if the process dies before it is written (a
crash, SIGKILL; a clean stop writes it), at most ``delay_s`` seconds of records.
"""

from __future__ import annotations

from faultfleet.clock import SYSTEM_CLOCK, Clock


class WriteBatch:
    """The records waiting to be written; not thread-safe (its owner holds a lock).

    Parameters
    ----------
    delay_s : float, seconds
        Longest wait of a record, at least 0 (0: no waiting).
    max_bytes : int
        Bytes that may wait; one more record makes the batch due.
    clock : Clock
        Monotonic time of the first waiting record.
    """

    def __init__(
        self, *, delay_s: float, max_bytes: int = 1 << 16, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        if not delay_s >= 0:
            raise ValueError(f"delay_s must be a number of seconds >= 0, got {delay_s!r}")
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes!r}")
        self.delay_s = delay_s
        self.max_bytes = max_bytes
        self.clock = clock
        self.records: list[bytes] = []
        self.bytes = 0
        self._first_s = 0.0

    def __len__(self) -> int:
        return len(self.records)

    def add(self, record: bytes) -> bool:
        """Keep ``record`` waiting; whether the batch is due now."""
        if not self.records:
            self._first_s = self.clock.monotonic() if self.delay_s > 0 else 0.0
        self.records.append(record)
        self.bytes += len(record)
        return self.delay_s == 0 or self.bytes >= self.max_bytes or self.due()

    def due(self) -> bool:
        """Whether records wait and the first has waited ``delay_s`` or more, or
        ``max_bytes`` wait."""
        if not self.records:
            return False
        waited_s = self.clock.monotonic() - self._first_s
        return self.bytes >= self.max_bytes or waited_s >= self.delay_s

    def take(self) -> list[bytes]:
        """The waiting records, oldest first; the batch is empty afterwards."""
        records, self.records, self.bytes = self.records, [], 0
        return records
