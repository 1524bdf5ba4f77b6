"""``faultfleet status`` on the command line: options, the watch loop, an unreachable broker.

The fleet over a real broker is tests/integration/test_status.py; the read-only account
with the plant's ACL is tests/deploy/test_mosquitto.py.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from faultfleet.wire.messages import AgentStatus
from faultfleet.wire.settings import BrokerSettings
from faultfleet.wire.topics import Topics
from faultfleet_apps.brokers.launch import free_port
from faultfleet_apps.cli.main import main
from faultfleet_apps.cli.status import watch
from faultfleet_apps.fleet_status.reader import FleetReader
from faultfleet_apps.fleet_status.view import FleetView
from tests.clocks import FakeClock, Wait


def test_status_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--help"]) == 0
    assert "--watch" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("option", "message"),
    [(["--watch", "0"], "--watch 0"), (["--timeout", "-1"], "--timeout -1")],
)
def test_intervals_must_be_positive(
    option: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Execute
    status = main(["status", *option])

    # Assert
    assert status == 2
    assert message in capsys.readouterr().err


def test_an_unreachable_broker_ends_with_status_2_and_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare: a port nothing listens on
    config = tmp_path / "status.toml"
    config.write_text(f'[broker]\nhost = "127.0.0.1"\nport = {free_port()}\n', encoding="utf-8")

    # Execute
    status = main(["status", "--config", str(config), "--timeout", "1"])

    # Assert
    err = capsys.readouterr().err
    assert status == 2
    assert "faultfleet: error: could not connect to the MQTT broker at 127.0.0.1:" in err
    assert "refused: connection to 127.0.0.1:" in err


def test_watch_prints_every_interval_until_ctrl_c_and_exits_0() -> None:
    # Prepare: an agent in the view; Ctrl-C arrives during the third wait
    def interrupt_third(wait: Wait) -> None:
        if len(clock.waits) == 3:
            raise KeyboardInterrupt

    clock = FakeClock(on_wait=interrupt_third)
    view = FleetView(Topics())
    view.on_agent_status(
        Topics().agent_status("m01"),
        AgentStatus(agent_id="m01", state="online", timestamp=5.0).model_dump_json().encode(),
    )
    reader = FleetReader(BrokerSettings(), view, clock=clock)  # not started: no broker needed
    out = io.StringIO()

    # Execute
    status = watch(reader, interval_s=2.5, as_json=True, out=out, clock=clock)

    # Assert: one JSON document per refresh, 2.5 s apart
    documents = [json.loads(line) for line in out.getvalue().splitlines()]
    assert status == 0
    assert clock.timeouts == [2.5, 2.5, 2.5]
    assert len(documents) == 3
    assert [d["agents"][0]["state"] for d in documents] == ["online"] * 3
    assert [d["generated_at"] - documents[0]["generated_at"] for d in documents] == [0.0, 2.5, 5.0]
