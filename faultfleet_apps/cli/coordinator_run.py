"""``faultfleet coordinator``: the coordinator service, until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
import logging

from coordinator.adapters.metrics import CoordinatorMetrics
from coordinator.runtime.service import CoordinatorService
from coordinator.runtime.settings import CoordinatorSettings
from faultfleet.metrics_http import serve_metrics
from faultfleet.wire.settings import load_settings
from faultfleet_apps.cli.runtime import set_verbosity, stop_on_signals

logger = logging.getLogger(__name__)


def run_coordinator(args: argparse.Namespace) -> int:
    """``faultfleet coordinator``."""
    settings = load_settings(CoordinatorSettings, args.config)
    set_verbosity(args.verbose)
    metrics = CoordinatorMetrics()
    server = serve_metrics(settings.metrics, metrics.registry)
    try:
        with stop_on_signals() as stop:
            service = CoordinatorService(settings, metrics)
            summary = service.run(stop, exit_when_done=args.exit_when_done)
    finally:
        if server is not None:
            server.stop()
    if summary is not None:
        logger.info("stopped at round %d of %d", summary.server_round, summary.rounds)
    return 0
