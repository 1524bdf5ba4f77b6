"""Wire encodings (float32/float16, zlib): bytes per update, codec time, and accuracy effect.

Usage: python benchmarks/bench_wire_precision.py [--repeats 5] [--seeds 0 1] [--rounds 40]
       [--parts bytes sim] [--train-epochs 1]

Part ``bytes``: for the ``compact`` (60,432 parameters) and ``paper`` (4,409,036
parameters) zoo models, encodes one weight vector with
:func:`faultfleet.wire.codec.encode_tensors` in each of float32/none, float32/zlib,
float16/none and float16/zlib, and decodes it with ``decode_tensors``. That covers the
body of a fit update or a single-model task; the frame's JSON header adds about 300 bytes.
Two vectors per model: ``init``, the seed-0 initialisation, and ``trained``, the same after
``--train-epochs`` epochs of local training (Adam 5e-4, B = 32) on a simulated mixed-fault
machine. zlib on a fresh initialisation (zero biases, uniform draws) is not what agents
send. Prints bytes, the ratio to float32/none, median encode and decode milliseconds over
``--repeats``, the largest absolute rounding error, and the rounding error relative to the
norm of the update (trained − init), which is what FLACC compares between clients.

Part ``sim``: runs :func:`faultfleet_apps.simulation.runner.run_simulation` with the ``quick``
profile (compact model, 18 machines, 40 rounds, FLACC) for each seed in ``--seeds``, with
the in-process fleet's codec hook set to the encoding under test
(:class:`faultfleet_apps.simulation.wire_codec.WireCodec`): every task's and every result's
weights pass through ``encode_tensors``/``decode_tensors`` as over MQTT, agents train from
the decoded task weights, and each result's delta is recomputed from the decoded weights
minus the coordinator's float32 task weights, as ``MqttFleet`` computes it. zlib is
lossless (the bytes part shows a max_abs_err of 0 for float32/zlib), so only the dtypes
are simulated. Prints final accuracy, clusters found and ARI per seed and encoding, and the
megabytes carried (the encoded bodies). Numbers only, no pass/fail.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from edge_agent.training import local_update
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.tasks import (
    TrainConfig,
)
from faultfleet.types import FloatArray
from faultfleet.wire.codec import decode_tensors, encode_tensors
from faultfleet.wire.messages import DType, TensorEncoding
from faultfleet.wire.settings import DEFAULT_MAX_PAYLOAD_BYTES
from faultfleet_apps.simulation import runner
from faultfleet_apps.simulation.config import profile
from faultfleet_apps.simulation.wire_codec import WireCodec
from signal_pipeline.federation import Federation
from signal_pipeline.scenarios import mixed_fault_client

SAMPLE_SHAPE = (1, 1024)
N_CLASSES = 12
SIM_DTYPES: tuple[DType, ...] = ("float32", "float16")
ENCODINGS = tuple(
    TensorEncoding(dtype=dtype, compression=compression)
    for dtype in ("float32", "float16")
    for compression in ("none", "zlib")
)


def round_trip(
    models: Mapping[str, FloatArray], encoding: TensorEncoding
) -> tuple[dict[str, FloatArray], int]:
    """``models`` as a receiver decodes them after encoding, and the body's size in bytes."""
    return WireCodec(encoding, DEFAULT_MAX_PAYLOAD_BYTES)(models)


# -- part "bytes" ----------------------------------------------------------------------------


def median_ms(run: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``repeats`` calls of ``run``, milliseconds."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def codec_ms(
    tensors: Mapping[str, FloatArray], encoding: TensorEncoding, repeats: int
) -> tuple[float, float]:
    """Median encode and decode times of ``tensors`` in ``encoding``, milliseconds."""
    body = encode_tensors(tensors, encoding)
    expected = {name: int(value.size) for name, value in tensors.items()}

    def decode() -> object:
        return decode_tensors(body, encoding, expected, max_bytes=DEFAULT_MAX_PAYLOAD_BYTES)

    return median_ms(lambda: encode_tensors(tensors, encoding), repeats), median_ms(decode, repeats)


def weight_vectors(model: nn.Module, epochs: int) -> dict[str, FloatArray]:
    """``init`` and ``trained`` flat weights of ``model``."""
    init = flatten_weights(model)
    client = mixed_fault_client(0, 0, clients_per_group=1, windows_per_client=(200, 200))
    config = TrainConfig("adam", 5e-4, epochs=epochs, batch_size=32)
    trained = local_update(model, init, client.train, config, 0, torch.device("cpu")).weights
    return {"init": init, "trained": trained}


def bytes_part(models: Sequence[str], repeats: int, epochs: int) -> None:
    """Print the bytes/time/error table."""
    print(
        f"{'model':<8}{'weights':<9}{'encoding':<15}{'bytes':>11}{'ratio':>7}{'enc_ms':>9}"
        f"{'dec_ms':>9}{'max_abs_err':>13}{'err/|update|':>14}",
        flush=True,
    )
    for name in models:
        vectors = weight_vectors(build_model(name, SAMPLE_SHAPE, N_CLASSES, seed=0), epochs)
        update_norm = float(np.linalg.norm(vectors["trained"] - vectors["init"]))
        for kind, weights in vectors.items():
            tensors = {"weights": weights}
            plain = len(encode_tensors(tensors, ENCODINGS[0]))
            for encoding in ENCODINGS:
                decoded, size = round_trip(tensors, encoding)
                error = decoded["weights"] - weights
                encode_ms, decode_ms = codec_ms(tensors, encoding, repeats)
                relative = float(np.linalg.norm(error)) / update_norm
                label = f"{encoding.dtype}/{encoding.compression}"
                print(
                    f"{name:<8}{kind:<9}{label:<15}{size:>11}{size / plain:>7.3f}"
                    f"{encode_ms:>9.2f}{decode_ms:>9.2f}{float(np.abs(error).max()):>13.2e}"
                    f"{relative:>14.2e}",
                    flush=True,
                )


# -- part "sim" ------------------------------------------------------------------------------


def simulate(
    seed: int, encoding: TensorEncoding, rounds: int | None, federation: Federation
) -> runner.SimResult:
    """One quick-profile run with every weight passing through ``encoding``."""
    config = profile("quick", seed=seed, rounds=rounds)
    return runner.run_simulation(config, federation=federation, codec=WireCodec(encoding))


def sim_part(seeds: Sequence[int], rounds: int | None) -> None:
    """Print final accuracy and clustering per seed and dtype."""
    print(
        f"{'seed':>4}  {'encoding':<15}{'accuracy':>9}{'clusters':>9}{'ARI':>7}{'MB':>9}"
        f"{'wall_s':>8}",
        flush=True,
    )
    accuracy: dict[str, list[float]] = {dtype: [] for dtype in SIM_DTYPES}
    for seed in seeds:
        federation = runner.build_federation(profile("quick", seed=seed))
        for dtype in SIM_DTYPES:
            result = simulate(seed, TensorEncoding(dtype=dtype), rounds, federation)
            final = result.final()
            carried = sum(r.bytes_up + r.bytes_down for r in result.history) / 1e6
            accuracy[dtype].append(float(final["accuracy"]))
            print(
                f"{seed:>4}  {dtype + '/none':<15}{final['accuracy']:>9.4f}"
                f"{final['num_clusters']:>9}{final['ari']:>7.3f}{carried:>9.1f}"
                f"{result.wall_seconds:>8.0f}",
                flush=True,
            )
    differences = np.subtract(accuracy["float16"], accuracy["float32"])
    print(
        f"accuracy float16 - float32 over {len(seeds)} seeds: mean {differences.mean():+.4f}, "
        f"largest |difference| {np.abs(differences).max():.4f}"
    )


def main() -> None:
    """Run the chosen parts and print their tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=["bytes", "sim"], choices=["bytes", "sim"])
    parser.add_argument("--models", nargs="+", default=["compact", "paper"], help="bytes part")
    parser.add_argument("--repeats", type=int, default=5, help="codec timings, bytes part")
    parser.add_argument("--train-epochs", type=int, default=1, help="'trained' weights")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="sim part")
    parser.add_argument("--rounds", type=int, default=None, help="sim part; profile's 40")
    args = parser.parse_args()
    print("command: python " + shlex.join(sys.argv))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} cpus, load average {load}; torch threads {torch.get_num_threads()}")
    if "bytes" in args.parts:
        bytes_part(args.models, args.repeats, args.train_epochs)
    if "sim" in args.parts:
        sim_part(args.seeds, args.rounds)


if __name__ == "__main__":
    main()
