"""Progress bars: drawn by tqdm where installed, quiet (messages still shown) without it."""

from __future__ import annotations

import pytest

import faultfleet_apps.progress
from faultfleet_apps.progress import Progress


def test_without_tqdm_the_bar_counts_quietly_and_still_prints_messages(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(faultfleet_apps.progress, "_tqdm", lambda: None)

    with Progress(5, desc="rounds", unit="round") as bar:
        bar.advance_to(2)
        bar.advance_to(1)  # never back
        bar.set_postfix({"acc": "0.5"})
        bar.write("m05 joined")

    assert bar.n == 2
    assert capsys.readouterr().err == "m05 joined\n"


def test_with_tqdm_the_bar_moves_to_the_steps_done(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tqdm")  # the sim extra, which make test installs

    with Progress(4, desc="machines", unit="machine") as bar:
        bar.advance_to(3)

    assert bar.n == 3
