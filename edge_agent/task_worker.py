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
* **Idempotent.** The coordinator sends a task again when its answer is missing after a
  broker restart, with the same task id. A repeated task is never run twice at once: one
  that arrives while its first copy waits or runs is dropped (the first copy's answer
  covers it); one that arrives after it was answered gets the same answer again, from the
  ``[tasks] answers_kept`` latest answers kept in memory, or is run again when its answer
  is no longer kept. Counted on ``faultfleet_tasks_repeated_total``.
* **Clock skew.** Every task carries the coordinator's clock at sending (``issued_at``):
  the difference to the agent's clock at receipt is set on ``faultfleet_clock_skew_seconds``
  and logged as a warning when it reaches ``[tasks] clock_skew_warn_s`` (and as news when
  it falls back). Deadlines are durations counted from receipt, so skew costs no task.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import OrderedDict
from dataclasses import dataclass

from edge_agent.frames import failed_frame
from edge_agent.metrics import AgentMetrics
from edge_agent.supervision import AgentThread, ErrorReport
from edge_agent.task_runner import TaskRunner
from faultfleet.clock import Clock
from faultfleet.wire.codec import RejectReason, WireError, frame_header, parse_envelope
from faultfleet.wire.messages import TASK_ADAPTER, AnyTaskMessage
from faultfleet.wire.mqtt import MqttConnection

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReceivedTask:
    """A task frame as queued: its bytes, when it arrived (monotonic and Unix seconds) and
    its task id (None when its header cannot be read)."""

    payload: bytes
    received_s: float
    received_at: float
    task_id: str | None = None


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
    answers_kept : int
        Latest answers kept to answer a repeated task again.
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
        answers_kept: int = 4,
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
        self.answers_kept = answers_kept
        self._clock_skewed = False
        self._refusals_logged: set[RejectReason] = set()
        self._lock = threading.Lock()
        self._open: set[str] = set()
        """Ids of the tasks queued or running."""
        self._answers: OrderedDict[str, bytes] = OrderedDict()
        """The latest answers by task id, oldest first."""

    def on_task(self, topic: str, payload: bytes) -> None:
        """Network-thread handler: queue the frame, or answer it at once when full.

        A task already queued, running or answered is not queued again (module docstring).
        """
        received = ReceivedTask(
            payload, self.clock.monotonic(), self.clock.time(), self._task_id(payload)
        )
        if received.task_id is not None and self._repeated(received.task_id):
            return
        try:
            self.queue.put_nowait(received)
        except queue.Full:
            self._settled(received.task_id, None)
            self._refuse_busy(payload)

    def _task_id(self, payload: bytes) -> str | None:
        """The frame's task id, from its header alone; None for a frame the worker refuses."""
        try:
            header = frame_header(payload, max_bytes=self.runner.max_payload_bytes)
            return parse_envelope(TASK_ADAPTER, header).task_id
        except WireError:
            return None

    def _repeated(self, task_id: str) -> bool:
        """Whether ``task_id`` was seen already (then answered again if it was answered);
        otherwise it is marked open and False returned."""
        with self._lock:
            if task_id not in self._open and task_id not in self._answers:
                self._open.add(task_id)
                return False
            answer = self._answers.get(task_id)
        self.metrics.tasks_repeated.inc()
        if answer is None:
            logger.debug("%s: task %s repeated while it waits or runs", self.agent_id, task_id)
            return True
        logger.debug("%s: task %s repeated; sending its answer again", self.agent_id, task_id)
        try:
            self.connection.publish(self.results_topic, answer)
        except (ValueError, RuntimeError) as error:
            logger.error("%s: could not send the answer to %s: %s", self.agent_id, task_id, error)
        return True

    def _settled(self, task_id: str | None, answer: bytes | None) -> None:
        """``task_id`` is no longer open; keep ``answer`` (if any) among the latest."""
        if task_id is None:
            return
        with self._lock:
            self._open.discard(task_id)
            if answer is None or self.answers_kept == 0:
                return
            self._answers[task_id] = answer
            self._answers.move_to_end(task_id)
            while len(self._answers) > self.answers_kept:
                self._answers.popitem(last=False)

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
        """Parse, run and answer one frame; its answer is kept for a repeat of the task."""
        answer: bytes | None = None
        try:
            answer = self._answer(received)
        finally:
            self._settled(received.task_id, answer)

    def _answer(self, received: ReceivedTask) -> bytes | None:
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
            return None
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
        return answer.payload

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
