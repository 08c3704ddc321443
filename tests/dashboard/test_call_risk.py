"""Risk by the PBX's own call id (issue 12): the bus publisher (real, on a real
redis-server) keeps each call's latest alert per dimension and the external-id index;
the dashboard API answers ``GET /api/v1/calls/by-external-id/{system}/{id}/risk`` from
that state with one lookup, for an IVR deciding mid-call."""

from __future__ import annotations

from datetime import timedelta

import redis
from conftest import Dash
from dash_factory import T0, make_alert

from detectors.alert_schema import Band, CallEvent, Dimension
from detectors.bus.publisher import AlertPublisher

EXT = {"twilio": "CA0123456789abcdef", "sip-call-id": "a84b4c76e66710@pc33.example"}


def _publisher(dash: Dash) -> AlertPublisher:
    url = dash.bus.redis_url.get_secret_value()  # type: ignore[union-attr]
    pub = AlertPublisher(redis.Redis.from_url(url), dash.bus)
    pub.start()
    return pub


def _event(kind: str, reason: str = "") -> CallEvent:
    return CallEvent(call_id="call-9", event=kind, at=T0, reason=reason, external_ids=EXT)  # type: ignore[arg-type]


def _risk(dash: Dash, path: str, role: str = "viewer") -> tuple[int, dict[str, object]]:
    resp = dash.client.get(path, headers=dash.key_headers(role))
    return resp.status_code, resp.json()


def test_risk_by_external_id_follows_the_latest_alert_per_dimension(dash: Dash) -> None:
    pub = _publisher(dash)
    try:
        pub.publish_event(_event("started"))
        assert pub.flush(10)
        status, body = _risk(dash, "/api/v1/calls/by-external-id/twilio/CA0123456789abcdef/risk")
        assert status == 200, body
        assert body["call_id"] == "call-9" and body["band"] == "low" and body["dimensions"] == {}

        pub.publish_alert(make_alert("call-9", Dimension.REPLAY, Band.ELEVATED, 0.6))
        pub.publish_alert(make_alert("call-9", Dimension.SYNTHETIC_VOICE, Band.ELEVATED, 0.71))
        pub.publish_alert(make_alert("call-9", Dimension.SYNTHETIC_VOICE, Band.HIGH, 0.95, 2))
        # a late retry of revision 1 must not roll the dimension back
        pub.publish_alert(make_alert("call-9", Dimension.SYNTHETIC_VOICE, Band.ELEVATED, 0.71))
        assert pub.flush(10)
        sip = "/api/v1/calls/by-external-id/sip-call-id/a84b4c76e66710@pc33.example/risk"
        status, body = _risk(dash, sip)
        assert status == 200, body
        assert body["band"] == "high"
        dims = body["dimensions"]
        assert isinstance(dims, dict)
        assert dims["synthetic_voice"]["revision"] == 2
        assert dims["synthetic_voice"]["score"] == 0.95
        assert dims["replay"]["band"] == "elevated"
        assert all("+44" not in r for d in dims.values() for r in d["reasons"])  # masked

        pub.publish_event(_event("ended", "bye"))
        assert pub.flush(10)
        status, body = _risk(dash, "/api/v1/calls/call-9/risk")
        assert status == 200 and body["state"] == "ended" and body["band"] == "high"
        ttl = dash.redis.ttl(dash.ctx.store.keys.external_id("twilio", EXT["twilio"]))
        assert 0 < ttl <= dash.bus.call_state_ttl_s  # the index expires with the call
    finally:
        pub.close()


def test_unknown_ids_bad_systems_and_no_credentials(dash: Dash) -> None:
    status, _ = _risk(dash, "/api/v1/calls/by-external-id/twilio/CAnothere/risk")
    assert status == 404
    status, _ = _risk(dash, "/api/v1/calls/by-external-id/Bad%20System/x/risk")
    assert status == 422
    resp = dash.client.get("/api/v1/calls/by-external-id/twilio/x/risk")
    assert resp.status_code == 401
    status, _ = _risk(dash, "/api/v1/calls/nope/risk")
    assert status == 404


def test_unanalysed_calls_say_why(dash: Dash) -> None:
    pub = _publisher(dash)
    try:
        pub.publish_event(_event("started", "unanalyzed:capacity"))
        assert pub.flush(10)
        status, body = _risk(dash, "/api/v1/calls/call-9/risk")
        assert status == 200 and body["unanalyzed"] == "capacity"
    finally:
        pub.close()


def test_alert_escalations_are_ordered_by_update_time_not_arrival(dash: Dash) -> None:
    """Two nodes (or a resend) may deliver revisions out of order: the newest wins."""
    pub = _publisher(dash)
    try:
        pub.publish_event(_event("started"))
        newer = make_alert("call-9", Dimension.REPLAY, Band.HIGH, 0.9, revision=3)
        older = make_alert("call-9", Dimension.REPLAY, Band.ELEVATED, 0.6, revision=1)
        assert newer.updated_at - older.updated_at == timedelta(seconds=2)
        pub.publish_alert(newer)
        pub.publish_alert(older)
        assert pub.flush(10)
        status, body = _risk(dash, "/api/v1/calls/call-9/risk")
        assert status == 200 and body["dimensions"]["replay"]["revision"] == 3  # type: ignore[index]
    finally:
        pub.close()
