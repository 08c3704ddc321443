"""The per-principal API rate limit: past ``api_requests`` in ``api_window_s`` one API
key (or one session user) gets 429 with Retry-After on /api/v1, while another principal
is not held back; pages are not counted; 0 turns it off; the default leaves room for the
risk API bench's 100 lookups/s from one key."""

from __future__ import annotations

from pathlib import Path

import redis
from conftest import CHEAP_HASHER, PASSWORD, FakeClock, make_settings
from dash_factory import KEYS
from fastapi.testclient import TestClient

from dashboard.app import create_app
from dashboard.auth import Role
from dashboard.settings import DashboardSettings
from detectors.bus.redis_server import RedisServer
from detectors.bus.settings import BusSettings


def _app(redis_server: RedisServer, tmp_path: Path, **overrides: int) -> TestClient:
    bus = BusSettings(
        redis_url=redis_server.url, state_dir=tmp_path / "state", key_prefix=KEYS.prefix
    )
    app = create_app(
        make_settings(**overrides), bus, clock=FakeClock(), password_hasher=CHEAP_HASHER
    )
    return TestClient(app, base_url="https://testserver")


def test_one_principal_is_limited_with_retry_after(
    r: redis.Redis, redis_server: RedisServer, tmp_path: Path
) -> None:
    with _app(redis_server, tmp_path, api_requests=3, api_window_s=60) as client:
        ctx = client.app.state.ctx  # type: ignore[attr-defined]
        _, busy = client.portal.call(ctx.api_keys.create, "busy", Role.VIEWER)
        _, other = client.portal.call(ctx.api_keys.create, "other", Role.VIEWER)
        client.portal.call(ctx.users.create, "ann", PASSWORD, Role.ANALYST)
        as_busy = {"Authorization": f"Bearer {busy}"}
        assert [client.get("/api/v1/alerts", headers=as_busy).status_code for _ in range(3)] == [
            200
        ] * 3
        refused = client.get("/api/v1/calls", headers=as_busy)
        assert refused.status_code == 429
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        assert "rate limit" in refused.json()["detail"]
        # wrong-role requests count too: the key stays refused, whatever it asks
        assert client.get("/api/v1/audit", headers=as_busy).status_code == 429
        assert client.get("/api/v1/alerts", headers={"X-API-Key": other}).status_code == 200
        # a person: the session user is the principal; pages are not counted
        login = client.post("/api/v1/auth/login", json={"username": "ann", "password": PASSWORD})
        assert login.status_code == 200
        for _ in range(3):
            assert client.get("/alerts").status_code == 200
        codes = [client.get("/api/v1/alerts").status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        assert client.get("/alerts").status_code == 200


def test_zero_turns_the_limit_off(
    r: redis.Redis, redis_server: RedisServer, tmp_path: Path
) -> None:
    with _app(redis_server, tmp_path, api_requests=0) as client:
        ctx = client.app.state.ctx  # type: ignore[attr-defined]
        assert ctx.api_limit is None
        _, key = client.portal.call(ctx.api_keys.create, "m", Role.VIEWER)
        codes = {
            client.get("/api/v1/alerts", headers={"X-API-Key": key}).status_code for _ in range(20)
        }
        assert codes == {200}


def test_the_default_allows_the_risk_bench_rate() -> None:
    s = DashboardSettings()
    assert s.api_requests / s.api_window_s >= 5 * 100  # the bench's goal rate, one key
