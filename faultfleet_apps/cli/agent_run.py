"""``faultfleet agent``: one edge agent, or one per simulated machine (``--machines``).

The agents of a process share one metrics registry and take turns training
(:class:`~edge_agent.compute_turns.ComputeTurns`). Torch is not loaded when they start:
the process decides its torch threads at once (:func:`~faultfleet_apps.thread_policy.
decide_training_threads`) and sets them as each task's turn begins, one thread for a small
model unless ``--threads`` or ``OMP_NUM_THREADS`` asks for more; the first agent to train
loads torch (:mod:`edge_agent.task_compute`), and an agent that only diagnoses never does.
Before its agents start their threads the process limits glibc's malloc arenas and fixes
its mmap threshold, and from then on it hands glibc's free pages back every minute
(``--malloc-trim-s``; :mod:`faultfleet_apps.malloc_policy`), which keeps a long-running
process's memory flat.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from collections.abc import Callable

from edge_agent.compute_turns import ComputeTurns
from edge_agent.incoming import IncomingRefusal
from edge_agent.metrics import AgentMetrics
from edge_agent.retire import RetireError, retire_agent
from edge_agent.service import AgentService
from edge_agent.settings import AgentSettings, SourceSettings
from edge_agent.source_types import WindowSource
from edge_agent.sources import LiveSensorSource, RecordingFolderSource, SimulatedMachineSource
from faultfleet.errors import UsageError
from faultfleet.metrics_http import serve_metrics
from faultfleet.wire.settings import load_settings
from faultfleet_apps.cli.runtime import set_verbosity, stop_on_signals
from faultfleet_apps.malloc_policy import Trimmer, fix_mmap_threshold, limit_malloc_arenas
from faultfleet_apps.thread_policy import decide_training_threads
from signal_pipeline.scenarios import MIXED_FAULT_CLASS_NAMES

logger = logging.getLogger(__name__)


def build_source(
    source: SourceSettings,
    interval_s: float,
    class_names: tuple[str, ...],
    on_refused: Callable[[IncomingRefusal], None] | None = None,
) -> WindowSource:
    """The window source the settings describe; ``on_refused`` counts the incoming files a
    recordings folder refuses."""
    if source.kind == "simulated":
        return SimulatedMachineSource(
            scenario=source.scenario,
            seed=source.seed,
            machine_index=source.machine_index,
            interval_s=interval_s,
            snr_db=source.snr_db,
            clients_per_group=source.clients_per_group,
            windows_per_client=source.windows_per_client,
        )
    if source.kind == "recordings":
        assert source.path is not None
        return RecordingFolderSource(
            source.path,
            window_length=source.window_length,
            interval_s=interval_s,
            poll_s=source.poll_s,
            manifest_outside_folder=source.manifest_outside_folder,
            max_incoming_bytes=source.max_incoming_bytes,
            on_refused=on_refused,
        )
    return LiveSensorSource(
        (1, source.window_length), class_names or MIXED_FAULT_CLASS_NAMES, fs_hz=source.fs_hz
    )


def _retire(settings: AgentSettings, machines: range | None) -> int:
    """``faultfleet agent --retire``: one agent, or each of ``--machines``."""
    ids = [settings.agent_id] if machines is None else [machine_id(settings, i) for i in machines]
    failed = []
    for agent_id in ids:
        try:
            retire_agent(settings.model_copy(update={"agent_id": agent_id}))
        except RetireError as error:
            print(f"faultfleet: error: {error}", file=sys.stderr)
            failed.append(agent_id)
            continue
        print(f"agent {agent_id} retired")
    if failed:
        print(f"faultfleet: error: not retired: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def machine_id(settings: AgentSettings, index: int) -> str:
    """Agent id of simulated machine ``index`` under ``--machines``."""
    return f"{settings.agent_id}{index:02d}"


def run_agent(args: argparse.Namespace) -> int:
    """``faultfleet agent``."""
    settings = load_settings(AgentSettings, args.config)
    set_verbosity(args.verbose)
    machines: range | None = args.machines
    if machines is not None and settings.source.kind != "simulated":
        raise UsageError("--machines runs simulated machines; set [source] kind = 'simulated'")
    if args.retire:
        return _retire(settings, machines)
    configs = (
        [settings]
        if machines is None
        else [
            settings.model_copy(
                update={
                    "agent_id": machine_id(settings, index),
                    "state_dir": settings.state_dir / machine_id(settings, index),
                    "source": settings.source.model_copy(update={"machine_index": index}),
                }
            )
            for index in machines
        ]
    )
    limit_malloc_arenas()  # before any agent starts a thread (faultfleet_apps.malloc_policy)
    fix_mmap_threshold()
    trimmer = Trimmer(args.malloc_trim_s)
    training_threads = decide_training_threads(args.threads)
    compute_lock = ComputeTurns()
    metrics = AgentMetrics()
    sources = [
        build_source(c.source, c.diagnosis.interval_s, (), metrics.incoming_refused)
        for c in configs
    ]
    metrics.set_class_names(sources[0].class_names)
    server = serve_metrics(settings.metrics, metrics.registry)
    failed: list[str] = []
    try:
        with stop_on_signals() as stop:
            services = [
                AgentService(
                    c,
                    s,
                    metrics=metrics,
                    compute_lock=compute_lock,
                    training_threads=training_threads.for_model,
                )
                for c, s in zip(configs, sources, strict=True)
            ]

            def serve(agent: AgentService) -> None:
                try:
                    agent.run(stop)
                except Exception:
                    logger.exception("agent %s stopped on an error", agent.agent_id)
                    failed.append(agent.agent_id)
                    stop.set()

            threads = [threading.Thread(target=serve, args=(a,), name=a.agent_id) for a in services]
            for thread in threads:
                thread.start()
            logger.info("%d agent(s) running; Ctrl-C stops them", len(services))
            while any(t.is_alive() for t in threads):
                stop.wait(0.5)
                trimmer.tick()
                if stop.is_set():
                    for thread in threads:
                        thread.join()
    finally:
        if server is not None:
            server.stop()
    if failed:
        print(
            f"faultfleet: error: agent(s) {', '.join(failed)} stopped on an error", file=sys.stderr
        )
        return 1
    return 0
