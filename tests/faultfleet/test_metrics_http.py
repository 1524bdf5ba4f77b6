"""The /metrics endpoint: really served over HTTP, stopped, off at port 0, clear when taken."""

from __future__ import annotations

import importlib.metadata
import platform
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from faultfleet import __version__
from faultfleet.metrics_http import (
    MetricsServerError,
    build_versions,
    register_standard_metrics,
    serve_metrics,
)
from faultfleet.wire.settings import MetricsSettings

LOCALHOST = "127.0.0.1"


@pytest.fixture
def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Counter("faultfleet_test_events_total", "Events.", registry=reg).inc(3)
    return reg


@pytest.fixture
def listening_socket() -> Iterator[socket.socket]:
    """A socket that holds a free local port, as another program would."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((LOCALHOST, 0))
    sock.listen()
    yield sock
    sock.close()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOCALHOST, 0))
        port: int = sock.getsockname()[1]
    return port


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
    return body.decode()


def test_serves_the_registry_over_http_and_stop_frees_the_port(
    registry: CollectorRegistry,
) -> None:
    # Prepare
    port = free_port()
    settings = MetricsSettings(host=LOCALHOST, port=port)

    # Execute
    server = serve_metrics(settings, registry)
    assert server is not None
    body = fetch(server.url)
    server.stop()
    server.stop()

    # Assert
    assert server.url == f"http://127.0.0.1:{port}/metrics"
    assert "faultfleet_test_events_total 3.0" in body
    with pytest.raises(urllib.error.URLError):
        fetch(server.url)
    with serve_metrics(settings, registry) as again:  # type: ignore[union-attr]
        assert "faultfleet_test_events_total" in fetch(again.url)


def test_port_zero_switches_metrics_off(registry: CollectorRegistry) -> None:
    # Execute / Assert
    assert serve_metrics(MetricsSettings(host=LOCALHOST, port=0), registry) is None


def test_a_taken_port_is_named_in_the_error(
    registry: CollectorRegistry, listening_socket: socket.socket
) -> None:
    # Prepare
    port = listening_socket.getsockname()[1]

    # Execute / Assert
    with pytest.raises(
        MetricsServerError,
        match=rf"metrics.port {port} is already in use; pick another port or 0 to switch "
        "metrics off",
    ):
        serve_metrics(MetricsSettings(host=LOCALHOST, port=port), registry)


def test_an_address_not_on_this_machine_is_explained(registry: CollectorRegistry) -> None:
    # Prepare: TEST-NET-1 (RFC 5737) is never assigned to a local interface
    settings = MetricsSettings(host="192.0.2.1", port=free_port())

    # Execute / Assert
    with pytest.raises(MetricsServerError, match=r"metrics.host '192.0.2.1' is not an address"):
        serve_metrics(settings, registry)


def test_the_standard_metrics_are_served_beside_the_registry_s_own(
    registry: CollectorRegistry,
) -> None:
    # Prepare
    register_standard_metrics(registry)
    settings = MetricsSettings(host=LOCALHOST, port=free_port())

    # Execute
    with serve_metrics(settings, registry) as server:  # type: ignore[union-attr]
        body = fetch(server.url)

    # Assert
    lines = body.splitlines()
    assert "faultfleet_test_events_total 3.0" in lines
    for family in ("process_cpu_seconds_total", "process_resident_memory_bytes", "python_info"):
        assert any(line.startswith(family) for line in lines), family
    assert any(line.startswith("python_gc_collections_total{") for line in lines)
    build = [line for line in lines if line.startswith("faultfleet_build_info{")]
    assert len(build) == 1
    assert f'version="{__version__}"' in build[0]
    assert f'python="{platform.python_version()}"' in build[0]
    assert build[0].endswith(" 1.0")


def test_registering_the_standard_metrics_twice_is_refused(registry: CollectorRegistry) -> None:
    # Prepare
    register_standard_metrics(registry)

    # Execute / Assert
    with pytest.raises(ValueError, match="Duplicated"):
        register_standard_metrics(registry)


def test_build_versions_name_the_installed_packages_and_none_for_absent_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Prepare: pretend ONNX Runtime is not installed
    installed = importlib.metadata.version

    def version(package: str) -> str:
        if package == "onnxruntime":
            raise importlib.metadata.PackageNotFoundError(package)
        return installed(package)

    monkeypatch.setattr(importlib.metadata, "version", version)

    # Execute
    versions = build_versions()

    # Assert
    assert versions == {
        "version": __version__,
        "python": platform.python_version(),
        "torch": installed("torch"),
        "onnxruntime": "none",
    }
