"""The benchmarks are scripts run from their folder, whose helper modules they import as
top-level modules (``from process_memory import ...``); tests import them the same way."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))
