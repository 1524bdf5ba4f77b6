"""Test-wide configuration: Hypothesis profiles, the SciPy array-API switch, torch threads,
the ``integration`` marker and the MQTT broker fixtures (``mosquitto_bin``, ``broker``,
``broker_settings``).

``CI=true`` selects a derandomised profile so a CI run is reproducible; locally the
default profile explores new examples on every run; ``HYPOTHESIS_PROFILE=fuzz`` tries 2,000
examples per property.

Tests that start a real broker or a service process are marked ``integration``: every
test under ``tests/integration/``, every test that uses the ``mosquitto_bin`` fixture (all
broker fixtures depend on it) and the modules that say ``pytestmark =
pytest.mark.integration`` themselves. ``pytest -m "not integration"`` runs the rest.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

# scikit-learn's estimator checks include an array-API check that skips itself unless SciPy's
# array-API support is switched on; switch it on (before SciPy is imported) so the contract
# suite runs whole instead of reporting skips.
os.environ.setdefault("SCIPY_ARRAY_API", "1")

import pytest
import torch
from hypothesis import HealthCheck, settings

from faultfleet.wire.settings import BrokerSettings
from faultfleet_apps.brokers.launch import RunningBroker, find_mosquitto, start_broker

# One torch thread: test models are tiny, and spinning worker threads only slow the suite
# down when another process shares the machine's cores. The environment variable is the
# request the commands' thread policy honours (faultfleet_apps.thread_policy), so a command
# run in a test, or a process a test starts, keeps to one thread too.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile(
    "fuzz", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
# HYPOTHESIS_PROFILE=fuzz runs every property 20 times longer (a fuzzing session, not CI).
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE")
    or ("ci" if os.environ.get("CI", "").lower() == "true" else "dev")
)


INTEGRATION_FOLDER = Path(__file__).resolve().parent / "integration"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of ``tests/integration/`` and those using a broker ``integration``."""
    for item in items:
        in_folder = INTEGRATION_FOLDER in item.path.parents
        uses_broker = "mosquitto_bin" in getattr(item, "fixturenames", ())
        if in_folder or uses_broker:
            item.add_marker(pytest.mark.integration)


# --- MQTT broker fixtures: a real Mosquitto per test, on a free port, in tmp_path -----------

MOSQUITTO_MISSING = (
    "mosquitto is not installed: the MQTT tests need a real broker; run "
    "`apt-get install mosquitto` (make test installs it when run as root)"
)


@pytest.fixture(scope="session")
def mosquitto_bin() -> Path:
    """Path of the mosquitto executable; fails under CI=true when missing, else skips."""
    found = find_mosquitto()
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(MOSQUITTO_MISSING)
        pytest.skip(MOSQUITTO_MISSING)
    return found


@pytest.fixture
def broker(mosquitto_bin: Path, tmp_path: Path) -> Iterator[RunningBroker]:
    """A Mosquitto broker on a free port with its files in ``tmp_path / "broker"``."""
    running = start_broker(prefer="mosquitto", workdir=tmp_path / "broker")
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def broker_settings(broker: RunningBroker) -> BrokerSettings:
    """Settings that point a client at the ``broker`` fixture."""
    return BrokerSettings(host=broker.host, port=broker.port)
