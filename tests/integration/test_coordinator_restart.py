"""A coordinator killed with SIGKILL mid-round resumes from its state directory.

The coordinator runs as its own process (``python -m faultfleet_apps.cli.main coordinator``)
with two simulated agents training in this process and one fake agent, ``slow``, that holds back
its first answer of round 3. Once rounds 1 and 2 are checkpointed and both real agents'
round-3 updates are in the round journal, the coordinator is killed. Restarted with the
same configuration it must resume run and round (not start over), replay the journaled
updates instead of asking those agents again, re-send the one missing task unchanged, and
finish every round.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coordinator.adapters.journal import RoundJournal
from coordinator.runtime.run_summary import load_summary
from faultfleet.wire.codec import split_frame
from faultfleet.wire.messages import FitTaskMessage
from faultfleet.wire.settings import BrokerSettings

from .services import (
    broker_table,
    install_signing_key,
    kill,
    running_agents,
    start_cli,
    wait_until,
    write_toml,
)
from .wire_clients import (
    FakeAgents,
    Recorder,
)

ROUNDS = 4
KILLED_IN_ROUND = 3
REAL_AGENTS = ["m00", "m01"]


def _journal(state_dir: Path) -> tuple[int | None, set[str]]:
    """The round in the coordinator's round journal and the agents whose update it holds."""
    journal = RoundJournal(state_dir / "journal")
    try:
        answers = journal.accepted().values()
    except OSError:  # the coordinator cleared the journal while it was being read
        return None, set()
    agents = {split_frame(a, max_bytes=len(a))[0]["agent_id"] for a in answers}
    return journal.current_round(), agents


def _saved_round(state_dir: Path) -> int:
    summary = load_summary(state_dir)
    return 0 if summary is None else int(summary["server_round"])


@pytest.mark.timeout(600)  # one of the few long tests
def test_killed_coordinator_resumes_the_interrupted_round_from_its_state_dir(
    broker_settings: BrokerSettings, tmp_path: Path, recorder: Recorder
) -> None:
    # Prepare
    state_dir = tmp_path / "coordinator"
    settings: dict[str, Any] = {
        "state_dir": state_dir,
        "broker": broker_table(broker_settings),
        "metrics": {"port": 0},
        "run": {
            "strategy": "flacc",
            "rounds": ROUNDS,
            "fraction": 1.0,
            "min_agents": 3,
            "round_deadline_s": 600.0,  # never reached: the process is killed mid-round
            "eval_every": 100,
            "publish_every": 100,
        },
        "train": {"epochs": 1},
    }
    install_signing_key(state_dir)
    config = write_toml(tmp_path / "coordinator.toml", settings)
    command = ["coordinator", "--config", str(config), "--exit-when-done"]
    held: set[str] = set()

    def hold_first_round_3_answer(task: FitTaskMessage) -> float | None:
        if task.server_round == KILLED_IN_ROUND and task.task_id not in held:
            held.add(task.task_id)
            return None
        return 0.0

    slow = FakeAgents(broker_settings, ["slow"], policy=hold_first_round_3_answer)

    # Execute
    with running_agents(broker_settings, tmp_path / "agents", range(len(REAL_AGENTS))):
        first = start_cli(command, tmp_path / "first.log")
        second = None
        try:
            wait_until(
                lambda: (
                    _saved_round(state_dir) == KILLED_IN_ROUND - 1
                    and _journal(state_dir) == (KILLED_IN_ROUND, set(REAL_AGENTS))
                ),
                120,
                f"round {KILLED_IN_ROUND} to journal both real agents' updates",
            )
            kill(first)
            before = load_summary(state_dir)
            second = start_cli(command, tmp_path / "second.log")
            status = second.wait(timeout=120)
        finally:
            kill(first)
            if second is not None:
                kill(second)
            slow.stop()
    log = (tmp_path / "second.log").read_text(encoding="utf-8")

    # Assert: the second process resumed the same run at the interrupted round
    assert status == 0, log
    assert before is not None
    after = load_summary(state_dir)
    assert after is not None
    assert after["run_id"] == before["run_id"]
    assert (before["server_round"], after["server_round"]) == (KILLED_IN_ROUND - 1, ROUNDS)
    assert after["finished"]
    assert f"resumed run {before['run_id']} at round {KILLED_IN_ROUND - 1}" in log, log
    assert f"round {KILLED_IN_ROUND}: resuming the interrupted round" in log, log
    assert f"round {KILLED_IN_ROUND}/{ROUNDS}: 3 of 3 answered" in log, log

    # Assert: no earlier round was sent again, nor the journaled agents' round-3 tasks; the
    # one unanswered task went out again unchanged (task ids hash round, agent and weights)
    fit_tasks = {
        agent: [h for h in recorder.tasks(agent) if isinstance(h, FitTaskMessage)]
        for agent in [*REAL_AGENTS, "slow"]
    }
    for agent in REAL_AGENTS:
        assert [h.server_round for h in fit_tasks[agent]] == list(range(1, ROUNDS + 1)), agent
    # slow's round-3 task goes out again once, from the resumed round: slow's retained online
    # status, which the new process may read only after the round resumed, sends again only
    # tasks that left on an earlier connection of this process
    assert [h.server_round for h in fit_tasks["slow"]] == [1, 2, 3, 3, 4]
    first_try, second_try = (h.task_id for h in fit_tasks["slow"] if h.server_round == 3)
    assert first_try == second_try
