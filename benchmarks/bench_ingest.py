"""Coordinator ingest of fit updates over Mosquitto, against the broker's raw delivery rate.

Usage: python benchmarks/bench_ingest.py [--repeats 3] [--models compact paper]
       [--updates-compact 200] [--updates-paper 12] [--journal off shm disk]
       [--check-threads 2] [--held-budget-mb 268.4] [--json FILE]

Starts a private Mosquitto on 127.0.0.1 (``faultfleet_apps.brokers.launch.start_broker``) and one
publisher process that stays up for the whole run: a plain ``MqttConnection`` that sends
pre-built ``fit_update`` frames (QoS 1, one per fake agent, on
``{root}/agents/{agent}/results``) back to back. For each model it measures two receivers
of exactly the same frames from that same publisher:

* ``mosquitto_sub`` (raw): ``mosquitto_sub -q 1 -C N -t '{root}/agents/+/results'``, which
  receives and acknowledges each message and does nothing with it. Its rate is the raw
  broker throughput for these payloads on this machine.
* ``MqttFleet.fit`` (ours): the real coordinator path. An ``MqttFleet`` with a real
  ``MqttConnection``, ``RoundJournal`` and ``CoordinatorMetrics`` publishes one fit task per
  fake agent. The publisher answers once it has all N tasks; paho's network thread only
  queues each answer, and ``--check-threads`` worker threads check it: frame header,
  pydantic envelope, safetensors header, the weights as a view of the received bytes, a
  one-pass finiteness check (the update Δθ is derived later, when a strategy reads it);
  then the journal's writer thread writes the accepted updates in batches (one atomic,
  fsynced segment per batch) and counts them.

Both rates are timed from the publisher's first publish to the receiver's last message:
the receipt stamp ``mosquitto_sub -F %U`` prints for it, or the moment our last update was
journaled and counted. Frames are built before the clock starts, and the task download
happens before it too. All stamps are Unix time (``time.time``), which ``%U`` also uses,
so they compare across processes.

Why this baseline: ``mosquitto_pub -f file`` once per message would charge a process start
and an MQTT connection to every message of the baseline. That would understate the
broker's rate and flatter small payloads. One long-running publisher for both receivers
means the two runs differ only in the receiver. ``pub_s`` is the publisher's own time to
its last PUBACK; when it is close to the raw time, the raw rate is bounded by the sender
and the broker, not by ``mosquitto_sub``. The broker, the publisher and the receiver share
the machine's cores, as a coordinator sharing a gateway with its broker would.

A third receiver, ``paho, no-op``, is a bare ``MqttConnection`` whose handler only counts:
the ceiling of any paho-based receiver here, which separates paho's share of the gap from
the coordinator's.

Journal variants: ``off`` replaces ``RoundJournal.record_many`` with a no-op (not a real
configuration; it shows the journal's share), ``shm`` puts the journal on /dev/shm
(tmpfs), ``disk`` puts it under ``--disk-dir`` (its file system is printed). Each repeat
runs the raw receiver and then every variant, after one unmeasured warm-up of each, and
every round gets a fresh coordinator connection. Prints the medians over ``--repeats``
of updates/s and MB/s (10^6 bytes of MQTT payload), the ratio to raw, and the per-update
time of the answer check (``on_answer``, summed over the worker threads) and of the journal
writes (writer thread), ``cpu_ms``: the receiving process's CPU time per update, every
thread's, from its first message to its last (``mosquitto_sub``'s over its whole life, read
from the children's resource usage), and ``held_MB``: the most bytes of answers the
coordinator held at once between receiving and journaling them (largest over the repeats;
``--held-budget-mb`` bounds it, 256 MiB by default as in the product). On a machine whose
cores the broker, the publisher and the receiver share, CPU per update is what decides the
rate, and it varies far less between runs than the rate does.
On a shared machine the spread between runs is large: raise ``--repeats``. Numbers only,
no pass/fail.

The publisher process is in ``ingest_publisher.py``, the timed receivers in
``ingest_receivers.py``; this script measures and prints.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import multiprocessing
import os
import shlex
import shutil
import statistics
import sys
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
from ingest_publisher import expect, publisher_main
from ingest_receivers import Run, TimedJournal, Workload, fleet_round, paho_run, raw_run

from coordinator.adapters.byte_budget import ANSWER_BUDGET_BYTES
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.wire.codec import encode_tensors
from faultfleet.wire.messages import ModelSpec, TensorEncoding
from faultfleet_apps.brokers.launch import RunningBroker, start_broker

SAMPLE_SHAPE = (1, 1024)
N_CLASSES = 12


# -- reporting -------------------------------------------------------------------------------


def file_system(path: Path) -> str:
    """Type of the file system holding ``path`` (from /proc/mounts), e.g. ``ext4``."""
    target, best, kind = str(path.resolve()), "", "unknown"
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return kind
    for line in mounts:
        fields = line.split()
        if len(fields) > 2 and target.startswith(fields[1]) and len(fields[1]) > len(best):
            best, kind = fields[1], fields[2]
    return kind


def row(
    model: str, receiver: str, journal: str, n: int, runs: list[Run], raw: float
) -> dict[str, object]:
    """One table row from the runs of one cell; ``raw`` is the raw median updates/s."""
    seconds = statistics.median(r.seconds for r in runs)
    rate = n / seconds
    return {
        "model": model,
        "receiver": receiver,
        "journal": journal,
        "updates": n,
        "updates_per_s": rate,
        "mb_per_s": n * runs[0].frame_bytes / seconds / 1e6,
        "ratio_to_raw": rate / raw if raw > 0 else float("nan"),
        "wall_s": seconds,
        "publisher_s": statistics.median(r.publisher_seconds for r in runs),
        "check_ms": statistics.median(r.handler_seconds for r in runs) / n * 1e3,
        "journal_ms": statistics.median(r.journal_seconds for r in runs) / n * 1e3,
        "cpu_ms": statistics.median(r.cpu_seconds for r in runs) / n * 1e3,
        "held_mb": max(r.held_bytes for r in runs) / 1e6,
    }


def line(cells: dict[str, object]) -> str:
    """``cells`` (a :func:`row`) as a line of the printed table."""
    c: dict[str, Any] = cells
    return (
        f"{c['model']:<8}{c['receiver']:<15}{c['journal']:<8}{c['updates']:>6}"
        f"{c['updates_per_s']:>10.1f}{c['mb_per_s']:>9.1f}{c['ratio_to_raw']:>7.2f}"
        f"{c['wall_s']:>9.3f}{c['publisher_s']:>8.3f}{_ms(c['check_ms']):>11}"
        f"{_ms(c['journal_ms']):>11}{_ms(c['cpu_ms']):>8}{_ms(c['held_mb']):>9}"
    )


def _ms(value: float) -> str:
    return "-" if np.isnan(value) else f"{value:.2f}"


def main() -> None:
    """Run the benchmark and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=["compact", "paper"])
    parser.add_argument("--updates-compact", type=int, default=200, help="updates per round")
    parser.add_argument("--updates-paper", type=int, default=12, help="updates per round")
    parser.add_argument(
        "--journal", nargs="+", default=["off", "shm", "disk"], choices=["off", "shm", "disk"]
    )
    parser.add_argument("--disk-dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    parser.add_argument("--compression", choices=["none", "zlib"], default="none")
    parser.add_argument(
        "--check-threads", type=int, default=2, help="threads checking answers (>= 1)"
    )
    parser.add_argument(
        "--held-budget-mb",
        type=float,
        default=ANSWER_BUDGET_BYTES / 1e6,
        help="bytes of answers the coordinator holds between receipt and journal, 10^6",
    )
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if shutil.which("mosquitto_sub") is None:
        sys.exit("mosquitto_sub is not installed (apt-get install mosquitto-clients)")
    print("command: python " + shlex.join(sys.argv))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} cpus, load average {load}; median of {args.repeats} runs")
    roots = {"shm": Path("/dev/shm"), "disk": args.disk_dir}
    for kind, root in roots.items():
        if kind in args.journal:
            print(f"journal {kind}: {root} ({file_system(root)})")
    encoding = TensorEncoding(dtype=args.dtype, compression=args.compression)
    context = multiprocessing.get_context("spawn")
    with start_broker(prefer="mosquitto", persistence=False) as broker:
        pipe, child_pipe = context.Pipe()
        publisher = context.Process(
            target=publisher_main, args=(child_pipe, broker.port), daemon=True
        )
        publisher.start()
        try:
            expect(pipe, "ready")
            print(
                f"{'model':<8}{'receiver':<15}{'journal':<8}{'n':>6}{'upd/s':>10}{'MB/s':>9}"
                f"{'ratio':>7}{'wall_s':>9}{'pub_s':>8}{'check_ms':>11}{'journal_ms':>11}"
                f"{'cpu_ms':>8}{'held_MB':>9}",
                flush=True,
            )
            rows = []
            for model in args.models:
                n = args.updates_paper if model == "paper" else args.updates_compact
                rows += measure_model(broker, pipe, model, n, encoding, args, roots)
        finally:
            pipe.send(("stop",))
            publisher.join(timeout=30)
            if publisher.is_alive():
                publisher.terminate()
    if args.json is not None:
        args.json.write_text(json.dumps({"benchmark": "ingest", "rows": rows}, indent=1))


def measure_model(
    broker: RunningBroker,
    pipe: Connection,
    model: str,
    n: int,
    encoding: TensorEncoding,
    args: argparse.Namespace,
    roots: dict[str, Path],
) -> list[dict[str, object]]:
    """Print (and return) the raw row and one row per journal variant for ``model``.

    Receivers alternate within each repeat, so that a busy machine slows them alike. One
    unmeasured delivery to each kind of receiver runs first: a process's first rounds of
    large allocations are slower (page faults until glibc raises its mmap threshold).
    """
    weights = flatten_weights(build_model(model, SAMPLE_SHAPE, N_CLASSES, seed=0))
    noise = np.random.default_rng(0).standard_normal(len(weights), dtype=np.float32)
    trained = weights + np.float32(1e-3) * noise
    agents = [f"a{i:04d}" for i in range(n)]
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-ingest-")))
        body_path = folder / "body.bin"
        body_path.write_bytes(encode_tensors({"weights": trained}, encoding))
        spec = ModelSpec(name=model, sample_shape=SAMPLE_SHAPE, n_classes=N_CLASSES)
        command = (str(body_path), encoding.dtype, encoding.compression, agents)
        work = Workload(broker, pipe, agents, command, spec, weights, encoding)
        journals = {}
        for kind in args.journal:
            root = folder if kind == "off" else roots[kind]
            journal_dir = stack.enter_context(tempfile.TemporaryDirectory(dir=root))
            journals[kind] = TimedJournal(Path(journal_dir) / "journal", enabled=kind != "off")
        raw_run(work)
        paho_run(work)
        warm_up = TimedJournal(folder / "warm-up", enabled=False)
        held = int(args.held_budget_mb * 1e6)
        fleet_round(work, warm_up, 1, check_threads=args.check_threads, max_held_bytes=held)
        runs: dict[str, list[Run]] = {"raw": [], "paho": [], **{kind: [] for kind in journals}}
        for repeat in range(args.repeats):
            runs["raw"].append(raw_run(work))
            runs["paho"].append(paho_run(work))
            for kind, journal in journals.items():
                runs[kind].append(
                    fleet_round(
                        work,
                        journal,
                        repeat + 2,
                        check_threads=args.check_threads,
                        max_held_bytes=held,
                    )
                )
    raw = runs.pop("raw")
    raw_rate = n / statistics.median(r.seconds for r in raw)
    rows = [row(model, "mosquitto_sub", "-", n, raw, raw_rate)]
    rows.append(row(model, "paho, no-op", "-", n, runs.pop("paho"), raw_rate))
    rows += [row(model, "MqttFleet.fit", kind, n, got, raw_rate) for kind, got in runs.items()]
    for cells in rows:
        print(line(cells), flush=True)
    return rows


if __name__ == "__main__":
    main()
