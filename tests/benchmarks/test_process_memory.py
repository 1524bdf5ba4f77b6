"""``benchmarks/process_memory.py``: a process's own peak, not the one it inherits at exec."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from process_memory import own_peak_rss_bytes

MB = 1024 * 1024
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

CHILD = """
import json, resource, sys
sys.path.insert(0, {path!r})
from process_memory import own_peak_rss_bytes
rusage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({{"own": own_peak_rss_bytes(), "rusage": rusage}}))
"""


def test_own_peak_grows_with_what_the_process_touches() -> None:
    # Prepare
    before = own_peak_rss_bytes()

    # Execute: touch 64 MB more than this process holds
    block = bytearray(before + 64 * MB)
    after = own_peak_rss_bytes()
    del block

    # Assert
    assert after >= before + 64 * MB


def test_a_child_started_from_a_large_parent_reports_its_own_peak() -> None:
    # Prepare: this process holds 400 MB more than a fresh interpreter when it starts one
    held = bytearray(400 * MB)
    held[::4096] = b"\x01" * len(held[::4096])

    # Execute
    done = subprocess.run(
        [sys.executable, "-c", CHILD.format(path=str(BENCHMARKS))],
        capture_output=True,
        text=True,
        check=True,
    )
    del held
    child = json.loads(done.stdout)

    # Assert: the child, a bare interpreter, peaks far below the 400 MB its parent held;
    # ru_maxrss, which Linux carries across exec, may say otherwise
    assert child["own"] < 200 * MB
    assert child["own"] <= child["rusage"]
