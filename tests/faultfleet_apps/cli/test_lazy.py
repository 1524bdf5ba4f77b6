"""Subcommand handlers imported when the command runs; a missing extra is a user error."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from faultfleet.errors import UsageError
from faultfleet_apps.cli.lazy import lazy_handler


def command_module(folder: Path, name: str, body: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module ``name`` in ``folder`` (on the path) with ``body``; returns its name."""
    (folder / f"{name}.py").write_text(body, encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


def test_the_module_is_imported_only_when_the_command_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = command_module(
        tmp_path, "lazy_command_ok", "def run(args):\n    return args.answer\n", monkeypatch
    )

    handler = lazy_handler(name, "run")
    assert name not in sys.modules

    assert handler(argparse.Namespace(answer=7)) == 7
    assert name in sys.modules


@pytest.mark.parametrize(("package", "extra"), [("matplotlib", "sim"), ("amqtt", "demo")])
def test_a_missing_extra_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, package: str, extra: str
) -> None:
    body = f'raise ModuleNotFoundError("No module named {package!r}", name="{package}.sub")\n'
    name = command_module(tmp_path, f"lazy_command_{package}", body, monkeypatch)

    with pytest.raises(
        UsageError, match=rf"needs {package}, .*pip install 'faultfleet\[{extra}\]'"
    ):
        lazy_handler(name, "run")(argparse.Namespace())


def test_another_missing_module_is_a_bug_not_a_user_error() -> None:
    handler = lazy_handler("faultfleet_apps.no_such_module", "run")

    with pytest.raises(ModuleNotFoundError):
        handler(argparse.Namespace())
