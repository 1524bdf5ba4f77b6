"""``torch.compile`` against eager PyTorch for one client's training step.

Usage: python benchmarks/bench_compile.py [--model compact] [--steps 60] [--repeats 3]
       [--threads 1] [--device cpu|cuda] [--mode default] [--json FILE]

Two copies of a zoo model from the same seed train on the same batches of random windows
(B = 32, shape (1, 1024), 12 classes) with Adam at 5e-4, the step of
:func:`edge_agent.training.local_update` (``zero_grad(set_to_none=True)``, cross-entropy,
backward, optimiser step): one eager, one wrapped in ``torch.compile(mode=--mode)``. The
first three steps of each are a warm-up; the compiled model's (which include tracing and
code generation) are timed as ``compile_s``. Then ``--repeats`` interleaved rounds of
``--steps`` steps each way. Prints the median milliseconds a step of each, the speed-up
eager / compiled (above 1: compiling pays) and the largest weight difference between the
two copies after the same steps (rounding of fused kernels; informational).

On the CPU the compiled step needs a C++ compiler (Inductor generates C++); on a GPU,
Triton. ``--device cuda`` trains with deterministic kernels, as agents and the simulator do
there (:func:`edge_agent.batching.select_device`), and times with
``torch.cuda.synchronize()`` around each round.
Numbers only, no pass/fail.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from edge_agent.batching import select_device
from edge_agent.optimisation import make_optimizer
from faultfleet.models.weights import flatten_weights
from faultfleet.models.zoo import build_model
from faultfleet.tasks import TrainConfig

SAMPLE_SHAPE = (1, 1024)
N_CLASSES = 12
BATCH = 32
BATCHES = 8
WARM_UP_STEPS = 3


def trainer(
    model: nn.Module, config: TrainConfig, batches: list[tuple[torch.Tensor, torch.Tensor]]
) -> Callable[[int], None]:
    """A function running ``n`` training steps of ``model`` over ``batches`` in turn."""
    optimizer = make_optimizer(model.parameters(), config)
    position = 0

    def steps(n: int) -> None:
        nonlocal position
        for _ in range(n):
            x, y = batches[position % len(batches)]
            position += 1
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()

    return steps


def timed(steps: Callable[[int], None], n: int, device: torch.device) -> float:
    """Seconds of ``steps(n)``, the GPU's queue drained before and after."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    steps(n)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def main() -> int:
    """Run the benchmark and print its numbers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="compact")
    parser.add_argument("--steps", type=int, default=60, help="steps per timed round")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads on the CPU")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--mode",
        default="default",
        choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
        help="torch.compile's mode",
    )
    parser.add_argument("--json", type=Path, help="also write the numbers to this JSON file")
    args = parser.parse_args()
    if args.steps < 1 or args.repeats < 1 or args.threads < 1:
        parser.error("--steps, --repeats and --threads must be >= 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here (CPU build or no GPU)")
    torch.set_num_threads(args.threads)
    device = select_device(args.device)  # on a GPU, deterministic kernels, as agents train
    generator = torch.Generator().manual_seed(0)
    batches = [
        (
            torch.randn(BATCH, *SAMPLE_SHAPE, generator=generator).to(device),
            torch.randint(0, N_CLASSES, (BATCH,), generator=generator).to(device),
        )
        for _ in range(BATCHES)
    ]
    config = TrainConfig("adam", 5e-4, epochs=1, batch_size=BATCH)
    eager_model = build_model(args.model, SAMPLE_SHAPE, N_CLASSES, seed=0).to(device)
    compiled_model = build_model(args.model, SAMPLE_SHAPE, N_CLASSES, seed=0).to(device)
    eager = trainer(eager_model, config, batches)
    compiled = trainer(
        torch.compile(compiled_model, mode=args.mode),  # type: ignore[arg-type]
        config,
        batches,
    )
    print(
        f"model {args.model} ({sum(p.numel() for p in eager_model.parameters())} parameters), "
        f"{args.device}, {args.threads} torch thread(s), B={BATCH}, Adam, mode {args.mode}; "
        f"torch {torch.__version__}",
        flush=True,
    )
    timed(eager, WARM_UP_STEPS, device)
    try:
        compile_s = timed(compiled, WARM_UP_STEPS, device)
    except Exception as error:  # Inductor's failures have many types
        print(f"torch.compile failed: {type(error).__name__}: {error}", file=sys.stderr)
        print("on the CPU it needs a C++ compiler (g++); on a GPU, Triton", file=sys.stderr)
        return 1
    print(f"compile and {WARM_UP_STEPS} warm-up steps: {compile_s:.1f} s", flush=True)
    eager_ms, compiled_ms = [], []
    for repeat in range(args.repeats):
        eager_ms.append(timed(eager, args.steps, device) / args.steps * 1e3)
        compiled_ms.append(timed(compiled, args.steps, device) / args.steps * 1e3)
        print(
            f"round {repeat + 1}: eager {eager_ms[-1]:.2f} ms/step, "
            f"compiled {compiled_ms[-1]:.2f} ms/step",
            flush=True,
        )
    difference = float(
        np.max(np.abs(flatten_weights(eager_model) - flatten_weights(compiled_model)))
    )
    result: dict[str, Any] = {
        "benchmark": "compile",
        "model": args.model,
        "device": args.device,
        "threads": args.threads,
        "mode": args.mode,
        "steps": args.steps,
        "repeats": args.repeats,
        "compile_s": compile_s,
        "eager_ms_per_step": statistics.median(eager_ms),
        "compiled_ms_per_step": statistics.median(compiled_ms),
        "max_weight_difference": difference,
    }
    speedup = result["eager_ms_per_step"] / result["compiled_ms_per_step"]
    print(
        f"median of {args.repeats}: eager {result['eager_ms_per_step']:.2f} ms/step, "
        f"compiled {result['compiled_ms_per_step']:.2f} ms/step, speed-up {speedup:.2f}x "
        f"(above 1: compiling pays); largest |weight difference| {difference:.2e}"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
