"""Dashboard login through OpenID Connect against a real provider (``oidc_provider``: an
HTTP server on 127.0.0.1 signing with a test key), the real app and a real
redis-server: the authorization code flow with PKCE, the role from the ``groups`` claim,
a session like a password login's, audited; every forged or misdirected token refused
with nothing opened."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import redis
from conftest import CHEAP_HASHER, FakeClock, make_settings
from fastapi.testclient import TestClient
from oidc_provider import FAULTS, Provider, SigningKey

from dashboard.app import create_app
from dashboard.auth import Role
from dashboard.oidc import OidcConfig, map_role
from dashboard.oidc_tokens import Expected, OidcError, check_claims, pkce_challenge
from detectors.bus.redis_server import RedisServer
from detectors.bus.settings import BusSettings

CLIENT_ID, SECRET = "callshield-dash", "s3cret:with/odd&chars"
REDIRECT = "https://testserver/api/v1/auth/oidc/callback"
ROLE_MAP = {"fraud-viewers": "viewer", "fraud-analysts": "analyst", "fraud-admins": "admin"}
USERS: dict[str, dict[str, Any]] = {
    "alice": {"groups": ["staff", "fraud-analysts"]},
    "root": {"groups": ["fraud-viewers", "fraud-admins"]},
    "carol": {"groups": ["staff"]},  # maps to no role
}


@pytest.fixture
def idp() -> Iterator[Provider]:
    clock = FakeClock()
    p = Provider(CLIENT_ID, SECRET, REDIRECT, clock, USERS)
    p.start()
    yield p
    p.stop()


@pytest.fixture
def app_client(
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
    )
    bus = BusSettings(
        redis_url=redis_server.url, state_dir=tmp_path / "state", key_prefix="cs-oidc:"
    )
    app = create_app(settings, bus, clock=idp.clock, password_hasher=CHEAP_HASHER)
    with TestClient(app, base_url="https://testserver") as client:
        yield client


def start(client: TestClient) -> str:
    """The dashboard's redirect to the provider."""
    resp = client.get("/api/v1/auth/oidc/login", follow_redirects=False)
    assert resp.status_code == 303, resp.text
    return resp.headers["location"]


def at_provider(url: str) -> str:
    """The provider's redirect back (a real HTTP request to it)."""
    resp = httpx.get(url, follow_redirects=False, timeout=5)
    assert resp.status_code == 302, resp.text
    location = resp.headers["location"]
    assert location.startswith(REDIRECT)
    return location


def back(client: TestClient, location: str) -> httpx.Response:
    parts = urlsplit(location)
    return client.get(f"{parts.path}?{parts.query}", follow_redirects=False)


def sso(client: TestClient, idp: Provider, user: str) -> httpx.Response:
    idp.auto_user = user
    return back(client, at_provider(start(client)))


def audit(client: TestClient) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = client.portal.call(  # type: ignore[union-attr]
        client.app.state.ctx.audit.recent  # type: ignore[attr-defined]
    )
    return entries


def refused(resp: httpx.Response, text: str) -> None:
    assert resp.status_code == 303, resp.text
    location = resp.headers["location"]
    assert location.startswith("/login?error=")
    assert text in parse_qs(urlsplit(location).query)["error"][0], location
    assert "__Host-cs_session" not in resp.headers.get("set-cookie", "")


def test_login_through_the_provider_maps_the_role_and_audits(
    app_client: TestClient, idp: Provider
) -> None:
    page = app_client.get("/login")
    assert 'href="/api/v1/auth/oidc/login"' in page.text
    authorize = start(app_client)
    query = parse_qs(urlsplit(authorize).query)
    assert authorize.startswith(idp.issuer + "/authorize?")
    assert query["code_challenge_method"] == ["S256"] and query["client_id"] == [CLIENT_ID]
    assert query["redirect_uri"] == [REDIRECT] and query["nonce"][0] and query["state"][0]
    idp.auto_user = "alice"
    done = back(app_client, at_provider(authorize))
    assert done.status_code == 200 and 'content="0;url=/"' in done.text
    assert "__Host-cs_session=" in done.headers["set-cookie"]
    me = app_client.get("/api/v1/auth/me").json()
    assert me["name"] == "oidc:alice" and me["role"] == "analyst" and me["kind"] == "session"
    # a session like a password login's: CSRF-protected unsafe requests, pages open
    assert app_client.get("/alerts").status_code == 200
    token_request = idp.token_requests[-1]
    assert pkce_challenge(token_request["code_verifier"]) == query["code_challenge"][0]
    assert "client_secret" not in token_request  # client_secret_basic, never in the body
    entry = audit(app_client)[0]
    assert entry["action"] == "auth.login" and entry["via"] == "oidc"
    assert entry["actor"] == "oidc:alice" and entry["role"] == "analyst"
    assert "sub-alice" not in json.dumps(entry)  # the subject id only as a hash
    # the highest mapped group wins
    app_client.cookies.clear()
    assert sso(app_client, idp, "root").status_code == 200
    assert app_client.get("/api/v1/auth/me").json()["role"] == "admin"


def test_a_user_whose_claim_maps_to_no_role_is_refused(
    app_client: TestClient, idp: Provider
) -> None:
    refused(sso(app_client, idp, "carol"), "no groups value maps to a role")
    assert app_client.get("/api/v1/auth/me").status_code == 401
    entry = audit(app_client)[0]
    assert entry["action"] == "auth.login_refused" and entry["actor"] == "oidc:carol"


@pytest.mark.parametrize(
    ("fault", "why"),
    [
        ("tampered_signature", "signature does not verify"),
        ("wrong_nonce", "nonce does not match"),
        ("wrong_audience", "audience does not include this client"),
        ("wrong_issuer", "issuer is not the configured issuer"),
        ("expired", "expired"),
        ("alg_none", "algorithm 'none' refused"),
        ("hs256_with_public_key", "algorithm 'HS256' refused"),
        ("unknown_kid", "no single RS256 signing key"),
    ],
)
def test_forged_or_misdirected_tokens_are_refused(
    app_client: TestClient, idp: Provider, fault: str, why: str
) -> None:
    assert fault in FAULTS
    idp.fault = fault
    refused(sso(app_client, idp, "alice"), why)
    assert app_client.get("/api/v1/auth/me").status_code == 401
    entry = audit(app_client)[0]
    assert entry["action"] == "auth.login_refused" and why in entry["detail"]["reason"]


def test_state_is_single_use_and_bound_to_the_browser(
    app_client: TestClient, idp: Provider
) -> None:
    idp.auto_user = "alice"
    location = at_provider(start(app_client))
    # another browser (no binding cookie) presenting the code: login CSRF
    cookies = dict(app_client.cookies)
    app_client.cookies.clear()
    refused(back(app_client, location), "another browser")
    # the state was consumed by that attempt: the real browser cannot reuse it either
    app_client.cookies.update(cookies)
    refused(back(app_client, location), "unknown or used state")
    # a fresh login completes, and its callback replayed is refused
    location = at_provider(start(app_client))
    assert back(app_client, location).status_code == 200
    refused(back(app_client, location), "unknown or used state")
    # the provider refusing the user (access_denied)
    app_client.cookies.clear()
    idp.auto_user = "mallory"
    refused(back(app_client, at_provider(start(app_client))), "provider answered access_denied")


def test_es256_keys_and_rotation_between_logins(app_client: TestClient, idp: Provider) -> None:
    idp.key = SigningKey.new("ES256")
    assert sso(app_client, idp, "alice").status_code == 200
    app_client.cookies.clear()
    idp.key = SigningKey.new("RS256")  # rotated: the JWKS is fetched at each login
    assert sso(app_client, idp, "root").status_code == 200
    assert app_client.get("/api/v1/auth/me").json()["name"] == "oidc:root"


def test_configuration_is_checked_at_start() -> None:
    base: dict[str, Any] = {
        "oidc_client_id": "c",
        "oidc_redirect_url": "https://d.example/api/v1/auth/oidc/callback",
        "oidc_role_map": {"g": "analyst"},
    }
    for issuer, extra, text in (
        ("http://idp.example", {}, "https URL"),
        ("https://idp.example", {"oidc_role_map": {}}, "oidc_role_map"),
        ("https://idp.example", {"oidc_role_map": {"g": "root"}}, "unknown role"),
        ("https://idp.example", {"oidc_client_id": ""}, "oidc_client_id"),
        ("https://idp.example", {"oidc_scopes": "profile"}, "openid"),
        ("https://idp.example", {"oidc_client_secret": "env:NOPE_NOT_SET"}, "not set"),
    ):
        with pytest.raises(ValueError, match=text):
            OidcConfig.from_settings(make_settings(oidc_issuer=issuer, **{**base, **extra}))
    assert OidcConfig.from_settings(make_settings()) is None


def test_claim_checks_and_role_mapping_edges() -> None:
    want = Expected("https://i", "c", "n", now=1000.0)
    good = {"iss": "https://i", "aud": "c", "exp": 1100, "iat": 990, "nonce": "n", "sub": "s"}
    check_claims(good, want)
    for change, text in (
        ({"aud": ["c", "other"]}, "azp"),
        ({"aud": ["c", "other"], "azp": "other"}, "azp"),
        ({"iat": 2000}, "future"),
        ({"iat": 100}, "too long ago"),
        ({"exp": "1100"}, "numeric exp"),
        ({"sub": ""}, "sub"),
    ):
        with pytest.raises(OidcError, match=text):
            check_claims({**good, **change}, want)
    check_claims({**good, "aud": ["c", "other"], "azp": "c"}, want)
    mapping = {"a": Role.ANALYST, "b": Role.VIEWER}
    assert map_role({"realm": {"roles": ["x", "a", "b"]}}, "realm.roles", mapping) is Role.ANALYST
    assert map_role({"groups": "b"}, "groups", mapping) is Role.VIEWER
    assert map_role({"groups": [1, {"a": 1}]}, "groups", mapping) is None
    assert map_role({"groups": "a"}, "realm.roles", mapping) is None
