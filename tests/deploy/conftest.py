"""Fixtures of the deployment-file tests: the Prometheus tools (Debian package prometheus) and
the plant's Mosquitto (``plant``, and ``broker``, which here is that plant broker rather
than the plain one of tests/conftest.py; :mod:`tests.deploy.plant_broker`).

Under ``CI=true`` a missing tool fails the test that needs it; elsewhere the test is skipped
with the command that installs it.
"""

from __future__ import annotations

import shutil

import pytest

from tests.deploy.plant_broker import broker, missing, plant  # noqa: F401 (fixtures)

PROMETHEUS_MISSING = (
    "{tool} is not installed: the Prometheus tests need it; run `apt-get install prometheus` "
    "(make system-packages installs it when run as root)"
)


def prometheus_tool(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        missing(PROMETHEUS_MISSING.format(tool=tool))
    return found


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path of promtool."""
    return prometheus_tool("promtool")


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    """Path of the Prometheus server."""
    return prometheus_tool("prometheus")
