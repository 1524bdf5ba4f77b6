"""Test-wide configuration: Hypothesis profiles and the SciPy array-API switch.

``CI=true`` selects a derandomised profile so a CI run is reproducible; locally the
default profile explores new examples on every run.
"""

from __future__ import annotations

import os

# scikit-learn's estimator checks include an array-API check that skips itself unless SciPy's
# array-API support is switched on; switch it on (before SciPy is imported) so the contract
# suite runs whole instead of reporting skips.
os.environ.setdefault("SCIPY_ARRAY_API", "1")

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile("ci" if os.environ.get("CI", "").lower() == "true" else "dev")
