"""``faultfleet agent`` limits glibc's malloc arenas before any of its agents has a thread."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from faultfleet.wire.signing import SigningKey
from faultfleet_apps.brokers.launch import free_port
from faultfleet_apps.cli.main import main


class StopHereError(Exception):
    """Raised in place of the arena limit, to stop the command there."""


def test_the_arena_limit_comes_before_the_agents_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: a valid agent configuration; the limit records the threads alive when it runs.
    key = SigningKey.generate().public_text
    config = tmp_path / "agent.toml"
    config.write_text(
        f'agent_id = "m07"\nstate_dir = "{tmp_path}"\n[broker]\nhost = "127.0.0.1"\n'
        f'port = {free_port()}\n[signing]\ntrusted_keys = ["{key}"]\n',
        encoding="utf-8",
    )
    threads_before = threading.active_count()
    seen: list[int] = []

    def limit() -> None:
        seen.append(threading.active_count())
        raise StopHereError

    def no_agents(*args: object, **kwargs: object) -> None:
        raise AssertionError("the agents were built before the arena limit")

    monkeypatch.setattr("faultfleet_apps.cli.agent_run.limit_malloc_arenas", limit)
    monkeypatch.setattr("faultfleet_apps.cli.agent_run.AgentService", no_agents)

    # Execute: the command stops where the limit raises (an internal error to it).
    code = main(["agent", "--config", str(config), "--machines", "0-2"])

    # Assert: called once, while no thread of the command existed yet.
    assert code != 0
    assert seen == [threads_before]
