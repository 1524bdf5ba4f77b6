"""The command line asks OpenMP to wait passively before torch is loaded, unless told."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PROBE = (
    "import sys, faultfleet_apps.cli, os\n"
    "assert 'torch' not in sys.modules, 'torch was loaded before the setting'\n"
    "print(os.environ['OMP_WAIT_POLICY'])"
)


@pytest.mark.parametrize(("given", "expected"), [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_passive_waiting_is_the_default_before_torch_loads(
    given: str | None, expected: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["PYTHONPATH"] = str(ROOT)
    if given is not None:
        env["OMP_WAIT_POLICY"] = given

    printed = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    ).stdout

    assert printed.strip() == expected
