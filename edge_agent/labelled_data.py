"""An agent's labelled data, newly labelled windows included, and when training takes them.

:class:`LabelledData` is what the agent trains on: its source's training data (a simulated
machine's, the recordings of a folder's manifest) plus the live windows the labels file
names (:mod:`edge_agent.labels_file`, kept by :class:`~edge_agent.window_store.WindowStore`).

* **Rescans.** :meth:`LabelledData.rescan` runs every ``[labels] rescan_s`` on the agent's
  labels thread: it asks the source again (a folder re-reads a manifest that changed), reads
  the labels file and the stored windows it names, and builds the new data. Nothing it does
  touches a task in progress. When the data changed, the agent republishes its status with
  the new ``labelled_windows`` count, which the coordinator adds up to decide a campaign.
* **When training takes them.** New data waits (``pending``) until the first task of the
  next campaign: the coordinator's retained status names the running campaign, and
  :meth:`LabelledData.for_task`, called as each task starts, switches to the pending data
  when that campaign is not the one the current data was taken in. So all the rounds and
  probes of a campaign see the same data; an agent that had no data, or a coordinator that
  reports no campaign, takes new data at its next task.
* **Split.** A labelled live window goes to train, validation or test (0.7/0.15/0.15) by a
  hash of its timestamp and ``[labels] split_seed``: deterministic, and a window never
  changes split when more windows are labelled.
* **No labels yet.** An agent without a manifest and without labelled windows holds no data:
  it diagnoses with the model its cluster serves and answers every task as failed ("holds no
  labelled training data"); it trains from the campaign after its first labels.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
from pydantic import TypeAdapter

from edge_agent.labels_file import LabelRange, LabelsFileError, read_labels
from edge_agent.source_types import WindowSource
from edge_agent.window_store import WindowStore
from faultfleet.clock import Clock
from faultfleet.errors import UsageError
from faultfleet.wire.codec import WireError, parse_envelope
from faultfleet.wire.messages import CoordinatorStatus
from signal_pipeline.federation import ClientData, Dataset
from signal_pipeline.recording import RecordingError

logger = logging.getLogger(__name__)

FRACTIONS = (0.7, 0.15, 0.15)
"""Train, validation and test shares of the labelled live windows."""

_COORDINATOR = TypeAdapter(CoordinatorStatus)
_UNHEARD = "\x00unheard"
"""The campaign the first data was taken in, before the coordinator's status was heard."""


def split_of(timestamps: npt.NDArray[np.float64], seed: int) -> npt.NDArray[np.int8]:
    """0 (train), 1 (validation) or 2 (test) for each timestamp: splitmix64 of its bits and
    the seed, as a uniform number against :data:`FRACTIONS`."""
    with np.errstate(over="ignore"):
        bits = np.ascontiguousarray(timestamps, dtype=np.float64).view(np.uint64)
        z = bits ^ np.uint64((seed * 0x9E3779B97F4A7C15) % 2**64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    uniform = (z >> np.uint64(11)).astype(np.float64) / 2.0**53
    train, val, _ = FRACTIONS
    return np.where(uniform < train, 0, np.where(uniform < train + val, 1, 2)).astype(np.int8)


def labelled_windows(data: ClientData | None) -> int:
    """Windows of all three splits of ``data`` (0 for None)."""
    return 0 if data is None else len(data.train) + len(data.val) + len(data.test)


class LabelledData:
    """The agent's labelled data and the rule for when training takes new data.

    Parameters
    ----------
    agent_id : str
    source : WindowSource
    store : WindowStore
        The diagnosed live windows.
    labels_path : Path
        The labels file.
    split_seed : int
        Seeds the split of labelled live windows.

    Raises
    ------
    UsageError
        At construction, when the source's data cannot be read (the agent does not start).
        A labels file that cannot be read is logged and left out until it can; later
        rescans log any such problem and keep the data they had.
    """

    def __init__(
        self,
        agent_id: str,
        source: WindowSource,
        store: WindowStore,
        labels_path: Path,
        *,
        split_seed: int = 0,
    ) -> None:
        self.agent_id = agent_id
        self.source = source
        self.store = store
        self.labels_path = labels_path
        self.split_seed = split_seed
        self._lock = threading.Lock()
        self._campaign: str | None = None
        self._adopted_in: str | None = _UNHEARD
        self._pending: ClientData | None = None
        self._has_pending = False
        self._key: object = None
        self._problem = ""
        self._active: ClientData | None
        try:
            self._key, self._active = self._read()
        except LabelsFileError as error:
            logger.error("%s: %s; training without labelled live windows", agent_id, error)
            self._problem = str(error)
            self._key, self._active = self._read(labelled=False)

    # -- reading -----------------------------------------------------------------------------

    @property
    def active(self) -> ClientData | None:
        """The data tasks use now."""
        with self._lock:
            return self._active

    @property
    def newest(self) -> ClientData | None:
        """The data the next campaign trains on: the pending data if any, else the active."""
        with self._lock:
            return self._pending if self._has_pending else self._active

    @property
    def labelled_windows(self) -> int:
        """Labelled windows of :attr:`newest` (what the agent reports)."""
        return labelled_windows(self.newest)

    def for_task(self) -> ClientData | None:
        """The data for the task that starts now (see the module docstring)."""
        with self._lock:
            pending = self._pending
            new_campaign = self._campaign is None or self._campaign != self._adopted_in
            if self._has_pending and (self._active is None or new_campaign):
                self._active, self._pending, self._has_pending = pending, None, False
                self._adopted_in = self._campaign
                logger.info(
                    "%s: training on %d labelled windows from now on%s",
                    self.agent_id,
                    labelled_windows(pending),
                    f" (campaign {self._campaign})" if self._campaign else "",
                )
            return self._active

    # -- the coordinator's status (network thread) -------------------------------------------

    def on_coordinator_status(self, topic: str, payload: bytes) -> None:
        """Follow the running campaign from the coordinator's retained status."""
        if not payload:
            return
        try:
            status = parse_envelope(_COORDINATOR, payload)
        except WireError as error:
            logger.debug(
                "%s: ignoring the coordinator status on %s: %s", self.agent_id, topic, error
            )
            return
        campaign = status.campaign.campaign_id if status.campaign is not None else None
        with self._lock:
            self._campaign = campaign
            if self._adopted_in == _UNHEARD:
                self._adopted_in = campaign

    # -- rescans (the labels thread) ---------------------------------------------------------

    def rescan(self) -> bool:
        """Read the source and the labels again; True when the newest data changed."""
        try:
            key, data = self._read()
        except (UsageError, RecordingError, OSError) as error:
            if str(error) != self._problem:
                logger.error(
                    "%s: new labels not read, training keeps its data: %s", self.agent_id, error
                )
                self._problem = str(error)
            return False
        if self._problem:
            logger.info("%s: labels are read again", self.agent_id)
            self._problem = ""
        if key == self._key:
            return False
        with self._lock:
            self._pending, self._has_pending = data, True
        self._key = key
        logger.info(
            "%s: %d labelled windows for the next campaign", self.agent_id, labelled_windows(data)
        )
        return True

    def run(
        self,
        stop: threading.Event,
        *,
        interval_s: float,
        clock: Clock,
        on_change: Callable[[], None],
    ) -> None:
        """Rescan every ``interval_s`` until ``stop``; ``on_change`` after a change."""
        while not clock.wait(stop, interval_s):
            if self.rescan():
                on_change()

    def _read(self, *, labelled: bool = True) -> tuple[object, ClientData | None]:
        """The inputs' fingerprint, and the data built from them if it differs from the last
        (None when unchanged); without ``labelled``, the labels file is left out."""
        base = self.source.training_data()
        ranges = read_labels(self.labels_path) if labelled else []
        spans = [(r.start, r.end) for r in ranges]
        key = (id(base), tuple(ranges), self.store.fingerprint(spans) if spans else ())
        if key == self._key:
            return key, None
        return key, self._combine(base, self._live_windows(ranges))

    def _live_windows(
        self, ranges: Sequence[LabelRange]
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """Timestamps, samples and labels of the stored windows the ranges name."""
        times, samples = self.store.read([(r.start, r.end) for r in ranges])
        labels = np.full(len(times), -1, dtype=np.int64)
        for entry in ranges:  # a later row wins where ranges overlap
            labels[(times >= entry.start) & (times < entry.end)] = entry.label
        return times, samples, labels

    def _combine(
        self,
        base: ClientData | None,
        live: tuple[npt.NDArray[np.float64], npt.NDArray[np.float32], npt.NDArray[np.int64]],
    ) -> ClientData | None:
        """``base`` with the labelled live windows added to its splits."""
        times, samples, labels = live
        if len(times) == 0:
            return base
        shape = tuple(self.source.sample_shape)
        x = samples.reshape((len(times), *shape))
        splits = split_of(times, self.split_seed)
        parts = []
        for index, name in enumerate(("train", "val", "test")):
            chosen = splits == index
            own = Dataset(np.ascontiguousarray(x[chosen]), labels[chosen])
            if base is not None:
                old = base.splits()[name]
                own = Dataset(np.concatenate([old.x, own.x]), np.concatenate([old.y, own.y]))
            parts.append(own)
        client = base.client_id if base is not None else self.agent_id
        group = base.group if base is not None else 0
        return ClientData(client, group, *parts)
