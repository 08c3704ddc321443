"""The dashboard against a real redis-server (the bus tests' ``RedisServer`` helper, one
server for the whole directory, flushed before each test), a fake clock, and one user
per role. Every log record of the run is kept and scanned for phone numbers at the end.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from argon2 import PasswordHasher
from dash_factory import NUMBERS_KEY, WEBHOOK_KEY
from fastapi.testclient import TestClient
from pydantic import SecretStr

from dashboard.app import create_app
from dashboard.auth import Role
from dashboard.settings import DashboardSettings
from detectors.bus.redis_server import RedisServer, find_redis_server, free_port
from detectors.bus.settings import BusSettings

PASSWORD = "correct horse battery staple"
CHEAP_HASHER = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)  # tests only
ORIGIN = "https://testserver"
# numbers the tests put into Redis: none may reach a log line
PHONE_NUMBERS = ("+442071234567", "+14155550123", "442071234567", "14155550123")
E164 = re.compile(r"\+[1-9]\d{6,14}")


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # one that cannot be formatted cannot leak
            self.lines.append(self.format(record))


@pytest.fixture(scope="session", autouse=True)
def phone_numbers_never_logged() -> Iterator[_Collect]:
    """Every log line of the dashboard tests, at DEBUG; none may hold a phone number."""
    handler = _Collect()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    leaked = [
        line
        for line in handler.lines
        if E164.search(line) or any(n in re.sub(r"[ ()\-]", "", line) for n in PHONE_NUMBERS)
    ]
    assert handler.lines, "no log line was collected: the scan would prove nothing"
    assert not leaked, f"phone numbers in {len(leaked)} log lines, e.g. {leaked[0]!r}"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    try:
        find_redis_server()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    server = RedisServer(data_dir=tmp_path_factory.mktemp("dash-redis"), port=free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def r(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url, socket_timeout=5)
    client.flushall()
    yield client
    client.close()


@dataclass
class FakeClock:
    now: float = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Dash:
    """A running app, its client, and ways to act as each role."""

    client: TestClient
    clock: FakeClock
    redis: redis.Redis
    bus: BusSettings
    api_keys: dict[str, str] = field(default_factory=dict)

    @property
    def ctx(self) -> Any:
        return self.client.app.state.ctx  # type: ignore[attr-defined]

    def login(self, user: str) -> dict[str, str]:
        """Logs ``user`` in (fresh cookie jar); the headers an unsafe request needs."""
        self.client.cookies.clear()
        resp = self.client.post("/api/v1/auth/login", json={"username": user, "password": PASSWORD})
        assert resp.status_code == 200, resp.text
        return {"X-CSRF-Token": resp.json()["csrf_token"]}

    def ws_headers(self, origin: str | None = ORIGIN) -> dict[str, str]:
        """The handshake's headers: the client's cookie jar does not follow the
        TestClient's ws:// URL, so the session cookie goes by hand, as a browser sends it."""
        headers = {"Origin": origin} if origin else {}
        cookie = self.client.cookies.get("__Host-cs_session")
        if cookie:
            headers["Cookie"] = f"__Host-cs_session={cookie}"
        return headers

    def key_headers(self, role: str) -> dict[str, str]:
        self.client.cookies.clear()
        return {"Authorization": f"Bearer {self.api_keys[role]}"}


def make_settings(**overrides: Any) -> DashboardSettings:
    values: dict[str, Any] = {
        "session_key": "k" * 48,
        "cookie_secure": True,
        "allowed_origins": [ORIGIN],
        "listen": "127.0.0.1:8080",
    }
    values.update(overrides)
    return DashboardSettings(**values)


@pytest.fixture
def dash(r: redis.Redis, redis_server: RedisServer, tmp_path: Path) -> Iterator[Dash]:
    clock = FakeClock()
    bus = BusSettings(
        redis_url=redis_server.url,
        state_dir=tmp_path / "state",
        key_prefix="cs-test:",
        numbers_key=f"literal:{NUMBERS_KEY}",
        webhook_key=SecretStr(f"literal:{WEBHOOK_KEY}"),  # the dispatcher's secrets key
        webhook_allow_private_targets=True,  # receivers on 127.0.0.1
    )
    app = create_app(make_settings(), bus, clock=clock, password_hasher=CHEAP_HASHER)
    with TestClient(app, base_url="https://testserver") as client:
        d = Dash(client, clock, r, bus)
        for role in Role:
            client.portal.call(d.ctx.users.create, role.label, PASSWORD, role)  # type: ignore[union-attr]
            _, key = client.portal.call(d.ctx.api_keys.create, f"m-{role.label}", role)  # type: ignore[union-attr]
            d.api_keys[role.label] = key
        yield d
