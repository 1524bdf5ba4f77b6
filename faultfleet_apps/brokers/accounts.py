"""Broker accounts for a locked-down Mosquitto: passwords, the password file and the ACL.

:func:`create_accounts` gives every account (each agent id, ``coordinator``, a read-only
``historian``) a random password in its own file (mode 0600), writes the broker's password
file and the ACL, and returns the ``mosquitto.conf`` lines that switch anonymous access off.
The demo runs its broker this way, as a plant does (``deploy/mosquitto``).

The password file is written by ``mosquitto_passwd`` when it is installed, otherwise here in
the same Mosquitto 2 format (``user:$7$101$salt$hash``: PBKDF2-HMAC-SHA512, 101 iterations,
a 12-byte random salt, a 64-byte hash, both base64; OpenSSL's PBKDF2 through
:func:`hashlib.pbkdf2_hmac`). :data:`ACL_RULES` are the rules of
``deploy/mosquitto/faultfleet.acl``; a test keeps the two equal.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from faultfleet.wire.settings import DEFAULT_TOPIC_ROOT

PBKDF2_ITERATIONS = 101
"""What mosquitto_passwd of Mosquitto 2.0 uses (its ``$7$`` entries)."""
SALT_BYTES = 12
HASH_BYTES = 64
COORDINATOR = "coordinator"
HISTORIAN = "historian"
"""The read-only account the ACL names for consumers of diagnoses (the demo's monitor)."""
STATUS = "status"
"""The read-only account of ``faultfleet status``: it also reads the agents' heartbeats."""

ACL_RULES = """\
pattern readwrite faultfleet/v1/agents/%u/status
pattern write faultfleet/v1/agents/%u/results
pattern write faultfleet/v1/agents/%u/diagnoses
pattern write faultfleet/v1/agents/%u/heartbeat
pattern read faultfleet/v1/agents/%u/tasks
pattern read faultfleet/v1/agents/%u/assignment
pattern read faultfleet/v1/clusters/+/model
pattern read faultfleet/v1/coordinator/status
user coordinator
topic readwrite faultfleet/v1/#
user status
topic read faultfleet/v1/coordinator/status
topic read faultfleet/v1/agents/+/status
topic read faultfleet/v1/agents/+/heartbeat
topic read faultfleet/v1/agents/+/diagnoses
topic read faultfleet/v1/ingest/+/status
topic deny faultfleet/v1/agents/status/#
topic deny faultfleet/v1/clusters/#
user historian
topic read faultfleet/v1/agents/+/diagnoses
topic read faultfleet/v1/agents/+/status
topic read faultfleet/v1/coordinator/status
user ingest
topic read faultfleet/v1/agents/+/results
topic read faultfleet/v1/ingest/plan
topic write faultfleet/v1/ingest/+/status
topic write faultfleet/v1/ingest/+/summaries
topic write faultfleet/v1/ingest/+/answers/+
topic deny faultfleet/v1/agents/ingest/#
topic deny faultfleet/v1/clusters/#
"""
"""The rules of deploy/mosquitto/faultfleet.acl, for the topic root ``faultfleet/v1``."""


def acl_text(topic_root: str = DEFAULT_TOPIC_ROOT) -> str:
    """:data:`ACL_RULES` for ``topic_root``."""
    return ACL_RULES.replace(DEFAULT_TOPIC_ROOT + "/", topic_root + "/")


def password_entry(user: str, password: str, salt: bytes | None = None) -> str:
    """One line of a Mosquitto 2 password file (``$7$``: PBKDF2-HMAC-SHA512).

    Parameters
    ----------
    user, password : str
    salt : bytes, optional
        12 random bytes by default; pass them only to reproduce an entry.
    """
    if ":" in user or not user:
        raise ValueError(f"username {user!r} must be non-empty and hold no ':'")
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    digest = hashlib.pbkdf2_hmac(
        "sha512", password.encode("utf-8"), salt, PBKDF2_ITERATIONS, HASH_BYTES
    )
    encoded = [base64.b64encode(part).decode("ascii") for part in (salt, digest)]
    return f"{user}:$7${PBKDF2_ITERATIONS}${encoded[0]}${encoded[1]}"


def write_password_file(path: Path, passwords: dict[str, str]) -> str:
    """The broker's password file for ``passwords`` (user → password); returns the writer.

    ``"mosquitto_passwd"`` when it is installed, else ``"hashlib"`` (:func:`password_entry`).
    The file is created anew with mode 0600.
    """
    path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    tool = shutil.which("mosquitto_passwd")
    if tool is not None:
        path.touch(mode=0o600)
        for user, password in passwords.items():
            subprocess.run([tool, "-b", str(path), user, password], check=True, capture_output=True)
        return "mosquitto_passwd"
    lines = "".join(f"{password_entry(u, p)}\n" for u, p in passwords.items())
    _write_private(path, lines)
    return "hashlib"


def _write_private(path: Path, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)


@dataclass(frozen=True)
class BrokerAccounts:
    """The files of :func:`create_accounts`."""

    folder: Path
    password_file: Path
    """The broker's (hashed) password file."""
    acl_file: Path
    users: tuple[str, ...]
    writer: str
    """What wrote the password file: ``mosquitto_passwd`` or ``hashlib``."""

    def password_path(self, user: str) -> Path:
        """The file holding ``user``'s password, as ``broker.password_file`` takes it."""
        return self.folder / "passwords" / f"{user}.password"

    def mosquitto_lines(self) -> list[str]:
        """``mosquitto.conf`` lines: every client logs in and the ACL applies."""
        return [
            "allow_anonymous false",
            f"password_file {self.password_file}",
            f"acl_file {self.acl_file}",
        ]


def create_accounts(
    folder: Path, agent_ids: Sequence[str], topic_root: str = DEFAULT_TOPIC_ROOT
) -> BrokerAccounts:
    """Random passwords for the agents, ``coordinator``, ``historian`` and ``status``, and the
    broker files.

    Parameters
    ----------
    folder : Path
        Receives ``passwords/<user>.password`` (0600 each), ``mosquitto.passwd`` and
        ``faultfleet.acl``.
    agent_ids : sequence of str
        One account each, named after the agent (the ACL's ``%u``).
    topic_root : str
    """
    users = (*agent_ids, COORDINATOR, HISTORIAN, STATUS)
    if len(set(users)) != len(users):
        raise ValueError(f"account names must be distinct; got {list(users)}")
    passwords = {user: secrets.token_urlsafe(24) for user in users}
    (folder / "passwords").mkdir(parents=True, exist_ok=True)
    accounts = BrokerAccounts(
        folder=folder,
        password_file=folder / "mosquitto.passwd",
        acl_file=folder / "faultfleet.acl",
        users=users,
        writer="",
    )
    for user, password in passwords.items():
        _write_private(accounts.password_path(user), password + "\n")
    writer = write_password_file(accounts.password_file, passwords)
    accounts.acl_file.write_text(acl_text(topic_root), encoding="utf-8")
    return BrokerAccounts(folder, accounts.password_file, accounts.acl_file, users, writer)
