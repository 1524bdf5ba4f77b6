"""The agent's task worker: a bounded queue of task frames, answered one at a time.

The network thread hands every task frame to :meth:`TaskWorker.on_task` with the time it
arrived; the worker thread (:meth:`TaskWorker.run`) parses it, reports the clock skew,
answers it through :class:`~edge_agent.task_runner.TaskRunner` and publishes the answer.

* **Bounded.** At most ``[tasks] max_queued`` frames wait. One more is answered
  ``task_failed`` on arrival (counted on ``faultfleet_tasks_queue_full_total``), so the
  coordinator closes its round instead of waiting for an answer that cannot come, and a
  flood of frames costs no memory.
* **Unstoppable.** A frame it cannot read is counted by reason and logged once per reason
  (``faultfleet_tasks_rejected_total``). Any other exception of one task is counted and
  logged once per kind
  (:class:`~edge_agent.supervision.ErrorReport`); an exception inside the runner still
  answers the task as failed; the loop goes on with the next frame.
* **Clock skew.** Every task carries the coordinator's clock at sending (``issued_at``):
  the difference to the agent's clock at receipt is set on ``faultfleet_clock_skew_seconds``
  and logged as a warning when it reaches ``[tasks] clock_skew_warn_s`` (and as news when
  it falls back). Deadlines are durations counted from receipt, so skew costs no task.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass

from edge_agent.frames import failed_frame
from edge_agent.metrics import AgentMetrics
from edge_agent.supervision import AgentThread, ErrorReport
from edge_agent.task_runner import TaskRunner
from faultfleet.clock import Clock
from faultfleet.wire.codec import RejectReason, WireError
from faultfleet.wire.messages import AnyTaskMessage
from faultfleet.wire.mqtt import MqttConnection

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReceivedTask:
    """A task frame as queued: its bytes and when it arrived (monotonic and Unix seconds)."""

    payload: bytes
    received_s: float
    received_at: float


class TaskWorker:
    """Queues an agent's task frames and answers them.

    Parameters
    ----------
    runner : TaskRunner
        Answers one task.
    connection : MqttConnection
        Where answers are published.
    results_topic : str
        The agent's results topic.
    metrics : AgentMetrics
    errors : ErrorReport
    clock : Clock
        Stamps each frame's arrival.
    max_queued : int
        Frames that may wait.
    clock_skew_warn_s : float, seconds
        Skew from which a warning is logged.
    """

    def __init__(
        self,
        runner: TaskRunner,
        connection: MqttConnection,
        results_topic: str,
        metrics: AgentMetrics,
        errors: ErrorReport,
        clock: Clock,
        *,
        max_queued: int,
        clock_skew_warn_s: float,
    ) -> None:
        self.runner = runner
        self.agent_id = runner.agent_id
        self.connection = connection
        self.results_topic = results_topic
        self.metrics = metrics
        self.errors = errors
        self.clock = clock
        self.clock_skew_warn_s = clock_skew_warn_s
        self.queue: queue.Queue[ReceivedTask] = queue.Queue(maxsize=max_queued)
        self._clock_skewed = False
        self._refusals_logged: set[RejectReason] = set()

    def on_task(self, topic: str, payload: bytes) -> None:
        """Network-thread handler: queue the frame, or answer it at once when full."""
        received = ReceivedTask(payload, self.clock.monotonic(), self.clock.time())
        try:
            self.queue.put_nowait(received)
        except queue.Full:
            self._refuse_busy(payload)

    def _refuse_busy(self, payload: bytes) -> None:
        """Answer a frame that finds the queue full with ``task_failed`` (debug log only: a
        flood of frames must not flood the log; the counter tells)."""
        self.metrics.tasks_queue_full.inc()
        try:
            task, _ = self.runner.parse(payload)
        except WireError as error:
            self.metrics.task_rejected(error.reason)
            return
        reason = (
            f"the agent's task queue is full ({self.queue.maxsize} tasks waiting, "
            "[tasks] max_queued); the task was not run"
        )
        logger.debug("%s: task %s refused: %s", self.agent_id, task.task_id, reason)
        self.connection.publish(
            self.results_topic, failed_frame(task, self.agent_id, reason).payload
        )

    def run(self, stop: threading.Event) -> None:
        """Worker thread: answer queued frames until ``stop`` is set."""
        while not stop.is_set():
            try:
                received = self.queue.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                self.answer(received)
            except Exception as error:  # a bug, not a bad frame: count it, take the next
                self.errors(AgentThread.TASKS, error)

    def answer(self, received: ReceivedTask) -> None:
        """Parse, run and answer one frame."""
        try:
            task, body = self.runner.parse(received.payload)
        except WireError as error:
            self.metrics.task_rejected(error.reason)
            level = logging.DEBUG if error.reason in self._refusals_logged else logging.WARNING
            self._refusals_logged.add(error.reason)
            logger.log(
                level,
                "%s: refused a task frame (%s): %s; further %s frames are counted on "
                "faultfleet_tasks_rejected_total and logged at debug level",
                self.agent_id,
                error.reason,
                error,
                error.reason,
            )
            return
        self._note_skew(task, received.received_at)
        try:
            answer = self.runner.run(task, body, received.received_s)
        except Exception as error:
            self.errors(AgentThread.TASKS, error, f"task {task.task_id}")
            answer = self.runner.failed(task, f"{type(error).__name__}: {error}")
        if answer.kind == "fit_update":
            self.metrics.observe_training(answer.train_seconds)
        try:
            self.connection.publish(self.results_topic, answer.payload)
        except (ValueError, RuntimeError) as error:
            logger.error(
                "%s: could not send the answer to %s: %s", self.agent_id, task.task_id, error
            )

    def _note_skew(self, task: AnyTaskMessage, received_at: float) -> None:
        """Report the skew between this agent's clock and the coordinator's: always on the
        gauge, in the log when it crosses ``clock_skew_warn_s`` either way."""
        skew_s = self.runner.clock_skew_s(task, received_at)
        self.metrics.clock_skew_seconds.set(skew_s)
        skewed = abs(skew_s) >= self.clock_skew_warn_s
        if skewed and not self._clock_skewed:
            logger.warning(
                "%s: this agent's clock is %.1f s %s the coordinator's (task %s, round %d); "
                "tasks are still answered (deadlines are durations), but diagnosis and status "
                "timestamps are off: synchronise the clock (NTP)",
                self.agent_id,
                abs(skew_s),
                "ahead of" if skew_s > 0 else "behind",
                task.task_id,
                task.server_round,
            )
        elif self._clock_skewed and not skewed:
            logger.info(
                "%s: clock back within %.1f s of the coordinator's", self.agent_id, abs(skew_s)
            )
        self._clock_skewed = skewed
