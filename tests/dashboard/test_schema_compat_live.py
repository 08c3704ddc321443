"""The dashboard in a rolling upgrade (a real redis-server): alerts and call events of a
newer minor schema version, with fields it does not know, are listed and pushed on the
live feed; one of another major version is dropped and counted (``/api/v1/system``'s
``live_feed_dropped``), and the feed goes on."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from conftest import Dash
from dash_factory import KEYS, make_alert

from detectors.alert_schema import CallEvent
from detectors.bus.codec import encode

sys.path.append(str(Path(__file__).resolve().parents[1] / "bus"))  # schema_future
from schema_future import future


def test_newer_minor_versions_are_shown_and_another_major_is_counted(dash: Dash) -> None:
    dash.login("viewer")
    newer, other, after = make_alert("call-newer"), make_alert("call-2"), make_alert("call-3")
    started = CallEvent(call_id="call-newer", event="started", at=newer.created_at, tenant="t")
    last = make_alert("call-last")  # plain 1.0 entries last: every read ends with them
    last_event = started.model_copy(update={"call_id": "call-last"})
    alerts: list[str] = []
    calls: list[str] = []
    with dash.client.websocket_connect("/api/v1/live", headers=dash.ws_headers()) as ws:
        time.sleep(0.2)  # the reader is blocked in XREAD from "now"
        dash.redis.xadd(KEYS.events, future(started))  # type: ignore[arg-type]
        dash.redis.xadd(KEYS.alerts, future(other, "2.0"))  # type: ignore[arg-type]
        dash.redis.xadd(KEYS.alerts, future(newer))  # type: ignore[arg-type]
        dash.redis.xadd(KEYS.alerts, future(after, "1.0"))  # type: ignore[arg-type]
        dash.redis.xadd(KEYS.alerts, encode(last))  # type: ignore[arg-type]
        dash.redis.xadd(KEYS.events, encode(last_event))  # type: ignore[arg-type]
        while "call-last" not in alerts or "call-last" not in calls:
            msg = ws.receive_json()
            if msg["type"] == "alert":
                alerts.append(msg["alert"]["call_id"])
            elif msg["type"] == "call":
                calls.append(msg["call"]["call_id"])
    assert alerts == ["call-newer", "call-3", "call-last"]  # the 2.0 one skipped, not fatal
    assert calls == ["call-newer", "call-last"]
    listed = {a["call_id"] for a in dash.client.get("/api/v1/alerts").json()}
    assert {"call-newer", "call-3", "call-last"} <= listed and "call-2" not in listed
    health = dash.client.get("/api/v1/system").json()
    assert health["live_feed_dropped"] == 1
