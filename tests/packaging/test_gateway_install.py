"""A gateway installs faultfleet without its extras: no matplotlib or tqdm (``sim``), no amqtt
(``demo``).

The checks run in one fresh interpreter whose imports of matplotlib, tqdm and amqtt fail as
if they were not installed (a meta-path finder raises ModuleNotFoundError), so whatever the
test process already imported does not hide a stray import. The service commands load
neither the extras nor the simulator: ``faultfleet`` imports a command's run only when the
command runs (:mod:`faultfleet_apps.cli.lazy`).
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import faultfleet
from faultfleet_apps.cli.main import main

WITHOUT_EXTRAS = textwrap.dedent(
    """
    import importlib.abc
    import sys

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in {"matplotlib", "tqdm", "amqtt"}:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
    """
)


def run_without_extras(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new interpreter where matplotlib, tqdm and amqtt cannot be imported."""
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRAS + textwrap.dedent(code)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


GATEWAY_SESSION = """
    import contextlib
    import io
    import json

    import coordinator.runtime.service
    import edge_agent.service

    from faultfleet_apps.cli.main import main

    report = {"imported": ["coordinator.runtime.service", "edge_agent.service"]}
    for command in ("agent", "coordinator", "sim"):
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown):
            status = main([command, "--help"])
        report[command] = {"status": status, "help": shown.getvalue()}
    said = io.StringIO()
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        report["list"] = {"status": main(["sim", "--list-options", "flacc"])}
    report["list"]["stdout"] = shown.getvalue()
    simulator = ("faultfleet_apps.simulation.runner", "faultfleet_apps.cli.sim_run")
    report["applications_before_a_run"] = sorted(m for m in simulator if m in sys.modules)
    with contextlib.redirect_stderr(said):
        report["run"] = {"status": main(["sim", "--out", OUT, "--rounds", "1"])}
    report["run"]["stderr"] = said.getvalue()
    extras = {"matplotlib", "tqdm", "amqtt"}
    report["loaded"] = sorted(m for m in sys.modules if m.partition(".")[0] in extras)
    print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What a session without the extras saw: service imports, help texts, ``sim``."""
    folder = tmp_path_factory.mktemp("gateway")
    code = GATEWAY_SESSION.replace("OUT", repr(str(folder / "sim")))
    result = run_without_extras(code, folder)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr[-3000:]
    report: dict[str, Any] = json.loads(result.stdout)
    report["folder"] = folder
    return report


def test_the_blocker_really_blocks(tmp_path: Path) -> None:
    result = run_without_extras("import matplotlib", tmp_path)

    assert result.returncode == 1
    assert "ModuleNotFoundError: No module named 'matplotlib'" in result.stderr


def test_service_modules_import_without_extras(gateway: dict[str, Any]) -> None:
    assert gateway["imported"] == ["coordinator.runtime.service", "edge_agent.service"]
    assert gateway["loaded"] == []


@pytest.mark.parametrize("command", ["agent", "coordinator", "sim"])
def test_every_help_needs_no_extras(gateway: dict[str, Any], command: str) -> None:
    assert gateway[command]["status"] == 0
    assert f"usage: faultfleet {command}" in gateway[command]["help"]


def test_help_and_option_listings_load_no_simulator(gateway: dict[str, Any]) -> None:
    assert gateway["applications_before_a_run"] == []
    assert gateway["list"]["status"] == 0
    assert "n_sep" in gateway["list"]["stdout"]


def test_a_command_that_draws_figures_asks_for_the_sim_extra_before_running(
    gateway: dict[str, Any],
) -> None:
    sim = gateway["run"]

    lines = sim["stderr"].strip().splitlines()
    assert sim["status"] == 2
    assert len(lines) == 1, sim["stderr"]
    assert "needs matplotlib" in lines[0]
    assert "pip install 'faultfleet[sim]'" in lines[0]
    assert not (gateway["folder"] / "sim").exists()  # it stopped before simulating anything


def test_version_option_prints_the_installed_package_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--version"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == f"faultfleet {importlib.metadata.version('faultfleet')}"
    assert importlib.metadata.version("faultfleet") == faultfleet.__version__
