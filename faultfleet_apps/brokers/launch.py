"""A local MQTT broker for the tests and the demo: Mosquitto when installed, else amqtt.

:func:`start_broker` runs the broker as a child process listening on 127.0.0.1 and returns
once a TCP connection to it succeeds. Both kinds are stopped the same way (SIGTERM, then
SIGKILL), so a test that restarts the broker on the same port and folder exercises the
clients' reconnect path against the real thing; :meth:`RunningBroker.kill` ends it as a
crash would (SIGKILL) and :meth:`RunningBroker.restart` brings it back on the same port and
folder, with what Mosquitto persisted (:mod:`faultfleet_apps.brokers.mosquitto_conf`).
Deployments run their own Mosquitto (``deploy/``); nothing here is meant for production.
"""

from __future__ import annotations

import functools
import logging
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Literal

from faultfleet.errors import UsageError
from faultfleet.wire.settings import DEFAULT_MAX_PAYLOAD_BYTES
from faultfleet_apps.brokers.mosquitto_conf import PUBLISH_HEADER_ROOM_BYTES, mosquitto_config

__all__ = [
    "PUBLISH_HEADER_ROOM_BYTES",
    "BrokerError",
    "RunningBroker",
    "find_mosquitto",
    "free_port",
    "mosquitto_config",
    "start_broker",
]

logger = logging.getLogger(__name__)

BrokerKind = Literal["mosquitto", "amqtt"]

_MOSQUITTO_FALLBACKS = (Path("/usr/sbin/mosquitto"), Path("/usr/local/sbin/mosquitto"))
_STOP_GRACE_S = 5.0


class BrokerError(UsageError, RuntimeError):
    """The broker could not be started; the message ends with the tail of its log."""


def find_mosquitto() -> Path | None:
    """Path of the ``mosquitto`` executable, or None when it is not installed."""
    found = shutil.which("mosquitto")
    if found is not None:
        return Path(found)
    for candidate in _MOSQUITTO_FALLBACKS:
        if candidate.is_file():
            return candidate
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class RunningBroker:
    """A broker child process; a context manager that stops it on exit.

    Attributes
    ----------
    host : str
        Address it listens on (always ``127.0.0.1``).
    port : int
        TCP port it listens on.
    kind : {"mosquitto", "amqtt"}
        Which broker runs.
    workdir : Path
        Folder holding its configuration, log and persistence files.
    """

    def __init__(
        self,
        *,
        process: subprocess.Popen[bytes],
        port: int,
        kind: BrokerKind,
        workdir: Path,
        log_paths: Sequence[Path],
        owned_tempdir: tempfile.TemporaryDirectory[str] | None = None,
        respawn: Callable[[], tuple[subprocess.Popen[bytes], list[Path]]] | None = None,
    ) -> None:
        self.host = "127.0.0.1"
        self.port = port
        self.kind: BrokerKind = kind
        self.workdir = workdir
        self._process = process
        self._log_paths = tuple(log_paths)
        self._owned_tempdir = owned_tempdir
        self._respawn = respawn

    @property
    def running(self) -> bool:
        """Whether the child process is still alive."""
        return self._process.poll() is None

    @property
    def pid(self) -> int:
        """Process id of the broker."""
        return self._process.pid

    @property
    def exit_status(self) -> int | None:
        """The process's exit status, or None while it runs."""
        return self._process.poll()

    def log_tail(self, n_lines: int = 20) -> str:
        """The last ``n_lines`` lines of the broker's output and log files, for error messages."""
        lines: list[str] = []
        for path in self._log_paths:
            if path.is_file():
                lines.extend(path.read_text(encoding="utf-8", errors="replace").splitlines())
        return "\n".join(lines[-n_lines:]) if lines else "(the broker wrote no log)"

    def stop(self) -> None:
        """Stop the broker: SIGTERM, up to 5 s to exit cleanly, then SIGKILL. Idempotent."""
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                logger.warning(
                    "%s broker (pid %d) ignored SIGTERM for %.0f s; killing it",
                    self.kind,
                    self._process.pid,
                    _STOP_GRACE_S,
                )
                self._process.kill()
                self._process.wait()
        if self._owned_tempdir is not None:
            self._owned_tempdir.cleanup()
            self._owned_tempdir = None

    def kill(self) -> None:
        """SIGKILL the broker, as a crash or the kernel's OOM killer would end it, and reap it.

        It saves nothing on the way out: Mosquitto comes back from :meth:`restart` with
        what its autosaves wrote (:mod:`faultfleet_apps.brokers.mosquitto_conf`), amqtt with
        nothing. The folder stays, a temporary one too, until :meth:`stop`.
        """
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()

    def restart(self, startup_timeout_s: float = 15.0) -> None:
        """Start the broker again, on the same port, folder and configuration.

        Returns once it accepts TCP connections.

        Raises
        ------
        BrokerError
            It still runs, its temporary folder was removed by :meth:`stop`, or it did not
            start (the message ends with its log tail).
        """
        if self.running:
            raise BrokerError(f"{self!r} still runs; kill() or stop() it before restart()")
        if self._respawn is None or not self.workdir.is_dir():
            raise BrokerError(
                f"{self!r} cannot restart: its folder is gone; start it with a workdir "
                "to restart it after stop()"
            )
        self._process, log_paths = self._respawn()
        self._log_paths = tuple(log_paths)
        _wait_listening(self, startup_timeout_s)
        logger.info("%s broker restarted on 127.0.0.1:%d", self.kind, self.port)

    def __enter__(self) -> RunningBroker:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return (
            f"RunningBroker(kind={self.kind!r}, port={self.port}, {state}, workdir={self.workdir})"
        )


def start_broker(
    *,
    port: int | None = None,
    prefer: Literal["auto", "mosquitto", "amqtt"] = "auto",
    workdir: Path | None = None,
    extra_config: Sequence[str] = (),
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    persistence: bool = True,
    startup_timeout_s: float = 15.0,
) -> RunningBroker:
    """Start a broker on 127.0.0.1 and return once it accepts TCP connections.

    Parameters
    ----------
    port : int, optional
        TCP port; a free one is picked when None.
    prefer : {"auto", "mosquitto", "amqtt"}
        "auto" runs Mosquitto when installed, else the pure-Python amqtt broker.
    workdir : Path, optional
        Folder for configuration, log and persistence files; a temporary folder (removed
        by :meth:`RunningBroker.stop`) when None. Reuse it to restart a broker with its
        persisted sessions and retained messages (Mosquitto only).
    extra_config : sequence of str
        Extra ``mosquitto.conf`` lines (Mosquitto only; amqtt rejects them).
    max_payload_bytes : int, bytes
        Largest PUBLISH payload the broker accepts.
    persistence : bool
        Mosquitto saves sessions, subscriptions, retained and queued messages in
        ``workdir`` after every change and on exit, so they survive a SIGKILL; amqtt keeps
        them in memory only.
    startup_timeout_s : float, seconds
        How long to wait for the port to accept connections.

    Raises
    ------
    BrokerError
        Mosquitto was asked for but is not installed, amqtt was given ``extra_config``, or
        the broker exited or did not listen in time (the message ends with its log tail).
    """
    mosquitto = find_mosquitto()
    if prefer == "mosquitto" and mosquitto is None:
        raise BrokerError(
            "mosquitto is not installed: install it (apt-get install mosquitto) "
            "or start the broker with prefer='amqtt'"
        )
    kind: BrokerKind = "mosquitto" if prefer != "amqtt" and mosquitto is not None else "amqtt"
    if kind == "amqtt" and extra_config:
        raise BrokerError(
            f"extra_config {list(extra_config)!r} holds mosquitto.conf lines, which the "
            "amqtt fallback cannot apply; install mosquitto or drop extra_config"
        )
    owned: tempfile.TemporaryDirectory[str] | None = None
    if workdir is None:
        owned = tempfile.TemporaryDirectory(prefix=f"faultfleet-{kind}-")
        folder = Path(owned.name)
    else:
        folder = Path(workdir)
    folder.mkdir(parents=True, exist_ok=True)
    # A port picked here may be taken by another process before the broker binds it (tests
    # running in parallel): a broker that exits at start on a picked port gets another one.
    attempts = _PICKED_PORT_ATTEMPTS if port is None else 1
    for attempt in range(1, attempts + 1):
        chosen_port = free_port() if port is None else port
        respawn = functools.partial(
            _spawn,
            kind,
            mosquitto,
            chosen_port,
            folder,
            tuple(extra_config),
            max_payload_bytes,
            persistence,
        )
        process, log_paths = respawn()
        broker = RunningBroker(
            process=process,
            port=chosen_port,
            kind=kind,
            workdir=folder,
            log_paths=log_paths,
            respawn=respawn,
        )
        try:
            _wait_listening(broker, startup_timeout_s)
        except BrokerError:
            broker.stop()
            taken = "address already in use" in broker.log_tail().lower()
            if attempt < attempts and taken:
                logger.info("%s broker could not use port %d; picking another", kind, chosen_port)
                continue
            if owned is not None:
                owned.cleanup()
            raise
        broker._owned_tempdir = owned
        logger.info("%s broker listening on 127.0.0.1:%d (folder %s)", kind, chosen_port, folder)
        return broker
    raise AssertionError("unreachable: the last attempt returns or raises")


_PICKED_PORT_ATTEMPTS = 3


def _spawn(
    kind: BrokerKind,
    mosquitto: Path | None,
    port: int,
    folder: Path,
    extra_config: Sequence[str],
    max_payload_bytes: int,
    persistence: bool,
) -> tuple[subprocess.Popen[bytes], list[Path]]:
    """Start the broker process on ``port``; returns it and the files it logs to."""
    output_path = folder / f"{kind}.out"
    if kind == "mosquitto":
        assert mosquitto is not None
        config_path = folder / "mosquitto.conf"
        config_path.write_text(
            mosquitto_config(
                port=port,
                workdir=folder,
                max_payload_bytes=max_payload_bytes,
                persistence=persistence,
                extra_config=extra_config,
            ),
            encoding="utf-8",
        )
        command = [str(mosquitto), "-c", str(config_path)]
        log_paths = [output_path, folder / "mosquitto.log"]
    else:
        command = [
            sys.executable,
            "-m",
            "faultfleet_apps.brokers.embedded",
            "--port",
            str(port),
            "--max-payload-bytes",
            str(max_payload_bytes),
        ]
        log_paths = [output_path]
    with output_path.open("ab") as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    return process, log_paths


def _wait_listening(broker: RunningBroker, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if not broker.running:
            raise BrokerError(
                f"{broker.kind} broker on port {broker.port} exited at start "
                f"(exit status {broker.exit_status}); check the port is free and the "
                f"configuration in {broker.workdir}. Log tail:\n{broker.log_tail()}"
            )
        try:
            with socket.create_connection((broker.host, broker.port), timeout=0.5):
                pass
        except OSError:
            if time.monotonic() > deadline:
                raise BrokerError(
                    f"{broker.kind} broker did not listen on port {broker.port} within "
                    f"{timeout_s:.1f} s; raise startup_timeout_s or read its log. "
                    f"Log tail:\n{broker.log_tail()}"
                ) from None
            time.sleep(0.05)
            continue
        if broker.running:
            return
