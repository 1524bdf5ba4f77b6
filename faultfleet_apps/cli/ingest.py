"""``faultfleet ingest-worker``: one of N processes sharing a coordinator's update ingest."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from coordinator.adapters.metrics.ingest_worker import IngestWorkerMetrics
from coordinator.runtime.ingest_service import IngestWorkerService
from coordinator.runtime.ingest_worker_settings import IngestWorkerSettings
from faultfleet.metrics_http import serve_metrics
from faultfleet.wire.settings import load_settings
from faultfleet_apps.cli.runtime import stop_on_signals


def add_ingest_command(commands: Any) -> None:
    """Register ``ingest-worker``."""
    parser = commands.add_parser(
        "ingest-worker",
        help="run an ingest worker (checks, journals and sums updates for the coordinator)",
        description=(
            "Share the agents' fit updates with the other workers of one coordinator through "
            "an MQTT 5 shared subscription: check, decode and journal each update, send the "
            "coordinator its summary and, at each round's close, the partial sums. Needs an "
            "MQTT 5 broker (Mosquitto 2, or a clustered one). Settings: a TOML file plus "
            "FAULTFLEET_INGEST_* overrides."
        ),
    )
    parser.add_argument("--config", type=Path, required=True, help="ingest worker TOML file")
    parser.add_argument("--worker-id", help="overrides worker_id of the file")
    parser.add_argument(
        "--metrics-port",
        type=int,
        help="overrides metrics.port of the file (9402 by default; one port per worker of a "
        "host; 0 switches the endpoint off)",
    )
    parser.set_defaults(handler=run_ingest_worker)


def run_ingest_worker(args: argparse.Namespace) -> int:
    """``faultfleet ingest-worker``."""
    overrides: dict[str, Any] = {"worker_id": args.worker_id} if args.worker_id else {}
    if args.metrics_port is not None:
        overrides["metrics"] = {"port": args.metrics_port}
    settings = load_settings(IngestWorkerSettings, args.config, **overrides)
    metrics = IngestWorkerMetrics()
    server = serve_metrics(settings.metrics, metrics.registry)
    try:
        service = IngestWorkerService(settings, metrics)
        with stop_on_signals() as stop:
            service.run(stop)
    finally:
        if server is not None:
            server.stop()
    return 0
