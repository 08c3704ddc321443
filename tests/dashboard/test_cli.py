"""``callshield dashboard``: the bootstrap commands, and the app under a real uvicorn."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
import uvicorn
from conftest import PASSWORD, make_settings

from dashboard.app import create_app
from detectors.bus.redis_server import RedisServer, free_port
from detectors.bus.settings import BusSettings
from sip_bridge.cli import main


@pytest.fixture
def env(
    monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer, r: redis.Redis, tmp_path: Path
) -> None:
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    monkeypatch.setenv("CALLSHIELD_KEY_PREFIX", "cs-test:")
    monkeypatch.setenv("CALLSHIELD_STATE_DIR", str(tmp_path / "state"))


def test_create_user_and_api_key(
    env: None, r: redis.Redis, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    assert main(["dashboard", "create-user", "root", "--password-stdin"]) == 0
    assert r.hexists("cs-test:dash:users", "root")
    assert PASSWORD.encode() not in r.hget("cs-test:dash:users", "root")  # type: ignore[operator]
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    assert main(["dashboard", "create-user", "root", "--password-stdin"]) == 1  # exists
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    assert main(["dashboard", "create-user", "bob", "--password-stdin"]) == 1
    capsys.readouterr()
    assert main(["dashboard", "create-api-key", "pbx", "--role", "viewer"]) == 0
    key = capsys.readouterr().out.strip()
    assert key.startswith("csk_") and key.encode() not in b"".join(r.hvals("cs-test:dash:apikeys"))


@pytest.fixture
def served(redis_server: RedisServer, r: redis.Redis, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    settings = make_settings(listen=f"127.0.0.1:{port}", cookie_secure=False)
    bus = BusSettings(
        redis_url=redis_server.url, state_dir=tmp_path / "state", key_prefix="cs-test:"
    )
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings, bus), host="127.0.0.1", port=port, log_config=None)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def test_real_server_login(served: str, env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    assert main(["dashboard", "create-user", "ana", "--role", "analyst", "--password-stdin"]) == 0
    with httpx.Client(base_url=served) as client:
        assert client.get("/health").json() == {"status": "ok"}
        assert client.get("/api/v1/alerts").status_code == 401
        login = client.post("/api/v1/auth/login", json={"username": "ana", "password": PASSWORD})
        assert login.status_code == 200
        assert "cs_session" in login.headers["set-cookie"]
        assert client.get("/api/v1/alerts").json() == []
