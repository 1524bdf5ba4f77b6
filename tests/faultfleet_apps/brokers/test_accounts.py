"""Broker accounts: the ACL is the shipped one, and a real Mosquitto takes the password file."""

from __future__ import annotations

import base64
import hashlib
import stat
from pathlib import Path

import pytest

from faultfleet.wire.mqtt import MqttConnection
from faultfleet.wire.settings import BrokerSettings
from faultfleet_apps.brokers.accounts import (
    ACL_RULES,
    acl_text,
    create_accounts,
    password_entry,
)
from faultfleet_apps.brokers.launch import start_broker

SHIPPED_ACL = Path(__file__).resolve().parents[3] / "deploy" / "mosquitto" / "faultfleet.acl"


def test_the_rules_are_those_of_the_shipped_acl() -> None:
    lines = SHIPPED_ACL.read_text(encoding="utf-8").splitlines()

    rules = [line for line in lines if line.strip() and not line.startswith("#")]

    assert rules == ACL_RULES.splitlines()


def test_the_acl_follows_another_topic_root() -> None:
    text = acl_text("plant7/ff")

    assert "faultfleet/v1" not in text
    assert "pattern read plant7/ff/agents/%u/tasks" in text


def test_a_password_entry_is_mosquittos_pbkdf2_sha512_format() -> None:
    salt = bytes(range(12))

    entry = password_entry("m07", "secret", salt)

    user, rest = entry.split(":", 1)
    empty, kind, iterations, salt_text, hash_text = rest.split("$")
    assert (user, empty, kind, iterations) == ("m07", "", "7", "101")
    assert base64.b64decode(salt_text) == salt
    assert base64.b64decode(hash_text) == hashlib.pbkdf2_hmac("sha512", b"secret", salt, 101, 64)


def _login(port: int, user: str | None, password_file: Path | None) -> bool:
    """Whether the broker accepts ``user`` (None: anonymous) with ``password_file``'s password."""
    settings = BrokerSettings(
        host="127.0.0.1", port=port, username=user, password_file=password_file
    )
    connection = MqttConnection(
        client_id=f"test-{user or 'anonymous'}", settings=settings, reconnect_min_s=5.0
    )
    connection.start()
    try:
        return connection.wait_connected(3.0)
    finally:
        connection.stop()


@pytest.mark.parametrize("writer", ["mosquitto_passwd", "hashlib"])
def test_mosquitto_admits_each_account_with_its_own_password_only(
    mosquitto_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    # Prepare
    with monkeypatch.context() as patched:
        if writer == "hashlib":  # as on a host without mosquitto_passwd
            patched.setattr("faultfleet_apps.brokers.accounts.shutil.which", lambda name: None)
        accounts = create_accounts(tmp_path / "secrets", ["m00", "m01"])
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-it\n", encoding="utf-8")

    # Execute
    with start_broker(prefer="mosquitto", extra_config=accounts.mosquitto_lines()) as broker:
        admitted = {
            user: _login(broker.port, user, accounts.password_path(user)) for user in accounts.users
        }
        refused = [
            _login(broker.port, "m00", wrong),
            _login(broker.port, "m00", accounts.password_path("m01")),
            _login(broker.port, "nobody", accounts.password_path("m00")),
        ]
        anonymous = _login(broker.port, None, None)

    # Assert
    assert accounts.writer == writer
    assert admitted == dict.fromkeys(("m00", "m01", "coordinator", "historian", "status"), True)
    assert refused == [False, False, False]
    assert anonymous is False
    modes = {stat.S_IMODE(accounts.password_path(u).stat().st_mode) for u in accounts.users}
    assert modes == {0o600}


def test_account_names_must_be_distinct(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="distinct"):
        create_accounts(tmp_path, ["m00", "coordinator"])


def test_a_username_with_a_colon_cannot_be_written() -> None:
    with pytest.raises(ValueError, match="no ':'"):
        password_entry("m:07", "secret")
