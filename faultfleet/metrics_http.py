"""The Prometheus ``/metrics`` endpoint both services serve.

:func:`serve_metrics` starts prometheus_client's HTTP server for one registry in a daemon
thread and returns a :class:`MetricsServer` that stops it again; port 0 in
:class:`~faultfleet.wire.settings.MetricsSettings` switches the endpoint off. The coordinator
listens on 9400 and an agent on 9401 by default (``deploy/prometheus/prometheus.yml``
scrapes those ports).

:func:`register_standard_metrics` adds what every process reports besides its own metrics:
prometheus_client's process collector (``process_cpu_seconds_total``,
``process_resident_memory_bytes``, ``process_open_fds``, ``process_start_time_seconds``, ...),
platform collector (``python_info``) and garbage-collector collector (``python_gc_*``), and
``faultfleet_build_info``, 1 with the versions that matter for a bug report as labels. The
services build their metrics on their own registries (so that tests get fresh ones), which
do not hold these collectors unless registered there.
"""

from __future__ import annotations

import errno
import importlib.metadata
import logging
import platform
import threading
from dataclasses import dataclass, field
from types import TracebackType
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)

from faultfleet import __version__
from faultfleet.errors import UsageError
from faultfleet.wire.settings import MetricsSettings

logger = logging.getLogger(__name__)

_STOP_TIMEOUT_S = 5.0

BUILD_INFO_LABELS = ("version", "python", "torch", "onnxruntime")
"""Labels of ``faultfleet_build_info``: faultfleet's version, Python's, torch's and ONNX
Runtime's (``none`` where a package is not installed)."""


def build_versions() -> dict[str, str]:
    """The values of :data:`BUILD_INFO_LABELS` for this process (read from package metadata,
    without importing torch or ONNX Runtime)."""
    versions = {"version": __version__, "python": platform.python_version()}
    for package in ("torch", "onnxruntime"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "none"
    return versions


def register_standard_metrics(registry: CollectorRegistry) -> Gauge:
    """Add the process, platform and GC collectors and ``faultfleet_build_info`` to ``registry``.

    Returns the build-info gauge (one series, value 1). Call it once per registry: a second
    call raises ValueError (duplicated time series), as registering any metric twice does.
    """
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    build_info = Gauge(
        "faultfleet_build_info",
        "Always 1; the labels give the versions of faultfleet, Python, torch and ONNX Runtime.",
        BUILD_INFO_LABELS,
        registry=registry,
    )
    build_info.labels(**build_versions()).set(1)
    return build_info


class MetricsServerError(UsageError, OSError):
    """The metrics endpoint cannot listen where the settings say; the message says why."""


@dataclass
class MetricsServer:
    """A running ``/metrics`` endpoint; :meth:`stop` shuts it down and frees the port.

    Attributes
    ----------
    host : str
        Address the server is bound to, as the settings gave it.
    port : int
        TCP port the server listens on.
    """

    host: str
    port: int
    _httpd: WSGIServer = field(repr=False)
    _thread: threading.Thread = field(repr=False)

    @property
    def url(self) -> str:
        """The endpoint's address, e.g. ``http://127.0.0.1:9400/metrics``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop serving, close the listening socket and wait for the server thread.

        Calling it again does nothing.
        """
        if not self._thread.is_alive():
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=_STOP_TIMEOUT_S)
        logger.info("metrics endpoint on port %d stopped", self.port)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def serve_metrics(settings: MetricsSettings, registry: CollectorRegistry) -> MetricsServer | None:
    """Serve ``registry`` at ``http://{settings.host}:{settings.port}/metrics``.

    Parameters
    ----------
    settings : MetricsSettings
        Listening address and port; port 0 switches the endpoint off.
    registry : CollectorRegistry
        The process's metrics (``CoordinatorMetrics.registry`` or ``AgentMetrics.registry``).

    Returns
    -------
    MetricsServer or None
        The running server (its thread is a daemon, so it never keeps the process alive),
        or None when ``settings.port`` is 0.

    Raises
    ------
    MetricsServerError
        The port is taken, needs privileges, or the host is not an address of this machine.
    """
    if settings.port == 0:
        logger.info("metrics endpoint switched off (metrics.port = 0)")
        return None
    try:
        httpd, thread = start_http_server(settings.port, addr=settings.host, registry=registry)
    except OSError as error:
        raise MetricsServerError(_explain(error, settings)) from error
    server = MetricsServer(settings.host, settings.port, httpd, thread)
    logger.info("serving metrics at %s", server.url)
    return server


def _explain(error: OSError, settings: MetricsSettings) -> str:
    port, host = settings.port, settings.host
    if error.errno == errno.EADDRINUSE:
        return (
            f"metrics.port {port} is already in use; pick another port or 0 to switch metrics off"
        )
    if error.errno == errno.EACCES:
        return (
            f"metrics.port {port} needs privileges this service does not have; pick a port "
            "above 1023 or 0 to switch metrics off"
        )
    if error.errno == errno.EADDRNOTAVAIL:
        return (
            f"metrics.host {host!r} is not an address of this machine; use 0.0.0.0 (every "
            "interface), 127.0.0.1 or one of its addresses"
        )
    return (
        f"cannot serve metrics on {host}:{port} ({error.strerror or error}); check metrics.host "
        "and metrics.port, or set metrics.port = 0 to switch metrics off"
    )
