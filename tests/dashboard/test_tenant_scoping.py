"""Tenant scoping on the real app and a real redis-server: two tenants' calls and
alerts (acme, globex); an acme-scoped key or user sees only acme's in every list, page,
export and the live feed, gets 404 on globex's call, alert, evidence and case, cannot
triage, enrol, list or edit globex's watchlist, allowlist or policy section; a
platform-wide principal sees both and filters; a webhook endpoint filtered to acme gets
only acme's alerts; audit entries name the tenant."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio
from conftest import PASSWORD, Dash
from dash_factory import add_alert, make_alert, start_call
from webhook_driver import deliver_all

from dashboard.auth import Role
from dashboard.live import LiveHub
from dashboard.oidc import map_tenants
from detectors.alert_schema import Dimension
from detectors.bus.keys import Keys
from detectors.bus.webhooks.schedule import VirtualClock
from tests.bus.receiver import Receiver

A_CALL, B_CALL = "call-acme-1", "call-globex-1"
A_ALERT = make_alert(A_CALL, tenant="acme")
B_ALERT = make_alert(B_CALL, tenant="globex")
VOICEPRINT = {
    "model": "m",
    "dim": 8,
    "embedding": "AACAPwAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",  # unit vector, float32 LE
    "net_speech_s": 12.0,
    "source": "test",
}


def _seed(dash: Dash) -> None:
    start_call(dash.redis, A_CALL, tenant="acme")
    start_call(dash.redis, B_CALL, tenant="globex")
    add_alert(dash.redis, A_ALERT)
    add_alert(dash.redis, B_ALERT)


def _key(dash: Dash, name: str, role: Role, tenants: frozenset[str] | None) -> dict[str, str]:
    _, key = dash.client.portal.call(dash.ctx.api_keys.create, name, role, tenants)  # type: ignore[union-attr]
    dash.client.cookies.clear()
    return {"Authorization": f"Bearer {key}"}


def _user(dash: Dash, name: str, role: Role, tenants: frozenset[str] | None) -> None:
    dash.client.portal.call(dash.ctx.users.create, name, PASSWORD, role, tenants)  # type: ignore[union-attr]


def _ids(rows: list[dict[str, Any]]) -> set[str]:
    return {r["call_id"] for r in rows}


def _audit(dash: Dash) -> list[dict[str, Any]]:
    return list(dash.client.portal.call(dash.ctx.audit.recent))


def test_a_scoped_key_sees_only_its_tenant_and_a_platform_key_filters(dash: Dash) -> None:
    _seed(dash)
    a = _key(dash, "acme-viewer", Role.VIEWER, frozenset({"acme"}))
    get = dash.client.get
    calls = get("/api/v1/calls", headers=a).json()
    assert _ids(calls) == {A_CALL} and calls[0]["tenant"] == "acme"
    alerts = get("/api/v1/alerts", headers=a).json()
    assert _ids(alerts) == {A_CALL} and alerts[0]["tenant"] == "acme"
    assert get("/api/v1/calls?tenant=globex", headers=a).json() == []
    assert get("/api/v1/alerts?tenant=globex", headers=a).json() == []
    assert get("/api/v1/auth/me", headers=a).json()["tenants"] == ["acme"]
    assert get(f"/api/v1/calls/{A_CALL}", headers=a).status_code == 200
    for path in (
        f"/api/v1/calls/{B_CALL}",
        f"/api/v1/calls/{B_CALL}/risk",
        f"/api/v1/calls/{B_CALL}/related",
        f"/api/v1/alerts/{B_ALERT.alert_id}",
        f"/api/v1/alerts/{B_ALERT.alert_id}/comments",
    ):
        got = get(path, headers=a)
        assert got.status_code == 404, (path, got.text)  # as if it did not exist
        assert "globex" not in got.text

    p = dash.key_headers("viewer")  # the fixture's keys are platform-wide
    assert _ids(get("/api/v1/calls", headers=p).json()) == {A_CALL, B_CALL}
    assert _ids(get("/api/v1/alerts", headers=p).json()) == {A_CALL, B_CALL}
    assert _ids(get("/api/v1/calls?tenant=globex", headers=p).json()) == {B_CALL}
    assert _ids(get("/api/v1/alerts?tenant=globex", headers=p).json()) == {B_CALL}
    assert get(f"/api/v1/calls/{B_CALL}", headers=p).json()["call"]["tenant"] == "globex"
    # system health: a scoped key gets its own live calls, not every tenant's traffic
    mine = get("/api/v1/system", headers=a).json()
    assert mine["live_calls"] == 1 and mine["streams"] == {} and mine["nodes"] == []
    everyone = get("/api/v1/system", headers=p).json()
    assert everyone["live_calls"] == 2 and everyone["streams"]["alerts"]["length"] == 2


def test_pages_and_exports_show_only_the_tenant(dash: Dash) -> None:
    _seed(dash)
    _user(dash, "ann", Role.ANALYST, frozenset({"acme"}))
    dash.login("ann")
    for page in ("/", "/alerts"):
        html = dash.client.get(page).text
        assert A_CALL in html and B_CALL not in html, page
    assert dash.client.get(f"/calls/{A_CALL}").status_code == 200
    assert dash.client.get(f"/calls/{B_CALL}").status_code == 404
    # the labels export (calibration) holds only acme's labels
    p = dash.key_headers("analyst")
    for alert in (A_ALERT, B_ALERT):
        url = f"/api/v1/alerts/{alert.alert_id}/label"
        assert dash.client.post(url, json={"label": "true_positive"}, headers=p).status_code == 200
    a = _key(dash, "acme-analyst", Role.ANALYST, frozenset({"acme"}))
    labels = dash.client.get("/api/v1/labels", headers=a).json()
    assert [r["call_id"] for r in labels] == [A_CALL]
    assert len(dash.client.get("/api/v1/labels", headers=p).json()) == 2
    # platform-wide: both, the tenant shown and filterable
    dash.login("admin")
    html = dash.client.get("/alerts?tenant=globex").text
    assert B_CALL in html and A_CALL not in html and 'name="tenant"' in html
    assert ">globex<" in dash.client.get(f"/calls/{B_CALL}").text


def test_a_scoped_analyst_cannot_act_on_another_tenant(dash: Dash) -> None:
    _seed(dash)
    a = _key(dash, "acme-analyst", Role.ANALYST, frozenset({"acme"}))
    post, b_alert = dash.client.post, f"/api/v1/alerts/{B_ALERT.alert_id}"
    assert post(f"{b_alert}/ack", headers=a).status_code == 404
    assert post(f"{b_alert}/label", json={"label": "true_positive"}, headers=a).status_code == 404
    assert post(f"{b_alert}/comments", json={"text": "x"}, headers=a).status_code == 404
    assert post(f"{b_alert}/assign", json={"assignee": "analyst"}, headers=a).status_code == 404
    reveal = post(f"/api/v1/calls/{B_CALL}/reveal", json={"reason": "fraud check"}, headers=a)
    assert reveal.status_code == 404
    assert dash.client.get(f"/api/v1/evidence/calls/{B_CALL}", headers=a).status_code == 404
    assert dash.client.get(f"/api/v1/evidence/calls/{A_CALL}", headers=a).status_code == 200
    # watchlist, enrolments, allowlist: other tenants' are as if absent
    entry = {
        "tenant": "globex",
        "label": "x",
        "legal_basis": "b",
        "case_ref": "c",
        "expires_in_days": 30,
        "voiceprint": VOICEPRINT,
    }
    assert post("/api/v1/watchlist", json=entry, headers=a).status_code == 404
    from_call = {k: v for k, v in entry.items() if k != "voiceprint"} | {
        "tenant": "acme",
        "call_id": B_CALL,
    }
    assert post("/api/v1/watchlist", json=from_call, headers=a).status_code == 404
    enrol = {"tenant": "globex", "consent_ref": "c1", "voiceprint": VOICEPRINT}
    assert dash.client.put("/api/v1/enrolments/acct-1", json=enrol, headers=a).status_code == 404
    for path in (
        "/api/v1/watchlist?tenant=globex",
        "/api/v1/enrolments/acct-1?tenant=globex",
        "/api/v1/enrolments?tenant=globex",
        "/api/v1/allowlist?tenant=globex",
    ):
        assert dash.client.get(path, headers=a).status_code == 404, path
    # its own tenant works, and the audit entry names the tenant
    assert dash.client.get("/api/v1/watchlist?tenant=acme", headers=a).status_code == 200
    assert post(f"/api/v1/alerts/{A_ALERT.alert_id}/ack", headers=a).status_code == 200
    acks = [e for e in _audit(dash) if e["action"] == "alert.ack"]
    assert [(e["target"], e["tenant"]) for e in acks] == [(A_ALERT.alert_id, "acme")]
    made = post("/api/v1/watchlist", json=entry | {"tenant": "acme"}, headers=a)
    assert made.status_code == 201, made.text
    (added,) = [e for e in _audit(dash) if e["action"] == "watchlist.add"]
    assert added["tenant"] == "acme"


def test_cases_are_tenant_scoped(dash: Dash) -> None:
    _seed(dash)
    p = dash.key_headers("analyst")
    case = dash.client.post("/api/v1/cases", json={"title": "g", "tenant": "globex"}, headers=p)
    assert case.status_code == 201, case.text
    case_id = case.json()["case_id"]
    a = _key(dash, "acme-analyst", Role.ANALYST, frozenset({"acme"}))
    assert dash.client.get("/api/v1/cases", headers=a).json() == []
    for path in (f"/api/v1/cases/{case_id}", f"/api/v1/cases/{case_id}/export"):
        assert dash.client.get(path, headers=a).status_code == 404, path
    mine = {"title": "a", "tenant": "acme", "calls": [{"call_id": B_CALL, "link": "manual"}]}
    assert dash.client.post("/api/v1/cases", json=mine, headers=a).status_code == 404
    refused = dash.client.post("/api/v1/cases", json={"title": "g", "tenant": "globex"}, headers=a)
    assert refused.status_code == 404
    # a case holds one tenant's calls, whoever links them
    link = {"call_id": A_CALL, "link": "manual"}
    mixed = dash.client.post(f"/api/v1/cases/{case_id}/calls", json=link, headers=p)
    assert mixed.status_code == 409 and "another tenant" in mixed.text


def test_a_scoped_admin_edits_only_its_policy_section_and_principals(dash: Dash) -> None:
    p = dash.key_headers("admin")
    start = {
        "tenants": {
            "acme": {"dimensions": {"synthetic_voice": {"threshold": 0.8}}},
            "globex": {"dimensions": {"synthetic_voice": {"threshold": 0.6}}},
        }
    }
    assert dash.client.put("/api/v1/policy", json={"policy": start}, headers=p).status_code == 200
    a = _key(dash, "acme-admin", Role.ADMIN, frozenset({"acme"}))
    seen = dash.client.get("/api/v1/policy", headers=a).json()
    assert set(seen["tenants"]) == {"acme"}
    body = {k: v for k, v in seen.items() if k != "version"}

    def put(policy: dict[str, Any]) -> int:
        code: int = dash.client.put(
            "/api/v1/policy", json={"policy": policy}, headers=a
        ).status_code
        return code

    theirs = {"dimensions": {"synthetic_voice": {"threshold": 0.99}}}
    assert put(body | {"tenants": {**body["tenants"], "globex": theirs}}) == 404
    assert put(body | {"default": {**body["default"], "threshold": 0.55}}) == 403
    mine = {"acme": {"dimensions": {"synthetic_voice": {"threshold": 0.85}}}}
    assert put(body | {"tenants": mine}) == 200
    stored = dash.client.get("/api/v1/policy", headers=p).json()["tenants"]
    assert stored["acme"]["dimensions"]["synthetic_voice"]["threshold"] == 0.85
    assert stored["globex"]["dimensions"]["synthetic_voice"]["threshold"] == 0.6  # kept
    what_if = {"policy": body, "days": 1}
    assert dash.client.post("/api/v1/policy/what-if", json=what_if, headers=a).status_code == 403

    # principals: only inside its own tenants; a platform-wide one only by a platform admin
    def key(tenants: list[str] | None, h: dict[str, str]) -> int:
        made = {"name": "k", "role": "viewer", "tenants": tenants}
        code: int = dash.client.post("/api/v1/api-keys", json=made, headers=h).status_code
        return code

    assert key(None, a) == 403 and key(["globex"], a) == 403 and key(["acme", "globex"], a) == 403
    assert key(["acme"], a) == 201 and key(None, p) == 201
    user = {"username": "u1", "password": PASSWORD, "role": "admin"}
    assert dash.client.post("/api/v1/users", json=user, headers=a).status_code == 403
    listed = dash.client.get("/api/v1/api-keys", headers=a).json()
    assert {k["name"] for k in listed} == {"acme-admin", "k"}
    assert all(k["tenants"] == ["acme"] for k in listed)
    entries = dash.client.get("/api/v1/audit", headers=a).json()
    assert entries and {e["tenant"] for e in entries} == {"acme"}


def _first_alert(ws: Any) -> dict[str, Any]:
    for _ in range(20):
        msg = ws.receive_json()
        if msg["type"] == "alert":
            return dict(msg["alert"])
    raise AssertionError("no alert message")


def test_the_live_feed_delivers_only_the_sessions_tenant(dash: Dash) -> None:
    _user(dash, "ann", Role.VIEWER, frozenset({"acme"}))
    dash.login("ann")
    with dash.client.websocket_connect("/api/v1/live", headers=dash.ws_headers()) as ws:
        time.sleep(0.2)  # the reader is blocked in XREAD from "now"
        add_alert(dash.redis, B_ALERT)  # globex's first: it must never arrive
        add_alert(dash.redis, make_alert(A_CALL, Dimension.REPLAY, tenant="acme"))
        got = _first_alert(ws)
        assert got["call_id"] == A_CALL and got["tenant"] == "acme"


def test_the_hub_offers_each_client_only_its_tenants() -> None:
    async def go() -> None:
        hub = LiveHub(redis.asyncio.Redis(), Keys(prefix="t:"), 10)
        acme, platform = hub.connect(frozenset({"acme"})), hub.connect()
        hub.publish({"n": 1}, tenant="globex")
        hub.publish({"n": 2}, tenant="acme")
        hub.publish({"n": 3})  # no tenant: platform-wide clients only
        assert [acme.queue.get_nowait() for _ in range(acme.queue.qsize())] == ['{"n":2}']
        assert platform.queue.qsize() == 3

    asyncio.run(go())


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def test_a_webhook_filtered_to_a_tenant_receives_only_its_alerts(
    dash: Dash, receiver: Receiver
) -> None:
    h = dash.key_headers("admin")
    made = dash.client.post(
        "/api/v1/webhooks",
        json={"url": receiver.url, "allow_private": True, "tenants": ["acme"]},
        headers=h,
    )
    assert made.status_code == 201, made.text
    assert made.json()["endpoint"]["tenants"] == ["acme"]
    receiver.secrets = [made.json()["secret"]]
    bad = {"url": receiver.url, "allow_private": True, "tenants": ["Not A Tenant"]}
    assert dash.client.post("/api/v1/webhooks", json=bad, headers=h).status_code == 422
    add_alert(dash.redis, B_ALERT)
    add_alert(dash.redis, A_ALERT)
    deliver_all(dash.bus, VirtualClock())
    delivered = [p["data"] for p in receiver.first.values()]
    assert [(d["call_id"], d["tenant"]) for d in delivered] == [(A_CALL, "acme")]


def test_oidc_tenant_claim_mapping() -> None:
    assert map_tenants({"tenants": ["acme"]}, "") == (None, "")  # unset: platform-wide
    assert map_tenants({"org": {"t": ["acme", "globex"]}}, "org.t") == (
        frozenset({"acme", "globex"}),
        "",
    )
    assert map_tenants({"t": "acme"}, "t") == (frozenset({"acme"}), "")
    assert map_tenants({"t": ["*"]}, "t") == (None, "")
    assert map_tenants({}, "t") == (frozenset(), "no t value names a tenant")
    tenants, why = map_tenants({"t": ["Bad Name"]}, "t")
    assert tenants == frozenset() and "invalid tenant" in why


def test_a_scoped_admin_manages_only_its_tenants_webhooks(dash: Dash) -> None:
    p = dash.key_headers("admin")
    url = "https://93.184.216.34/hooks/cs"  # a public address literal: no DNS needed

    def add(h: dict[str, str], **extra: Any) -> Any:
        return dash.client.post("/api/v1/webhooks", json={"url": url, **extra}, headers=h)

    everyone = add(p).json()["endpoint"]["id"]
    theirs = add(p, tenants=["globex"]).json()["endpoint"]["id"]
    a = _key(dash, "acme-admin", Role.ADMIN, frozenset({"acme"}))
    assert dash.client.get("/api/v1/webhooks", headers=a).json()["endpoints"] == []
    assert add(a, tenants=["globex"]).status_code == 404
    assert add(a, allow_private=True).status_code == 403
    made = add(a)
    assert made.status_code == 201 and made.json()["endpoint"]["tenants"] == ["acme"]
    mine = made.json()["endpoint"]["id"]
    listed = dash.client.get("/api/v1/webhooks", headers=a).json()["endpoints"]
    assert [e["id"] for e in listed] == [mine]
    for other in (everyone, theirs):
        assert dash.client.post(f"/api/v1/webhooks/{other}/disable", headers=a).status_code == 404
        assert dash.client.delete(f"/api/v1/webhooks/{other}", headers=a).status_code == 404
    assert dash.client.post(f"/api/v1/webhooks/{mine}/disable", headers=a).status_code == 200
    (entry,) = [e for e in _audit(dash) if e["action"] == "webhook.disable"]
    assert entry["tenant"] == "acme"
    assert len(dash.client.get("/api/v1/webhooks", headers=p).json()["endpoints"]) == 3
