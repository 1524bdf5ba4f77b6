"""A plant engineer's folder of recordings as an edge agent's window source.

One folder per agent, holding one machine::

    <path>/
        manifest.csv | manifest.toml   optional; labelled recordings for local training
        <recordings the manifest lists, anywhere below <path>/>
        incoming/                      new recordings to diagnose (created if missing)
            2024-05-01T0800.npz
            ...
        .faultfleet-processed          kept by the agent: incoming files already streamed

* **Training.** The manifest uses the format of :mod:`signal_pipeline.readers.manifest`
  (``path, machine_id, label`` and optional ``fs_hz, rpm, channel, time_column``; paths
  relative to the folder, and inside it unless ``manifest_outside_folder`` allows more).
  Every entry must name the same ``machine_id``. Each recording is cut in time into
  train | validation | test segments (0.7/0.15/0.15 by default) before windowing, as
  :func:`signal_pipeline.plant_federation.manifest_federation` does; classes are
  ``label 0`` … ``label <max label>``. Without a manifest the agent only diagnoses.
* **New labels.** Rows appended to the manifest (or a manifest written later) are taken at
  the next :meth:`RecordingFolderSource.training_data` call after the file changed (its
  size or modification time): the agent calls it again between campaigns
  (:mod:`edge_agent.labelled_data`), never during a task. A manifest that cannot be read
  then raises; the agent logs it and keeps training on what it had.
* **Diagnosis.** Drop recordings into ``incoming/`` in any format the readers support
  (``.npz``, ``.wav``, ``.csv``, ``.npy``, ``.mat``; files whose name starts with ``.`` are
  ignored). Each is read, windowed and streamed once, oldest first (by modification time,
  then name). A file is taken only once its size and modification time stayed the same
  over one poll, so a file still being copied is never read half-way; copying to a hidden
  name and renaming it into place is the safest way to drop a file. A window's true label
  is the label stored in the recording (``.npz``), else unknown. A file that cannot be
  read is logged with its name and skipped; later files still stream.
* **Refusals** (:mod:`edge_agent.incoming`). A symbolic link whose target resolves outside
  the folder, and a file of more than ``max_incoming_bytes`` of content, are refused
  before they are read: logged with the file's name and the rule, counted through
  ``on_refused``, recorded in the ledger and left where they are.
* **Bookkeeping.** ``.faultfleet-processed`` holds one JSON line per handled file (name,
  size, modification time, ``done``, ``failed`` or ``refused``), so a restarted agent does
  not diagnose a file again; the same name with new contents is diagnosed again. The file is
  appended to while streaming and, at stream start, compacted to the files still present.
  A file interrupted by a stop before its last window is streamed again after a restart.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from edge_agent.incoming import (
    FileKey,
    IncomingRefusal,
    ProcessedLedger,
    file_key,
    refusal,
    scan,
)
from edge_agent.source_types import Pacer, Window, check_interval
from faultfleet.clock import SYSTEM_CLOCK, Clock
from faultfleet.errors import UsageError
from signal_pipeline.federation import ClientData
from signal_pipeline.plant_federation import manifest_federation
from signal_pipeline.readers import load_manifest, read_recording
from signal_pipeline.recording import RecordingError
from signal_pipeline.splitting import SplitFractions
from signal_pipeline.windowing import window_recording

logger = logging.getLogger(__name__)

MANIFEST_NAMES = ("manifest.csv", "manifest.toml")
INCOMING_FOLDER = "incoming"
PROCESSED_FILE = ".faultfleet-processed"
DEFAULT_MAX_INCOMING_BYTES = 64_000_000

__all__ = ["PROCESSED_FILE", "ProcessedLedger", "RecordingFolderSource"]


class RecordingFolderSource:
    """A folder of recordings: a manifest for training, ``incoming/`` to diagnose.

    See the module docstring for the layout. :attr:`Window.timestamp` is the wall-clock
    time the window was handed out; :attr:`Window.origin` is ``"<file> @ sample <start>"``.

    Parameters
    ----------
    path : str or Path
        The folder; it must exist.
    window_length : int
        Samples per window.
    stride : int, optional
        Samples between window starts (the window length by default).
    interval_s : float
        Seconds between streamed windows; 0 streams as fast as the consumer takes them.
    poll_s : float
        Seconds between looks into ``incoming/``; a new file streams after 1–2 polls.
    fractions : SplitFractions, optional
        Train/validation/test fractions of each training recording (0.7/0.15/0.15).
    fs_hz, channel, time_column : optional
        How to read incoming files that do not describe themselves, as the manifest fields
        of the same names (``time_column`` applies to ``.csv`` files only).
    class_names : sequence of str, optional
        Label names; by default those of the manifest (``label 0`` …), else none.
    clock : Clock
        Paces the stream, spaces the polls and stamps the windows (the system clock by
        default).
    manifest_outside_folder : bool
        Accept manifest entries naming files outside ``path`` (refused by default).
    max_incoming_bytes : int
        Largest content of an incoming file, bytes (see :func:`edge_agent.incoming.refusal`).
    on_refused : callable, optional
        Called with the :class:`~edge_agent.incoming.IncomingRefusal` of every incoming file
        refused or unreadable (the agent counts them).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        window_length: int = 1024,
        stride: int | None = None,
        interval_s: float = 0.0,
        poll_s: float = 2.0,
        fractions: SplitFractions | None = None,
        fs_hz: float | None = None,
        channel: str | int | None = None,
        time_column: str | int | None = None,
        class_names: Sequence[str] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        manifest_outside_folder: bool = False,
        max_incoming_bytes: int = DEFAULT_MAX_INCOMING_BYTES,
        on_refused: Callable[[IncomingRefusal], None] | None = None,
    ) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise UsageError(
                f"recording folder {self.path} does not exist or is not a folder; create it "
                f"with an {INCOMING_FOLDER}/ subfolder (and a manifest for local training)"
            )
        for name, value in (("window_length", window_length), ("stride", stride)):
            if value is not None and (isinstance(value, bool) or int(value) != value or value < 1):
                raise UsageError(f"{name} must be a whole number of samples >= 1, got {value!r}")
        if fs_hz is not None and (not math.isfinite(fs_hz) or fs_hz <= 0):
            raise UsageError(f"fs_hz must be a positive number of Hz or None, got {fs_hz!r}")
        self.manifest: Path | None = self._find_manifest()
        self.window_length = int(window_length)
        self.stride = int(stride) if stride is not None else self.window_length
        self.interval_s = check_interval("interval_s", interval_s)
        self.poll_s = check_interval("poll_s", poll_s, positive=True)
        self.fractions = fractions
        self.fs_hz = fs_hz
        self.channel = channel
        self.time_column = time_column
        self.clock = clock
        self.manifest_outside_folder = manifest_outside_folder
        if isinstance(max_incoming_bytes, bool) or max_incoming_bytes < 1:
            raise UsageError(f"max_incoming_bytes must be >= 1, got {max_incoming_bytes!r}")
        self.max_incoming_bytes = max_incoming_bytes
        self.on_refused = on_refused
        self.incoming = self.path / INCOMING_FOLDER
        self.ledger_path = self.path / PROCESSED_FILE
        self._class_names = None if class_names is None else tuple(class_names)
        self._training: tuple[ClientData, tuple[str, ...]] | None = None
        self._read_key: tuple[Path, int, int] | None = None
        self._lock = threading.Lock()

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """``(1, window_length)``."""
        return (1, self.window_length)

    def _find_manifest(self) -> Path | None:
        manifests = [self.path / name for name in MANIFEST_NAMES if (self.path / name).is_file()]
        if len(manifests) > 1:
            raise UsageError(
                f"{self.path} holds both {' and '.join(MANIFEST_NAMES)}; keep only one manifest"
            )
        return manifests[0] if manifests else None

    @property
    def class_names(self) -> tuple[str, ...]:
        """As given, else the manifest's (reads the training data), else empty."""
        if self._class_names is not None:
            return self._class_names
        loaded = self._load_training()
        return () if loaded is None else loaded[1]

    def training_data(self) -> ClientData | None:
        """The manifest's recordings windowed and split in time; None without a manifest.

        Read again when the manifest changed since the last call (rows appended, a manifest
        added); the same object otherwise.

        Raises
        ------
        RecordingError
            If the manifest or a recording cannot be read, a recording is too short, or
            the manifest lists more than one machine.
        """
        loaded = self._load_training()
        return None if loaded is None else loaded[0]

    def _load_training(self) -> tuple[ClientData, tuple[str, ...]] | None:
        with self._lock:
            self.manifest = self._find_manifest()
            if self.manifest is None:
                return None
            stat = self.manifest.stat()
            key = (self.manifest, stat.st_size, stat.st_mtime_ns)
            if self._training is None or key != self._read_key:
                entries = load_manifest(
                    self.manifest, allow_outside_folder=self.manifest_outside_folder
                )
                machines = sorted({entry.machine_id for entry in entries})
                if len(machines) > 1:
                    raise RecordingError(
                        self.manifest,
                        f"lists recordings of {len(machines)} machines ({', '.join(machines)}); "
                        "an agent's folder must hold one machine: give each machine its own "
                        "folder and manifest",
                    )
                federation = manifest_federation(
                    str(self.manifest),
                    window_length=self.window_length,
                    stride=self.stride,
                    fractions=self.fractions,
                    split_by="time",
                    allow_outside_folder=self.manifest_outside_folder,
                )
                self._training = (federation.clients[0], federation.class_names)
                self._read_key = key
            return self._training

    def stream(self, stop: threading.Event) -> Iterator[Window]:
        """Windows of each new recording in ``incoming/``, once each, until ``stop`` is set."""
        self.incoming.mkdir(parents=True, exist_ok=True)
        ledger = ProcessedLedger(self.ledger_path)
        ledger.retain(set(scan(self.incoming).values()))
        pacer = Pacer(self.interval_s, stop, self.clock)
        previous: dict[str, FileKey] = {}
        while not stop.is_set():
            current = scan(self.incoming)
            stable = [
                key
                for name, key in current.items()
                if previous.get(name) == key and key not in ledger
            ]
            previous = current
            for key in sorted(stable, key=lambda k: (k[2], k[0])):
                yield from self._stream_file(key, ledger, pacer)
                if stop.is_set():
                    return
            if self.clock.wait(stop, self.poll_s):
                return

    def _stream_file(self, key: FileKey, ledger: ProcessedLedger, pacer: Pacer) -> Iterator[Window]:
        name = key[0]
        path = self.incoming / name
        try:
            refused = refusal(path, self.path, self.max_incoming_bytes)
        except FileNotFoundError:
            return  # removed since the scan
        if refused is not None:
            self._refuse(key, ledger, *refused)
            return
        try:
            recording = read_recording(
                path,
                fs_hz=self.fs_hz,
                channel=self.channel,
                time_column=self.time_column if path.suffix.lower() == ".csv" else None,
            )
            windows = window_recording(recording, self.window_length, self.stride)
        except RecordingError as exc:
            logger.warning("skipping incoming recording %s: %s", name, exc)
            ledger.add(key, "failed")
            self._count(IncomingRefusal.UNREADABLE)
            return
        if file_key(path) != key:
            logger.info("incoming recording %s changed while being read; retrying later", name)
            return
        logger.info("diagnosing incoming recording %s: %d windows", name, len(windows))
        last = len(windows) - 1
        for number, samples in enumerate(windows):
            if not pacer.wait():
                return
            if number == last:
                ledger.add(key, "done")  # handed over whole: never stream it again
            yield Window(
                samples=samples.reshape(self.sample_shape).copy(),
                timestamp=self.clock.time(),
                true_label=recording.label,
                origin=f"{name} @ sample {number * self.stride}",
            )

    def _refuse(
        self, key: FileKey, ledger: ProcessedLedger, reason: IncomingRefusal, why: str
    ) -> None:
        logger.warning("refusing incoming file (%s): %s; it stays where it is", reason, why)
        ledger.add(key, "refused")
        self._count(reason)

    def _count(self, reason: IncomingRefusal) -> None:
        if self.on_refused is not None:
            self.on_refused(reason)
