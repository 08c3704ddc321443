"""Webhook endpoint management on the real app, a real redis-server, the real dispatcher
(virtual clock) and a real receiver verifying signatures with ``standardwebhooks``:
the secret the API shows once is the one deliveries are signed with; delivery health
shows the failures and the dead letter; a replay delivers it; rotation, disable/enable,
delete; SSRF refused; audited; no secret or payload in any listing."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from conftest import CHEAP_HASHER, Dash, make_settings
from dash_factory import ANI, add_alert, make_alert
from fastapi.testclient import TestClient
from webhook_driver import deliver_all

from dashboard.app import create_app
from dashboard.auth import Role
from detectors.alert_schema import event_id
from detectors.bus.webhooks.schedule import RetryPolicy, VirtualClock
from tests.bus.receiver import Receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _actions(dash: Dash) -> list[str]:
    return [e["action"] for e in dash.client.portal.call(dash.ctx.audit.recent)]


def test_endpoint_lifecycle_dead_letter_and_replay(dash: Dash, receiver: Receiver) -> None:
    h = dash.key_headers("admin")
    made = dash.client.post(
        "/api/v1/webhooks",
        json={"url": receiver.url, "event_types": ["call.alert.*"], "allow_private": True},
        headers=h,
    )
    assert made.status_code == 201, made.text
    ep, secret = made.json()["endpoint"], made.json()["secret"]
    assert secret.startswith("whsec_") and "secrets" not in ep
    receiver.secrets, receiver.status = [secret], 500

    alert = make_alert()
    add_alert(dash.redis, alert)
    clock = VirtualClock()
    stats = deliver_all(dash.bus, clock)
    attempts = RetryPolicy().max_attempts
    assert stats["dead"] == 1 and stats["attempts"] == attempts

    listed = dash.client.get("/api/v1/webhooks", headers=h)
    assert listed.status_code == 200
    body = listed.json()
    assert body["can_create"] and secret not in listed.text and "secrets" not in listed.text
    (row,) = body["endpoints"]
    health = row["health"]
    assert health["dead"] == 1 and health["queued"] == 0
    assert health["recent_failed"] == attempts and health["recent_ok"] == 0
    assert health["last_attempt"]["status"] == 500 and health["last_attempt"]["attempt"] == attempts

    dead = dash.client.get("/api/v1/webhooks/dead", headers=h)
    (letter,) = dead.json()
    assert letter["event_id"] == event_id(alert) and letter["endpoint"] == ep["id"]
    assert letter["attempts"] == attempts and letter["call_key"] == alert.call_id
    assert ANI not in dead.text and ANI[1:] not in dead.text  # never the alert it carries
    mine = dash.client.get(f"/api/v1/webhooks/dead?endpoint={ep['id']}", headers=h).json()
    assert mine == [letter]
    assert (
        dash.client.get("/api/v1/webhooks/dead?endpoint=ep_00000000deadbeef", headers=h).json()
        == []
    )

    replay = f"/api/v1/webhooks/{ep['id']}/deliveries/{event_id(alert)}/replay"
    assert dash.client.post(replay, headers=h).status_code == 202
    assert dash.client.post(replay, headers=h).status_code == 409  # still pending
    missing = f"/api/v1/webhooks/{ep['id']}/deliveries/al_nope.r1/replay"
    assert dash.client.post(missing, headers=h).status_code == 404
    receiver.status = None
    assert deliver_all(dash.bus, clock)["delivered"] == 1
    assert list(receiver.first) == [event_id(alert)] and receiver.bad_signatures == 0
    assert dash.client.get("/api/v1/webhooks/dead", headers=h).json() == []
    after = dash.client.get("/api/v1/webhooks", headers=h).json()["endpoints"][0]["health"]
    assert after["dead"] == 0 and after["last_attempt"]["status"] == 204

    # rotation: a new secret, the old one still signs during the overlap
    rotated = dash.client.post(f"/api/v1/webhooks/{ep['id']}/rotate", json={}, headers=h)
    new_secret = rotated.json()["secret"]
    assert rotated.status_code == 200 and new_secret != secret
    receiver.secrets = [new_secret]
    add_alert(dash.redis, make_alert(revision=2))
    assert deliver_all(dash.bus, clock)["delivered"] == 1 and receiver.bad_signatures == 0

    off = dash.client.post(f"/api/v1/webhooks/{ep['id']}/disable", json={}, headers=h)
    assert off.status_code == 200 and not off.json()["enabled"]
    assert off.json()["disabled_reason"] == "disabled by an administrator"
    assert dash.client.post(f"/api/v1/webhooks/{ep['id']}/enable", headers=h).json()["enabled"]

    # a receiver answering 410 disables its endpoint and parks its queue; enabling it
    # here resumes the parked delivery
    receiver.status = 410
    add_alert(dash.redis, make_alert(revision=3))
    deliver_all(dash.bus, clock)
    (gone,) = dash.client.get("/api/v1/webhooks", headers=h).json()["endpoints"]
    assert not gone["enabled"] and gone["disabled_reason"] == "410 Gone"
    assert gone["health"]["parked"] == 1 and gone["health"]["last_attempt"]["status"] == 410
    receiver.status = None
    assert dash.client.post(f"/api/v1/webhooks/{ep['id']}/enable", headers=h).status_code == 200
    assert deliver_all(dash.bus, clock)["delivered"] == 1 and len(receiver.first) == 3
    resumed = dash.client.get("/api/v1/webhooks", headers=h).json()["endpoints"][0]["health"]
    assert resumed["parked"] == 0 and resumed["queued"] == 0

    assert dash.client.delete(f"/api/v1/webhooks/{ep['id']}", headers=h).status_code == 200
    assert dash.client.delete(f"/api/v1/webhooks/{ep['id']}", headers=h).status_code == 404
    assert dash.client.get("/api/v1/webhooks", headers=h).json()["endpoints"] == []
    actions = _actions(dash)
    for action in ("add", "replay", "rotate", "disable", "enable", "delete"):
        assert f"webhook.{action}" in actions
    entries = dash.client.portal.call(dash.ctx.audit.recent)
    (added,) = [e for e in entries if e["action"] == "webhook.add"]
    assert added["detail"]["host"] == "http://127.0.0.1"  # never the URL's path or query
    assert secret not in json.dumps(entries) and new_secret not in json.dumps(entries)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({"url": "http://169.254.169.254/latest/meta-data"}, "metadata"),
        ({"url": "http://127.0.0.1:9/h"}, "loopback"),  # allow_private not asked for
        ({"url": "ftp://hooks.example/h"}, "scheme"),
        ({"url": "https://user:pw@hooks.example/h"}, "credentials"),
        ({"url": "http://127.0.0.1:9/h", "allow_private": True, "event_types": ["x.y"]}, "unknown"),
    ],
)
def test_bad_targets_are_refused(dash: Dash, body: dict[str, object], why: str) -> None:
    resp = dash.client.post("/api/v1/webhooks", json=body, headers=dash.key_headers("admin"))
    assert resp.status_code == 422, resp.text
    assert why in resp.json()["detail"]
    assert dash.redis.hlen("cs-test:wh:endpoints") == 0


def test_without_the_secrets_key_endpoints_are_listed_not_created(dash: Dash) -> None:
    bus = dash.bus.model_copy(update={"webhook_key": None})
    app = create_app(make_settings(), bus, password_hasher=CHEAP_HASHER)
    with TestClient(app, base_url="https://testserver") as client:
        _, key = client.portal.call(app.state.ctx.api_keys.create, "ops", Role.ADMIN)
        h = {"Authorization": f"Bearer {key}"}
        assert client.get("/api/v1/webhooks", headers=h).json()["can_create"] is False
        made = client.post("/api/v1/webhooks", json={"url": "https://hooks.example/h"}, headers=h)
        assert made.status_code == 503 and "CALLSHIELD_WEBHOOK_KEY_FILE" in made.text
        page = client.get("/api/v1/webhooks", headers=h)
        assert page.status_code == 200
