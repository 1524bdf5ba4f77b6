"""A real Mosquitto running the plant's configuration, and clients that log in to it.

The broker runs ``deploy/mosquitto/faultfleet.conf`` (its listener lines replaced by the
test broker's own, its file paths pointed at the test's password file and at the real
``faultfleet.acl``), plus ``tls.conf.example`` on a second listener with a throw-away CA.
The ``plant`` and ``broker`` fixtures (tests/deploy/conftest.py) start it once per module.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from faultfleet_apps.brokers.launch import RunningBroker, find_mosquitto, free_port, start_broker

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "mosquitto"
ROOT = "faultfleet/v1"
PASSWORDS = {
    "m01": "m01-secret",
    "m02": "m02-secret",
    "coordinator": "coord-secret",
    "status": "status-secret",
    "ingest": "ingest-secret",
}
TIMEOUT_S = 30.0


def missing(message: str) -> NoReturn:
    """Fail under CI, where every tool must be installed; skip elsewhere."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def require_mosquitto() -> tuple[Path, str]:
    """The broker and mosquitto_passwd."""
    mosquitto, passwd = find_mosquitto(), shutil.which("mosquitto_passwd")
    if mosquitto is None or passwd is None:
        missing("mosquitto and mosquitto_passwd are needed: apt-get install mosquitto")
    return mosquitto, passwd


def plant_config(password_file: Path) -> list[str]:
    """faultfleet.conf's settings, without its listeners and with the test's file paths."""
    lines = []
    for raw in (DEPLOY / "faultfleet.conf").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "listener ")):
            continue
        if line.startswith("password_file "):
            line = f"password_file {password_file}"
        elif line.startswith("acl_file "):
            line = f"acl_file {DEPLOY / 'faultfleet.acl'}"
        lines.append(line)
    return lines


@dataclass(frozen=True)
class Plant:
    """The test broker, running the plant config and the TLS example side by side."""

    broker: RunningBroker
    tls_port: int
    ca_file: Path


@pytest.fixture(scope="module")
def plant(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plant]:
    _, passwd = require_mosquitto()
    folder = tmp_path_factory.mktemp("mosquitto")
    password_file = folder / "faultfleet.passwd"
    for index, (user, password) in enumerate(PASSWORDS.items()):
        create = ["-c"] if index == 0 else []
        subprocess.run([passwd, "-b", *create, str(password_file), user, password], check=True)
    tls_port = free_port()
    config = plant_config(password_file) + tls_config(folder, tls_port)
    with start_broker(prefer="mosquitto", extra_config=config) as running:
        yield Plant(running, tls_port, folder / "ca.crt")


@pytest.fixture
def broker(plant: Plant) -> RunningBroker:
    return plant.broker


def tls_config(folder: Path, port: int) -> list[str]:
    """tls.conf.example's lines for a throw-away CA and broker certificate made with openssl."""
    openssl = shutil.which("openssl")
    if openssl is None:
        missing("openssl is needed to make the TLS test certificates: apt-get install openssl")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    sign = ["-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2"]
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n", encoding="utf-8")
    for command in (
        ["req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=test-ca"],
        ["req", *ec, "-keyout", "broker.key", "-out", "broker.csr", "-subj", "/CN=broker"],
        ["x509", "-req", "-in", "broker.csr", *sign, "-extfile", "san.ext", "-out", "broker.crt"],
    ):
        subprocess.run([openssl, *command], cwd=folder, check=True, capture_output=True)
    files = {"cafile": "ca.crt", "certfile": "broker.crt", "keyfile": "broker.key"}
    lines = []
    for line in (DEPLOY / "tls.conf.example").read_text(encoding="utf-8").splitlines():
        option = line.split(" ", 1)[0]
        if not line or line.startswith("#"):
            continue
        if option == "listener":
            lines.append(f"listener {port} 127.0.0.1")
        elif option in files:
            lines.append(f"{option} {folder / files[option]}")
        else:
            lines.append(line)
    return lines


class Client:
    """A paho client logged in as ``user`` that queues every message it receives."""

    def __init__(
        self, broker: RunningBroker, user: str, password: str, *, tls: Plant | None = None
    ) -> None:
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self._connected = threading.Event()
        self._subscribed = threading.Event()
        self.reason: Any = None
        self._client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"test-{user}")
        self._client.username_pw_set(user, password)
        self._client.on_connect = self._on_connect
        self._client.on_subscribe = lambda *_: self._subscribed.set()
        self._client.on_message = lambda _client, _data, message: self.messages.put(message)
        port = broker.port
        if tls is not None:
            self._client.tls_set(ca_certs=str(tls.ca_file))
            port = tls.tls_port
        self._client.connect(broker.host, port)
        self._client.loop_start()
        assert self._connected.wait(TIMEOUT_S), f"{user} got no CONNACK"

    def _on_connect(self, client: Any, _data: Any, _flags: Any, reason: Any, _props: Any) -> None:
        self.reason = reason
        if reason.is_failure:
            client.disconnect()  # no reconnect attempts after a refused login
        self._connected.set()

    def subscribe(self, *topics: str) -> None:
        self._subscribed.clear()
        self._client.subscribe([(topic, 1) for topic in topics])
        assert self._subscribed.wait(TIMEOUT_S), f"no SUBACK for {topics}"

    def publish(self, topic: str, payload: bytes = b"x", *, retain: bool = False) -> None:
        self._client.publish(topic, payload, qos=1, retain=retain).wait_for_publish(TIMEOUT_S)

    def topics_until(self, sentinel: str) -> list[str]:
        """Topics received, in order, up to and including ``sentinel``."""
        topics: list[str] = []
        while not topics or topics[-1] != sentinel:
            topics.append(self.messages.get(timeout=TIMEOUT_S).topic)
        return topics

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._client.disconnect()
        self._client.loop_stop()


def login(broker: RunningBroker, user: str) -> Client:
    return Client(broker, user, PASSWORDS[user])
