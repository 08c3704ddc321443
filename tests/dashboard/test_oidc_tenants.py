"""Single sign-on on a multi-tenant platform: with ``oidc_tenant_claim`` set, the ID
token's claim scopes the session (a real provider on 127.0.0.1, the real app, a real
redis-server); ``*`` is platform-wide; a login whose claim names no tenant is refused
and audited."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from conftest import CHEAP_HASHER, FakeClock, make_settings
from dash_factory import add_alert, make_alert, start_call
from fastapi.testclient import TestClient
from oidc_provider import Provider
from test_oidc_login import CLIENT_ID, REDIRECT, ROLE_MAP, SECRET, audit, refused, sso

from dashboard.app import create_app
from detectors.bus.redis_server import RedisServer
from detectors.bus.settings import BusSettings

USERS = {
    "ann": {"groups": ["fraud-analysts"], "org": {"tenants": ["acme"]}},
    "ops": {"groups": ["fraud-admins"], "org": {"tenants": "*"}},
    "bob": {"groups": ["fraud-analysts"]},  # no tenant claim
}


@pytest.fixture
def idp() -> Iterator[Provider]:
    p = Provider(CLIENT_ID, SECRET, REDIRECT, FakeClock(), USERS)
    p.start()
    yield p
    p.stop()


@pytest.fixture
def client(
    idp: Provider, r: redis.Redis, redis_server: RedisServer, tmp_path: Path
) -> Iterator[TestClient]:
    secret_file = tmp_path / "oidc.secret"
    secret_file.write_text(SECRET + "\n")
    os.chmod(secret_file, 0o600)
    settings = make_settings(
        oidc_issuer=idp.issuer,
        oidc_client_id=CLIENT_ID,
        oidc_client_secret=f"file:{secret_file}",
        oidc_redirect_url=REDIRECT,
        oidc_role_map=ROLE_MAP,
        oidc_tenant_claim="org.tenants",
    )
    bus = BusSettings(
        redis_url=redis_server.url, state_dir=tmp_path / "state", key_prefix="cs-test:"
    )
    app = create_app(settings, bus, clock=idp.clock, password_hasher=CHEAP_HASHER)
    with TestClient(app, base_url="https://testserver") as c:
        yield c


def test_the_tenant_claim_scopes_the_session(
    client: TestClient, idp: Provider, r: redis.Redis
) -> None:
    start_call(r, "call-a", tenant="acme")
    start_call(r, "call-g", tenant="globex")
    add_alert(r, make_alert("call-g", tenant="globex"))
    assert sso(client, idp, "ann").status_code == 200
    me = client.get("/api/v1/auth/me").json()
    assert me["name"] == "oidc:ann" and me["tenants"] == ["acme"]
    assert [c["call_id"] for c in client.get("/api/v1/calls").json()] == ["call-a"]
    assert client.get("/api/v1/calls/call-g").status_code == 404
    login = next(e for e in audit(client) if e["action"] == "auth.login")
    assert login["tenant"] == "acme"

    client.cookies.clear()
    assert sso(client, idp, "ops").status_code == 200
    assert client.get("/api/v1/auth/me").json()["tenants"] is None
    assert {c["call_id"] for c in client.get("/api/v1/calls").json()} == {"call-a", "call-g"}

    client.cookies.clear()
    refused(sso(client, idp, "bob"), "no org.tenants value names a tenant")
    assert audit(client)[0]["action"] == "auth.login_refused"
