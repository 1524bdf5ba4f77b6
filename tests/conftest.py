"""Test-wide configuration: Hypothesis profiles, the SciPy array-API switch, torch threads.

``CI=true`` selects a derandomised profile so a CI run is reproducible; locally the
default profile explores new examples on every run.
"""

from __future__ import annotations

import os

# scikit-learn's estimator checks include an array-API check that skips itself unless SciPy's
# array-API support is switched on; switch it on (before SciPy is imported) so the contract
# suite runs whole instead of reporting skips.
os.environ.setdefault("SCIPY_ARRAY_API", "1")

import torch
from hypothesis import HealthCheck, settings

# One torch thread: test models are tiny, and spinning worker threads only slow the suite
# down when another process shares the machine's cores.
torch.set_num_threads(1)

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile("ci" if os.environ.get("CI", "").lower() == "true" else "dev")
