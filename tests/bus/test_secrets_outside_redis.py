"""Secrets come from files or the environment (``detectors.bus.secret_source``), never
from Redis, and never end up there: after a real dashboard login and a real webhook
delivery, neither the session key nor the webhook encryption key (nor the endpoint's
signing secret or the user's password in clear) is in any key, value or AOF byte."""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import secrets
from pathlib import Path

import pytest
import redis
import redis.asyncio
from alert_factory import make_alert
from argon2 import PasswordHasher
from fastapi.testclient import TestClient
from pydantic import SecretStr
from receiver import Receiver
from redis_dump import dump_files, dump_keys

from dashboard.app import create_app
from dashboard.auth import Role
from dashboard.settings import DashboardSettings
from detectors.bus.codec import encode
from detectors.bus.keys import Keys
from detectors.bus.redis_server import RedisServer
from detectors.bus.secret_source import resolve_secret
from detectors.bus.settings import BusSettings
from detectors.bus.webhooks.dispatcher import Dispatcher
from detectors.bus.webhooks.secrets import load_key
from detectors.bus.webhooks.store import EndpointStore

PASSWORD = "correct horse battery staple"


def _secret_file(path: Path, text: str, mode: int = 0o600) -> str:
    path.write_text(text + "\n")
    path.chmod(mode)
    return f"file:{path}"


def test_secret_specs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="detectors.bus.secret_source")
    assert resolve_secret(_secret_file(tmp_path / "a", "  s3cret "), "A") == "s3cret"
    assert not caplog.records
    monkeypatch.setenv("CS_TEST_SECRET", "from-env")
    assert resolve_secret("env:CS_TEST_SECRET", "B") == "from-env"
    assert not caplog.records

    assert resolve_secret("plain-value", "C") == "plain-value"
    assert resolve_secret("literal:env:not-a-variable", "D") == "env:not-a-variable"
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2 and all("development only" in m for m in warned)
    assert not any("plain-value" in m or "not-a-variable" in m for m in warned)

    caplog.clear()
    resolve_secret(_secret_file(tmp_path / "b", "x", mode=0o644), "E")
    assert "readable by group or others" in caplog.records[0].getMessage()

    monkeypatch.delenv("CS_TEST_UNSET", raising=False)
    for spec, message in (
        ("env:CS_TEST_UNSET", "F: environment variable CS_TEST_UNSET is not set"),
        (f"file:{tmp_path / 'missing'}", "F: cannot read"),
        (_secret_file(tmp_path / "c", "   "), "F is empty (file "),
        ("", "F is empty (a literal value)"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            resolve_secret(spec, "F")


def test_keys_come_from_outside_and_never_reach_redis(
    redis_server: RedisServer,
    client: redis.Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session_key = secrets.token_urlsafe(48)
    fernet_key = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()
    monkeypatch.setenv("CS_TEST_WEBHOOK_KEY", fernet_key)
    bus = BusSettings(
        redis_url=redis_server.url,
        state_dir=tmp_path / "state",
        key_prefix="cs-test:",
        webhook_key=SecretStr("env:CS_TEST_WEBHOOK_KEY"),
        webhook_allow_private_targets=True,
    )
    keys = Keys(bus.key_prefix)

    # a dashboard login, the key from a file
    dash = DashboardSettings(
        session_key=SecretStr(_secret_file(tmp_path / "session.key", session_key)),
        listen="127.0.0.1:8080",
    )
    hasher = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    app = create_app(dash, bus, password_hasher=hasher)
    with TestClient(app, base_url="https://testserver") as web:
        web.portal.call(app.state.ctx.users.create, "ana", PASSWORD, Role.ANALYST)
        login = web.post("/api/v1/auth/login", json={"username": "ana", "password": PASSWORD})
        assert login.status_code == 200, login.text
        assert web.get("/api/v1/auth/me").json()["name"] == "ana"

    # a webhook delivery, its secret encrypted with the key from the environment
    fernet = load_key(bus)
    receiver = Receiver()
    try:
        endpoint, signing_secret = EndpointStore(client, keys, fernet, True).add(
            receiver.url, allow_private=True
        )
        receiver.secrets = [signing_secret]
        client.xadd(keys.alerts, encode(make_alert(1)))  # type: ignore[arg-type]

        async def deliver() -> None:
            url = redis_server.url
            d = Dispatcher(redis.asyncio.Redis.from_url(url), bus, fernet)
            try:
                await d.setup()
                for _ in range(50):
                    await d.intake(block_ms=100)
                    await d.deliver_due()
                    if receiver.first:
                        return
            finally:
                await d.aclose()

        asyncio.run(deliver())
    finally:
        receiver.close()
    assert len(receiver.first) == 1 and receiver.bad_signatures == 0

    stored = dump_keys(client)
    redis_server.stop()  # a clean shutdown: the AOF is complete on disk
    on_disk = dump_files(redis_server.data_dir)
    # the scans see what is there: the endpoint, the session, the alert
    for seen in (stored, on_disk):
        assert endpoint.url.encode() in seen and b"dash:session:" in seen
        assert make_alert(1).alert_id.encode() in seen

    raw_fernet = base64.urlsafe_b64decode(fernet_key)
    raw_signing = base64.b64decode(signing_secret.removeprefix("whsec_"))
    needles = {
        "session key": session_key.encode(),
        "webhook key": fernet_key.encode(),
        "webhook key (raw)": raw_fernet,
        "webhook key (signing half)": raw_fernet[:16],
        "webhook key (encryption half)": raw_fernet[16:],
        "endpoint secret": signing_secret.encode(),
        "endpoint secret (base64)": signing_secret.removeprefix("whsec_").encode(),
        "endpoint secret (raw)": raw_signing,
        "password": PASSWORD.encode(),
    }
    for where, blob in (("redis keys and values", stored), ("redis data files", on_disk)):
        found = [name for name, needle in needles.items() if needle in blob]
        assert not found, f"{found} in the {where}"
