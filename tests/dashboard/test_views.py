"""What analysts see and do: the queue and its triage, labels for calibration, masked
numbers and the audited reveal, the call timeline, system health, the live feed."""

from __future__ import annotations

import json
import time

import pytest
from conftest import ORIGIN, Dash
from dash_factory import ANI, DNIS, KEYS, add_alert, add_scores, make_alert, start_call
from starlette.websockets import WebSocketDisconnect

from dashboard.masking import has_phone_number, is_phone_number, mask_ids, mask_text
from detectors.alert_schema import Band, Dimension


def test_masking_rules() -> None:
    assert mask_text(ANI) == "+•••••••••567"
    assert mask_text("call back +44 20 7123 4567 today") == "call back +•••••••••567 today"
    assert is_phone_number("(020) 7123-4567") and not is_phone_number("1764504000.42")
    assert mask_ids({"from": ANI, "linkedid": "1764504000.42", "sid": "CA12ab"}) == {
        "from": "+•••••••••567",
        "linkedid": "1764504000.42",
        "sid": "CA12ab",
    }
    assert not has_phone_number("alert al_3f2a revision 2 score 0.93")
    # our own ids stay readable even where their hex holds a digit run (CI saw a reason's
    # watchlist entry shown as wl_c7fff0c••••552bb); a number next to one is still masked
    entry = "watchlist entry wl_c7fff0c3606552bb: s-norm 6.18 over call_0123456789abcdef"
    assert mask_text(entry) == entry and not has_phone_number(entry)
    assert mask_text("wl_c7fff0c3606552bb +15551234567") == "wl_c7fff0c3606552bb +••••••••567"
    assert mask_text("ani_15551234567000") == "ani_•••••••••••000"  # no hex letter: no id


def test_queue_triage_and_labels(dash: Dash) -> None:
    start_call(dash.redis)
    add_alert(dash.redis, make_alert(revision=1, band=Band.ELEVATED, score=0.75))
    add_alert(dash.redis, make_alert(revision=2, band=Band.HIGH, score=0.93))
    add_alert(dash.redis, make_alert("call-2", Dimension.REPLAY, Band.ELEVATED, 0.8))
    headers = dash.login("analyst")
    queue = dash.client.get("/api/v1/alerts").json()
    assert [(a["call_id"], a["revision"]) for a in queue] == [("call-1", 2), ("call-2", 1)]
    alert_id = queue[0]["alert_id"]
    base = f"/api/v1/alerts/{alert_id}"
    assert (
        dash.client.post(f"{base}/ack", headers=headers).json()["triage"]["status"]
        == "acknowledged"
    )
    assigned = dash.client.post(f"{base}/assign", json={"assignee": "admin"}, headers=headers)
    assert assigned.json()["triage"]["assignee"] == "admin"
    nobody = dash.client.post(f"{base}/assign", json={"assignee": "ghost"}, headers=headers)
    assert nobody.status_code == 422
    comment = dash.client.post(
        f"{base}/comments", json={"text": "voice is robotic"}, headers=headers
    )
    assert comment.status_code == 201
    labelled = dash.client.post(f"{base}/label", json={"label": "true_positive"}, headers=headers)
    assert labelled.json()["triage"]["label"] == "true_positive"
    bad = dash.client.post(f"{base}/label", json={"label": "maybe"}, headers=headers)
    assert bad.status_code == 422
    assert dash.client.post("/api/v1/alerts/al_nope/ack", headers=headers).status_code == 404
    assert [a["alert_id"] for a in dash.client.get("/api/v1/alerts?status=new").json()] == [
        queue[1]["alert_id"]
    ]
    assert len(dash.client.get("/api/v1/alerts?band=high").json()) == 1
    # stored for calibration: the score, threshold and versions behind the label
    (label,) = dash.client.get("/api/v1/labels").json()
    assert label["label"] == "true_positive" and label["score"] == 0.93
    assert label["threshold"] == 0.7 and label["model_versions"] == {"aasist": "1.0"}
    assert label["revision"] == 2 and label["by"] == "analyst"
    stored = json.loads(dash.redis.hget("cs-test:dash:labels", alert_id) or b"{}")
    assert stored["label"] == "true_positive"
    comments = dash.client.get(f"{base}/comments").json()
    assert [c["text"] for c in comments] == ["voice is robotic"]
    # the audit log has every action, by whom
    dash.login("admin")
    actions = [(e["action"], e["actor"]) for e in dash.client.get("/api/v1/audit").json()]
    for action in ("alert.ack", "alert.assign", "alert.comment", "alert.label"):
        assert (action, "analyst") in actions
    # the page shows it
    page = dash.client.get("/alerts").text
    assert alert_id in page and "true positive" in page


def test_numbers_are_masked_and_reveal_is_audited(dash: Dash) -> None:
    start_call(dash.redis)
    add_alert(dash.redis, make_alert())
    dash.login("viewer")
    payloads = [
        dash.client.get("/api/v1/calls").text,
        dash.client.get("/api/v1/calls/call-1").text,
        dash.client.get("/api/v1/alerts").text,
        dash.client.get("/").text,
        dash.client.get("/calls/call-1").text,
        dash.client.get("/alerts").text,
    ]
    for text in payloads:
        assert ANI not in text and DNIS not in text and "2071234567" not in text
    calls = dash.client.get("/api/v1/calls").json()
    assert calls[0]["ani"] == "+•••••••••567" and calls[0]["dnis"] == "+••••••••123"
    assert calls[0]["external_ids"]["asterisk_linkedid"] == "1764504000.42"
    viewer = dash.login("viewer")
    body = {"reason": "customer asked for a callback"}
    assert (
        dash.client.post("/api/v1/calls/call-1/reveal", json=body, headers=viewer).status_code
        == 403
    )
    analyst = dash.login("analyst")
    revealed = dash.client.post("/api/v1/calls/call-1/reveal", json=body, headers=analyst)
    assert revealed.status_code == 200 and revealed.headers["cache-control"] == "no-store"
    assert revealed.json()["ani"] == ANI and revealed.json()["dnis"] == DNIS
    short = dash.client.post("/api/v1/calls/call-1/reveal", json={"reason": ""}, headers=analyst)
    assert short.status_code == 422
    dash.login("admin")
    (entry,) = [
        e for e in dash.client.get("/api/v1/audit").json() if e["action"] == "call.reveal_numbers"
    ]
    assert entry["actor"] == "analyst" and entry["target"] == "call-1"
    assert ANI not in json.dumps(entry)


def test_live_calls_show_band_and_dimension(dash: Dash) -> None:
    start_call(dash.redis, "call-1")
    start_call(dash.redis, "call-2")
    add_alert(dash.redis, make_alert("call-2", Dimension.REPLAY, Band.ELEVATED, 0.8))
    add_alert(dash.redis, make_alert("call-2", Dimension.SYNTHETIC_VOICE, Band.HIGH, 0.9))
    dash.login("viewer")
    calls = dash.client.get("/api/v1/calls").json()
    assert [(c["call_id"], c["band"], c["dimension"]) for c in calls] == [
        ("call-2", "high", "synthetic_voice"),
        ("call-1", "low", None),
    ]
    assert [c["call_id"] for c in dash.client.get("/api/v1/calls?band=high").json()] == ["call-2"]
    page = dash.client.get("/").text
    assert "band-high" in page and "synthetic voice" in page


def test_call_detail_timeline_chart(dash: Dash) -> None:
    start_call(dash.redis)
    add_scores(dash.redis)
    add_scores(dash.redis, "call-9")  # another call's scores stay out
    add_alert(dash.redis, make_alert())
    dash.login("viewer")
    detail = dash.client.get("/api/v1/calls/call-1").json()
    assert set(detail["timeline"]) == {"synthetic_voice", "replay"}
    assert [p["t"] for p in detail["timeline"]["replay"]] == [4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    assert detail["abstentions"] == {"caller_id": 1}
    assert detail["alerts"][0]["reasons"][0]["detail"] == "from +•••••••••567"
    page = dash.client.get("/calls/call-1").text
    assert page.count("<polyline") == 2 and 'class="threshold"' in page
    assert dash.client.get("/api/v1/calls/nope").status_code == 404
    assert dash.client.get("/calls/nope").status_code == 404


def test_system_health(dash: Dash) -> None:
    start_call(dash.redis)
    add_alert(dash.redis, make_alert())
    dash.redis.xgroup_create(KEYS.alerts, "webhooks", id="0")
    dash.login("viewer")
    health = dash.client.get("/api/v1/system").json()
    assert health["redis_ok"] and health["live_calls"] == 1
    alerts = health["streams"]["alerts"]
    assert alerts["length"] == 1
    assert alerts["groups"] == [{"name": "webhooks", "pending": 0, "lag": 1}]
    assert "reachable" in dash.client.get("/system").text


def _wait_for(ws: object, kind: str) -> dict[str, object]:
    for _ in range(20):
        msg = ws.receive_json()  # type: ignore[attr-defined]
        if msg["type"] == kind:
            return dict(msg)
    raise AssertionError(f"no {kind} message")


def test_live_feed_delivers_new_alerts_masked(dash: Dash) -> None:
    dash.login("viewer")
    with dash.client.websocket_connect("/api/v1/live", headers=dash.ws_headers()) as ws:
        time.sleep(0.2)  # the reader is blocked in XREAD from "now"
        add_alert(dash.redis, make_alert())
        start_call(dash.redis, "call-7")
        msg = _wait_for(ws, "alert")
        alert = msg["alert"]
        assert alert["call_id"] == "call-1" and alert["band"] == "high"  # type: ignore[index]
        assert ANI not in json.dumps(msg)
        call = _wait_for(ws, "call")
        assert call["call"]["call_id"] == "call-7"  # type: ignore[index]
        # triage by someone else shows up too
        dash.client.cookies.clear()
        headers = dash.key_headers("analyst")
        dash.client.post(f"/api/v1/alerts/{make_alert().alert_id}/ack", headers=headers)
        assert _wait_for(ws, "triage")["triage"]["status"] == "acknowledged"  # type: ignore[index]


@pytest.mark.parametrize(
    ("who", "origin"),
    [
        ("viewer", "https://evil.example"),
        ("viewer", None),
        (None, ORIGIN),
        ("viewer-expired", ORIGIN),
    ],
)
def test_live_feed_refuses(dash: Dash, who: str | None, origin: str | None) -> None:
    dash.client.cookies.clear()
    if who:
        dash.login("viewer")
    if who == "viewer-expired":
        dash.clock.now += dash.ctx.settings.session_idle_s + 1
    headers = dash.ws_headers(origin)
    with (
        pytest.raises(WebSocketDisconnect) as refused,
        dash.client.websocket_connect("/api/v1/live", headers=headers) as ws,
    ):
        ws.receive_json()
    assert refused.value.code == 1008


def test_live_feed_for_machines_without_origin(dash: Dash) -> None:
    with dash.client.websocket_connect("/api/v1/live", headers=dash.key_headers("viewer")) as ws:
        time.sleep(0.2)
        add_alert(dash.redis, make_alert())
        assert _wait_for(ws, "alert")["alert"]["call_id"] == "call-1"  # type: ignore[index]


def test_live_feed_connects_are_rate_limited(dash: Dash) -> None:
    dash.login("viewer")
    limit = dash.ctx.settings.live_connects
    for _ in range(limit):
        with dash.client.websocket_connect("/api/v1/live", headers=dash.ws_headers()):
            pass
    with (
        pytest.raises(WebSocketDisconnect),
        dash.client.websocket_connect("/api/v1/live", headers=dash.ws_headers()) as ws,
    ):
        ws.receive_json()


def test_openapi_lists_the_api(dash: Dash) -> None:
    dash.login("viewer")
    spec = dash.client.get("/api/v1/openapi.json").json()
    assert "/api/v1/alerts/{alert_id}/label" in spec["paths"]
    assert "/api/v1/calls/{call_id}/reveal" in spec["paths"]
    assert "/login" not in spec["paths"]
    assert "/api/v1/alerts/{alert_id}/label" in dash.client.get("/api/v1/docs").text
