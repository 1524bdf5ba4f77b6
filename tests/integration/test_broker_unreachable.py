"""A coordinator started while its broker is unreachable says why at once, not only at stop.

Before, it logged only "waiting for agents: 0 of 2 online" for as long as the broker stayed
away; now the connection's first failed try is a WARNING naming the reason, and the wait
line names the broker and the reason too.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from coordinator.runtime.service import CoordinatorService
from faultfleet.wire.settings import BrokerSettings
from faultfleet_apps.brokers.launch import free_port

from .services import coordinator_settings, wait_until


def test_a_coordinator_without_its_broker_logs_the_reason_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: a port nothing listens on
    port = free_port()
    settings = coordinator_settings(
        BrokerSettings(host="127.0.0.1", port=port), tmp_path / "coordinator"
    )
    service = CoordinatorService(settings)
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), name="coordinator")

    # Execute
    with caplog.at_level(logging.INFO):
        thread.start()
        try:
            wait_until(
                lambda: any("waiting for agents" in m for m in caplog.messages),
                60,
                "the coordinator's wait line",
            )
            wait_until(
                lambda: any(r.levelno == logging.WARNING for r in caplog.records),
                60,
                "a warning",
            )
        finally:
            stop.set()
            thread.join(60)

    # Assert
    warning = next(r for r in caplog.records if r.levelno == logging.WARNING)
    assert warning.name == "faultfleet.wire.mqtt"
    assert f"to broker 127.0.0.1:{port}: refused: connection to 127.0.0.1:{port} refused" in (
        warning.getMessage()
    )
    waiting = next(m for m in caplog.messages if "waiting for agents" in m)
    assert waiting.startswith(
        f"waiting for agents: 0 of 2 online (not connected to broker 127.0.0.1:{port}"
    )
