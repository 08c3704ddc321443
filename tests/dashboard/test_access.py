"""Who may do what: every route, every role, people and machines; the negative cases
(anonymous, wrong role, no or wrong CSRF token, cross-origin, expired or forged
session, login rate limit) and the response headers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import ORIGIN, PASSWORD, Dash
from dash_factory import add_alert, make_alert, start_call
from fastapi.routing import APIRoute
from starlette.routing import Mount, WebSocketRoute

ALERT_ID = make_alert().alert_id

# (method, path, json body, the lowest role that may); {alert} is filled in
API: list[tuple[str, str, dict[str, Any] | None, str]] = [
    ("GET", "/api/v1/auth/me", None, "viewer"),
    ("GET", "/api/v1/alerts", None, "viewer"),
    ("GET", "/api/v1/alerts/{alert}", None, "viewer"),
    ("GET", "/api/v1/alerts/{alert}/comments", None, "viewer"),
    ("POST", "/api/v1/alerts/{alert}/ack", {}, "analyst"),
    ("POST", "/api/v1/alerts/{alert}/assign", {"assignee": "analyst"}, "analyst"),
    ("POST", "/api/v1/alerts/{alert}/comments", {"text": "looks synthetic"}, "analyst"),
    ("POST", "/api/v1/alerts/{alert}/label", {"label": "true_positive"}, "analyst"),
    ("GET", "/api/v1/labels", None, "analyst"),
    ("GET", "/api/v1/calls", None, "viewer"),
    ("GET", "/api/v1/calls/call-1", None, "viewer"),
    ("GET", "/api/v1/calls/call-1/risk", None, "viewer"),
    ("GET", "/api/v1/calls/call-1/related", None, "viewer"),
    ("GET", "/api/v1/calls/by-external-id/{system}/{external_id}/risk", None, "viewer"),
    ("POST", "/api/v1/calls/call-1/reveal", {"reason": "callback to customer"}, "analyst"),
    ("PATCH", "/api/v1/calls/call-1", {"queue": "cards"}, "analyst"),
    ("PATCH", "/api/v1/calls/by-external-id/{system}/{external_id}", {"queue": "q"}, "analyst"),
    ("GET", "/api/v1/watchlist", None, "analyst"),
    ("POST", "/api/v1/watchlist", {"label": "incomplete"}, "analyst"),
    ("DELETE", "/api/v1/watchlist/{entry_id}", None, "analyst"),
    ("POST", "/api/v1/watchlist/{entry_id}/approve", None, "analyst"),
    ("POST", "/api/v1/watchlist/{entry_id}/reject", None, "analyst"),
    ("DELETE", "/api/v1/subjects/{ref}", {"reason": "GDPR request 7"}, "admin"),
    ("PUT", "/api/v1/enrolments/{subject}", {"consent_ref": "incomplete"}, "analyst"),
    ("GET", "/api/v1/enrolments/{subject}", None, "analyst"),
    ("DELETE", "/api/v1/enrolments/{subject}", None, "analyst"),
    ("GET", "/api/v1/webhooks", None, "admin"),
    ("POST", "/api/v1/webhooks", {"url": "http://127.0.0.1:9/h", "allow_private": True}, "admin"),
    ("POST", "/api/v1/webhooks/{endpoint_id}/enable", {}, "admin"),
    ("POST", "/api/v1/webhooks/{endpoint_id}/disable", {}, "admin"),
    ("POST", "/api/v1/webhooks/{endpoint_id}/rotate", {}, "admin"),
    ("DELETE", "/api/v1/webhooks/{endpoint_id}", None, "admin"),
    ("GET", "/api/v1/webhooks/dead", None, "admin"),
    ("POST", "/api/v1/webhooks/{endpoint_id}/deliveries/{event_id}/replay", {}, "admin"),
    ("GET", "/api/v1/users", None, "admin"),
    ("POST", "/api/v1/users", {"username": "new", "password": PASSWORD, "role": "viewer"}, "admin"),
    ("GET", "/api/v1/api-keys", None, "admin"),
    ("POST", "/api/v1/api-keys", {"name": "pbx", "role": "viewer"}, "admin"),
    ("DELETE", "/api/v1/api-keys/nope", None, "admin"),
    ("PUT", "/api/v1/users/{username}/tenants", {"tenants": ["acme"]}, "admin"),
    ("PUT", "/api/v1/api-keys/nope/tenants", {"tenants": ["acme"]}, "admin"),
    ("GET", "/api/v1/audit", None, "admin"),
    ("GET", "/api/v1/allowlist", None, "analyst"),
    ("POST", "/api/v1/allowlist", {"entries": []}, "admin"),
    ("DELETE", "/api/v1/allowlist/{entry_id}", None, "admin"),
    ("GET", "/api/v1/allowlist/candidates", None, "analyst"),
    ("POST", "/api/v1/allowlist/candidates/{cand_id}/confirm", {"label": "hold"}, "admin"),
    ("POST", "/api/v1/allowlist/candidates/{cand_id}/reject", {}, "admin"),
    ("GET", "/api/v1/policy", None, "analyst"),
    ("PUT", "/api/v1/policy", {"policy": {}}, "admin"),
    ("POST", "/api/v1/policy/what-if", {"policy": {}, "days": 1}, "admin"),
    ("GET", "/api/v1/enrolments", None, "analyst"),
    ("POST", "/api/v1/enrolments/by-ref/{ref}/expire", {"in_days": 0}, "admin"),
    ("DELETE", "/api/v1/enrolments/by-ref/{ref}", None, "admin"),
    ("GET", "/api/v1/system", None, "viewer"),
    ("GET", "/api/v1/openapi.json", None, "viewer"),
    ("POST", "/api/v1/auth/logout", {}, "viewer"),
    # evidence: playing a clip needs the reviewer grant (admins always have it)
    ("GET", "/api/v1/evidence/calls/call-1", None, "analyst"),
    ("GET", "/api/v1/evidence/calls/call-1/clips/{alert}/audio", None, "admin"),
    ("PUT", "/api/v1/evidence/calls/call-1/hold", {"reason": "matter 1"}, "admin"),
    ("DELETE", "/api/v1/evidence/calls/call-1/hold", None, "admin"),
    ("GET", "/api/v1/evidence/reviewers", None, "admin"),
    ("PUT", "/api/v1/evidence/reviewers/{name}", None, "admin"),
    ("DELETE", "/api/v1/evidence/reviewers/{name}", None, "admin"),
    ("GET", "/api/v1/cases", None, "viewer"),
    ("POST", "/api/v1/cases", {"title": "case 1", "calls": [{"call_id": "call-1"}]}, "analyst"),
    ("GET", "/api/v1/cases/{case_id}", None, "viewer"),
    ("PATCH", "/api/v1/cases/{case_id}", {"version": 1}, "analyst"),
    ("POST", "/api/v1/cases/{case_id}/calls", {"call_id": "call-1"}, "analyst"),
    ("DELETE", "/api/v1/cases/{case_id}/calls/call-1", None, "analyst"),
    ("GET", "/api/v1/cases/{case_id}/suggestions", None, "analyst"),
    ("GET", "/api/v1/cases/{case_id}/export", None, "analyst"),
]
PAGES: list[tuple[str, str]] = [
    ("/", "viewer"),
    ("/alerts", "viewer"),
    ("/calls/call-1", "viewer"),
    ("/system", "viewer"),
    ("/api/v1/docs", "viewer"),
    ("/audit", "admin"),
    ("/watchlist", "analyst"),
    ("/enrolments", "analyst"),
    ("/webhooks", "admin"),
    ("/policy", "admin"),
    ("/cases", "viewer"),
]
RANK = {"viewer": 1, "analyst": 2, "admin": 3}
# what may be reached with no login at all: health, and what it takes to log in
ANONYMOUS = {
    ("GET", "/health"),
    ("GET", "/login"),
    ("POST", "/login"),
    ("POST", "/api/v1/auth/login"),
    ("GET", "/api/v1/auth/oidc/login"),  # single sign-on (answers 303 when not configured)
    ("GET", "/api/v1/auth/oidc/callback"),
}


def _seed(dash: Dash) -> None:
    start_call(dash.redis)
    add_alert(dash.redis, make_alert())


def _path(path: str) -> str:
    path = path.replace("{system}", "asterisk").replace("{external_id}", "1764504000.42")
    path = path.replace("{entry_id}", "wl_0123456789abcdef").replace("{subject}", "acct-1")
    path = path.replace("{ref}", "acct-1").replace("{username}", "viewer")
    path = path.replace("{cand_id}", "c0ffee")
    path = path.replace("{endpoint_id}", "ep_0123456789abcdef")
    path = path.replace("{event_id}", f"{ALERT_ID}.r1")
    return path.replace("{alert}", ALERT_ID)


def test_every_route_is_in_the_tables(dash: Dash) -> None:
    """A new route must be added to the tables above (and so to the role tests)."""
    known = {(m, p) for m, p, _, _ in API} | {("GET", p) for p, _ in PAGES} | ANONYMOUS
    known |= {("POST", "/logout"), ("POST", "/policy"), ("POST", "/policy/what-if")}
    known |= {("GET", "/cases/{case_id}")}  # a case's page: tests/e2e/test_evidence_e2e.py
    found = set()
    for prefix, route in _walk(dash.client.app.routes):  # type: ignore[attr-defined]
        if isinstance(route, APIRoute):
            path = (prefix + route.path).replace("{alert_id}", "{alert}")
            path = path.replace("{call_id}", "call-1").replace("{key_id}", "nope")
            found |= {(m, path) for m in route.methods}
        elif isinstance(route, WebSocketRoute):
            assert prefix + route.path == "/api/v1/live"
        else:
            assert isinstance(route, Mount) and route.path == "/static"
    assert len(found) > 20
    assert found - known == set()


def _walk(routes: list[Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every route with its prefix (FastAPI >= 0.16x keeps included routers nested)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _walk(inner.routes, prefix + route.include_context.prefix)
        else:
            yield prefix, route


@pytest.mark.parametrize(
    ("method", "path", "body", "least"), API, ids=[f"{m} {p}" for m, p, _, _ in API]
)
def test_api_route_roles(
    dash: Dash, method: str, path: str, body: dict[str, Any] | None, least: str
) -> None:
    _seed(dash)
    dash.client.cookies.clear()
    anon = dash.client.request(method, _path(path), json=body)
    assert anon.status_code == 401, anon.text
    for role in ("viewer", "analyst", "admin"):
        for auth in (dash.login, dash.key_headers):
            headers = auth(role)
            resp = dash.client.request(method, _path(path), json=body, headers=headers)
            if RANK[role] >= RANK[least]:
                assert resp.status_code not in (401, 403), (role, resp.text)
                assert resp.status_code < 500
            else:
                assert resp.status_code == 403, (role, resp.text)


@pytest.mark.parametrize(("path", "least"), PAGES)
def test_page_roles(dash: Dash, path: str, least: str) -> None:
    _seed(dash)
    dash.client.cookies.clear()
    anon = dash.client.get(path, follow_redirects=False)
    assert anon.status_code == 303 and anon.headers["location"] == "/login"
    for role in ("viewer", "analyst", "admin"):
        dash.login(role)
        resp = dash.client.get(path)
        assert resp.status_code == (200 if RANK[role] >= RANK[least] else 403), (role, path)
        if resp.status_code == 200:
            assert resp.headers["content-type"].startswith("text/html")


def test_health_is_anonymous_and_says_nothing(dash: Dash) -> None:
    dash.client.cookies.clear()
    resp = dash.client.get("/health")
    assert resp.status_code == 200 and resp.json() == {"status": "ok"}


def test_unsafe_requests_need_the_sessions_csrf_token(dash: Dash) -> None:
    _seed(dash)
    headers = dash.login("analyst")
    url = f"/api/v1/alerts/{ALERT_ID}/ack"
    assert dash.client.post(url).status_code == 403
    assert dash.client.post(url, headers={"X-CSRF-Token": "x" * 43}).status_code == 403
    other = dash.login("admin")  # another session's token is no good either
    dash.login("analyst")
    assert dash.client.post(url, headers=other).status_code == 403
    headers = dash.login("analyst")
    bad_origin = {**headers, "Origin": "https://evil.example"}
    assert dash.client.post(url, headers=bad_origin).status_code == 403
    assert dash.client.post(url, headers={**headers, "Origin": ORIGIN}).status_code == 200
    # the logout form: a form field instead of the header
    form = dash.client.post("/logout", data={"csrf_token": "wrong"}, follow_redirects=False)
    assert form.status_code == 403
    ok = dash.client.post(
        "/logout", data={"csrf_token": headers["X-CSRF-Token"]}, follow_redirects=False
    )
    assert ok.status_code == 303
    # machines: no cookie, no CSRF token needed
    assert dash.client.post(url, headers=dash.key_headers("analyst")).status_code == 200


def test_login_form_needs_its_double_submit_token(dash: Dash) -> None:
    dash.client.cookies.clear()
    form = {"username": "viewer", "password": PASSWORD, "csrf_token": "forged"}
    assert dash.client.post("/login", data=form).status_code == 403
    page = dash.client.get("/login")
    token = page.text.split('name="csrf_token" value="')[1].split('"')[0]
    ok = dash.client.post("/login", data={**form, "csrf_token": token}, follow_redirects=False)
    assert ok.status_code == 303 and ok.headers["location"] == "/"
    assert dash.client.get("/api/v1/auth/me").json()["name"] == "viewer"


def test_session_cookie_flags(dash: Dash) -> None:
    dash.client.cookies.clear()
    resp = dash.client.post("/api/v1/auth/login", json={"username": "viewer", "password": PASSWORD})
    cookie = resp.headers["set-cookie"]
    assert cookie.startswith("__Host-cs_session=")
    for flag in ("HttpOnly", "Secure", "SameSite=strict", "Path=/"):
        assert flag.lower() in cookie.lower()
    assert "domain" not in cookie.lower()


def test_sessions_expire_when_idle_and_at_their_lifetime(dash: Dash) -> None:
    dash.login("viewer")
    dash.clock.now += dash.ctx.settings.session_idle_s - 5
    assert dash.client.get("/api/v1/auth/me").status_code == 200  # and slides the idle time
    dash.clock.now += dash.ctx.settings.session_idle_s - 5
    assert dash.client.get("/api/v1/auth/me").status_code == 200
    dash.clock.now += dash.ctx.settings.session_idle_s + 1
    assert dash.client.get("/api/v1/auth/me").status_code == 401
    assert dash.client.get("/", follow_redirects=False).status_code == 303
    dash.login("viewer")
    for _ in range(dash.ctx.settings.session_max_s // (dash.ctx.settings.session_idle_s - 5) + 1):
        dash.clock.now += dash.ctx.settings.session_idle_s - 5
        last = dash.client.get("/api/v1/auth/me").status_code
    assert last == 401  # absolute lifetime, however active


def test_logout_and_forged_cookies(dash: Dash) -> None:
    headers = dash.login("viewer")
    cookie = dash.client.cookies.get("__Host-cs_session")
    assert dash.client.post("/api/v1/auth/logout", headers=headers).status_code == 200
    dash.client.cookies.set("__Host-cs_session", cookie or "")
    assert dash.client.get("/api/v1/auth/me").status_code == 401  # revoked server-side
    dash.client.cookies.set("__Host-cs_session", (cookie or "")[:-2] + "xx")
    assert dash.client.get("/api/v1/auth/me").status_code == 401
    dash.client.cookies.clear()
    bad_key = {"Authorization": "Bearer csk_nope_nope"}
    assert dash.client.get("/api/v1/alerts", headers=bad_key).status_code == 401


def test_login_is_rate_limited(dash: Dash) -> None:
    dash.client.cookies.clear()
    wrong = {"username": "analyst", "password": "not the password"}
    codes = [dash.client.post("/api/v1/auth/login", json=wrong).status_code for _ in range(5)]
    assert codes == [401] * 5
    right = {"username": "analyst", "password": PASSWORD}
    assert dash.client.post("/api/v1/auth/login", json=right).status_code == 429
    dash.clock.now += 61  # the fixed window is Redis's own TTL: wait it out
    dash.redis.delete(*dash.redis.keys("cs-test:dash:rl:*"))
    assert dash.client.post("/api/v1/auth/login", json=right).status_code == 200


def test_revoked_api_key_stops_working(dash: Dash) -> None:
    admin = dash.key_headers("admin")
    created = dash.client.post(
        "/api/v1/api-keys", json={"name": "pbx", "role": "viewer"}, headers=admin
    )
    key = created.json()
    pbx = {"Authorization": f"Bearer {key['key']}"}
    assert dash.client.get("/api/v1/alerts", headers=pbx).status_code == 200
    listed = dash.client.get("/api/v1/api-keys", headers=admin).json()
    assert key["key"] not in str(listed)
    assert dash.client.delete(f"/api/v1/api-keys/{key['id']}", headers=admin).status_code == 200
    assert dash.client.get("/api/v1/alerts", headers=pbx).status_code == 401


def test_call_data_is_never_cached_and_headers_are_strict(dash: Dash) -> None:
    _seed(dash)
    dash.login("viewer")
    for path in ("/", "/alerts", "/calls/call-1", "/api/v1/calls", "/api/v1/alerts", "/login"):
        resp = dash.client.get(path)
        assert resp.headers["cache-control"] == "no-store", path
        assert "script-src 'self'" in resp.headers["content-security-policy"]
        assert resp.headers["x-frame-options"] == "DENY"
        # not no-referrer: Chromium then sends `Origin: null` on form posts (logout)
        assert resp.headers["referrer-policy"] == "same-origin"
    static = dash.client.get("/static/app.js")
    assert static.status_code == 200 and "no-store" not in static.headers.get("cache-control", "")


def test_pages_load_nothing_from_elsewhere(dash: Dash) -> None:
    """Air-gapped: every script, style and image is served from /static."""
    _seed(dash)
    dash.login("admin")
    pages = ("/", "/alerts", "/calls/call-1", "/system", "/audit", "/api/v1/docs", "/login")
    for path in (*pages, "/watchlist", "/webhooks"):
        html = dash.client.get(path).text
        assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
        assert "https://" not in html and "//cdn" not in html, path
