"""The two-person rule on the real app and a real redis-server: an analyst's new
watchlist entry is pending; its author cannot approve it, nor can an API key; a second
analyst approves it (audited, the version moves so bridges reload) or rejects it
(deleted, audited); the rule can be turned off."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from conftest import CHEAP_HASHER, PASSWORD, Dash, FakeClock, make_settings
from dash_factory import KEYS
from fastapi.testclient import TestClient
from test_watchlist_api import ENTRY, audit_actions, voiceprint

from dashboard.app import create_app
from dashboard.auth import Role
from detectors.bus.biometrics import WatchlistEntry
from detectors.bus.redis_server import RedisServer
from detectors.bus.settings import BusSettings


def stored(dash: Dash, entry_id: str) -> WatchlistEntry:
    body = dash.redis.hget(KEYS.watchlist("bank"), entry_id)
    assert body is not None
    return WatchlistEntry.model_validate_json(body)  # type: ignore[arg-type]


def login(dash: Dash, user: str) -> dict[str, str]:
    """``dash.login``, past the per-address login limit (this test logs in often)."""
    dash.client.portal.call(dash.ctx.login_limit.reset, "login-ip", "testclient")  # type: ignore[union-attr]
    return dash.login(user)


def add(dash: Dash, headers: dict[str, str]) -> str:
    made = dash.client.post(
        "/api/v1/watchlist", json={**ENTRY, "voiceprint": voiceprint()}, headers=headers
    )
    assert made.status_code == 201, made.text
    assert made.json()["status"] == "pending"
    return str(made.json()["entry_id"])


def test_second_analyst_approves_author_and_machines_cannot(dash: Dash) -> None:
    dash.client.portal.call(dash.ctx.users.create, "bob", PASSWORD, Role.ANALYST)  # type: ignore[union-attr]
    entry_id = add(dash, login(dash, "analyst"))
    assert stored(dash, entry_id).status == "pending"
    approve = f"/api/v1/watchlist/{entry_id}/approve?tenant=bank"
    # the author, in their own session
    own = dash.client.post(approve, headers=login(dash, "analyst"))
    assert own.status_code == 403 and "cannot approve" in own.text
    # another analyst's API key: a machine is not a second person
    machine = dash.client.post(approve, headers=dash.key_headers("analyst"))
    assert machine.status_code == 403 and "needs a person" in machine.text
    # a viewer may not
    dash.client.portal.call(dash.ctx.users.create, "vic", PASSWORD, Role.VIEWER)  # type: ignore[union-attr]
    assert dash.client.post(approve, headers=login(dash, "vic")).status_code == 403
    assert stored(dash, entry_id).status == "pending"
    version = int(dash.redis.get(KEYS.watchlist_version("bank")) or 0)
    ok = dash.client.post(approve, headers=login(dash, "bob"))
    assert ok.status_code == 200, ok.text
    assert ok.json()["status"] == "active" and ok.json()["approved_by"] == "bob"
    entry = stored(dash, entry_id)
    assert entry.active and entry.approved_by == "bob" and entry.added_by == "analyst"
    assert int(dash.redis.get(KEYS.watchlist_version("bank")) or 0) == version + 1
    again = dash.client.post(approve, headers=login(dash, "admin"))
    assert again.status_code == 409 and "not pending" in again.text
    actions = audit_actions(dash)
    assert actions[:2] == ["watchlist.approve_refused", "watchlist.approve"]
    assert actions.count("watchlist.approve_refused") == 2  # the author's try, and the repeat
    # the rejected path: deleted and audited; an active entry is not "rejected"
    other = add(dash, dash.key_headers("analyst"))
    assert (
        dash.client.post(
            f"/api/v1/watchlist/{entry_id}/reject?tenant=bank", headers=login(dash, "bob")
        ).status_code
        == 409
    )
    gone = dash.client.post(
        f"/api/v1/watchlist/{other}/reject?tenant=bank",
        json={"reason": "wrong caller, see +442071234567"},
        headers=login(dash, "bob"),
    )
    assert gone.status_code == 200 and dash.redis.hget(KEYS.watchlist("bank"), other) is None
    newest = dash.client.portal.call(dash.ctx.audit.recent)[0]  # type: ignore[union-attr]
    assert newest["action"] == "watchlist.reject" and "442071234567" not in str(newest)
    listed = dash.client.get("/api/v1/watchlist?tenant=bank", headers=login(dash, "bob")).json()
    assert [(e["entry_id"], e["status"]) for e in listed["entries"]] == [(entry_id, "active")]
    page = dash.client.get("/watchlist?tenant=bank")
    assert "approved by bob" in page.text


def test_the_rule_can_be_turned_off(
    r: redis.Redis, redis_server: RedisServer, tmp_path: Path
) -> None:
    bus = BusSettings(
        redis_url=redis_server.url, state_dir=tmp_path / "state", key_prefix=KEYS.prefix
    )
    app = create_app(
        make_settings(watchlist_two_person=False),
        bus,
        clock=FakeClock(),
        password_hasher=CHEAP_HASHER,
    )
    with TestClient(app, base_url="https://testserver") as client:
        _, key = client.portal.call(app.state.ctx.api_keys.create, "m", Role.ANALYST)  # type: ignore[union-attr]
        made = client.post(
            "/api/v1/watchlist",
            json={**ENTRY, "voiceprint": voiceprint()},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert made.status_code == 201 and made.json()["status"] == "active"


def test_an_entry_cannot_claim_its_author_as_approver() -> None:
    body = {
        "entry_id": "wl_0123456789abcdef",
        "tenant": "bank",
        "label": "x",
        "legal_basis": "y",
        "case_ref": "z",
        "expires_at": "2030-01-01T00:00:00Z",
        "created_at": "2029-01-01T00:00:00Z",
        "added_by": "alice",
        **{k: v for k, v in voiceprint().items()},
    }
    WatchlistEntry.model_validate({**body, "approved_by": "bob"})
    with pytest.raises(ValueError, match="cannot be approved"):
        WatchlistEntry.model_validate({**body, "approved_by": "alice"})
    with pytest.raises(ValueError, match="no approver"):
        WatchlistEntry.model_validate({**body, "status": "pending", "approved_by": "bob"})
