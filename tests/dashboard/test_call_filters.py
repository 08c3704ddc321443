"""Live calls filtered by band, queue, agent and time (API and page), and the call
page's caller-ID attestation and related calls (same ANI hash, same watchlist match)."""

from __future__ import annotations

from datetime import timedelta

from conftest import Dash
from dash_factory import ANI, T0, add_alert, make_alert, start_call

from detectors.alert_schema import (
    Alert,
    Band,
    CallerIdentityInfo,
    Dimension,
    Reason,
    alert_id_for,
)

OTHER_ANI = "+442079460000"


def _calls(dash: Dash, query: str = "") -> list[str]:
    resp = dash.client.get("/api/v1/calls" + query)
    assert resp.status_code == 200, resp.text
    return sorted(c["call_id"] for c in resp.json())


def _claim(dash: Dash, call_id: str, **fields: str) -> None:
    resp = dash.client.patch(
        f"/api/v1/calls/{call_id}", json=fields, headers=dash.key_headers("analyst")
    )
    assert resp.status_code == 202, resp.text


def _fraudster_alert(call_id: str, entry: str) -> Alert:
    dim = Dimension.KNOWN_FRAUDSTER
    return make_alert(call_id, dim, Band.HIGH, 0.95).model_copy(
        update={
            "alert_id": alert_id_for(call_id, dim, 0),
            "reasons": (
                Reason(
                    dimension=dim,
                    start_s=1.0,
                    end_s=4.0,
                    score=0.95,
                    detail=f"voice matches watchlist entry {entry}",
                ),
            ),
        }
    )


def test_live_calls_filter_by_band_queue_agent_and_time(dash: Dash) -> None:
    for i in range(3):
        start_call(dash.redis, f"call-{i}", at=T0 + timedelta(minutes=10 * i))
    add_alert(dash.redis, make_alert("call-2", Dimension.REPLAY, Band.HIGH, 0.9))
    _claim(dash, "call-0", queue="cards", agent_id="agent-7")
    _claim(dash, "call-1", queue="cards")
    _claim(dash, "call-1", agent_id="agent-9")  # a later claim keeps the earlier queue
    _claim(dash, "call-2", queue="loans", agent_id="agent-7")
    _claim(dash, "call-2", queue="cards")  # the newest claim wins
    dash.client.headers.update(dash.key_headers("viewer"))

    calls = {c["call_id"]: c for c in dash.client.get("/api/v1/calls").json()}
    assert {k: (c["queue"], c["agent_id"]) for k, c in calls.items()} == {
        "call-0": ("cards", "agent-7"),
        "call-1": ("cards", "agent-9"),
        "call-2": ("cards", "agent-7"),
    }
    assert _calls(dash, "?band=high") == ["call-2"]
    assert _calls(dash, "?queue=cards&agent=agent-7") == ["call-0", "call-2"]
    assert _calls(dash, "?queue=loans") == []
    assert _calls(dash, "?agent=agent-9") == ["call-1"]
    # time: the call's last event, inclusive; no zone means UTC, a zone is honoured
    assert _calls(dash, "?since=2026-11-30T12:10:00") == ["call-1", "call-2"]
    assert _calls(dash, "?until=2026-11-30T12:10:00Z") == ["call-0", "call-1"]
    assert _calls(dash, "?since=2026-11-30T13:05:00%2B01:00&until=2026-11-30T12:15:00") == [
        "call-1"
    ]
    assert _calls(dash, "?queue=&agent=") == ["call-0", "call-1", "call-2"]  # blank: no filter
    assert dash.client.get("/api/v1/calls?since=yesterday").status_code == 422
    assert dash.client.get("/api/v1/calls?queue=" + "q" * 65).status_code == 422


def test_calls_page_filters_and_shows_queue_and_agent(dash: Dash) -> None:
    start_call(dash.redis, "call-1")
    start_call(dash.redis, "call-2", at=T0 + timedelta(hours=1))
    _claim(dash, "call-1", queue="cards", agent_id="agent-7")
    dash.login("viewer")
    page = dash.client.get("/?queue=cards&agent=&since=2026-11-30T11:00&until=").text
    assert 'href="/calls/call-1"' in page and 'href="/calls/call-2"' not in page
    assert "<td>cards</td><td>agent-7</td>" in page
    assert (
        'name="queue" aria-label="queue" placeholder="queue" maxlength="64" value="cards"' in page
    )
    assert 'value="2026-11-30T11:00:00"' in page  # the form keeps what was asked
    later = dash.client.get("/?since=2026-11-30T12:30").text
    assert 'href="/calls/call-2"' in later and 'href="/calls/call-1"' not in later


def test_call_shows_caller_id_attestation(dash: Dash) -> None:
    identity = CallerIdentityInfo(
        attestation="B",
        verification="failed",
        verification_reason="stale_iat",
        origid="2b9f4c8e-0a1d-4e36-9d6f-3f1c2b7a9e10",
        has_pai=True,
        pai_matches_from=False,
        diversion_count=1,
        diversion_reasons=["unconditional"],
    )
    start_call(dash.redis, "call-1", identity=identity)
    start_call(dash.redis, "call-2")  # no Identity facts (not a SIP call)
    dash.login("viewer")
    got = dash.client.get("/api/v1/calls/call-1").json()["identity"]
    assert got["attestation"] == "B" and got["verification"] == "failed"
    assert got["verification_reason"] == "stale_iat" and got["diversion_count"] == 1
    assert dash.client.get("/api/v1/calls/call-2").json()["identity"] is None
    page = dash.client.get("/calls/call-1").text
    assert "attestation B · failed (stale_iat)" in page
    assert (
        "P-Asserted-Identity differs from From" in page and "1 diversion(s): unconditional" in page
    )


def test_related_calls_share_the_ani_hash_or_a_watchlist_match(dash: Dash) -> None:
    start_call(dash.redis, "call-1")
    start_call(dash.redis, "call-2", at=T0 + timedelta(minutes=5))  # same ANI
    start_call(dash.redis, "call-3", ani=OTHER_ANI)
    start_call(dash.redis, "call-4", ani=OTHER_ANI)
    add_alert(dash.redis, _fraudster_alert("call-1", "wl_00112233aabbccdd"))
    add_alert(dash.redis, _fraudster_alert("call-3", "wl_00112233aabbccdd"))
    add_alert(dash.redis, _fraudster_alert("call-4", "wl_99999999aabbccdd"))
    add_alert(dash.redis, make_alert("call-4", Dimension.REPLAY, Band.HIGH, 0.9))
    dash.login("viewer")
    related = dash.client.get("/api/v1/calls/call-1/related").json()
    assert sorted((r["call_id"], r["link"]) for r in related) == [
        ("call-2", "ani"),
        ("call-3", "voiceprint"),
    ]
    assert ANI not in str(related)  # the hash links them; no number is shown
    assert {
        (r["call_id"], r["link"]) for r in dash.client.get("/api/v1/calls/call-4/related").json()
    } == {("call-3", "ani")}
    assert dash.client.get("/api/v1/calls/nope/related").json() == []
    page = dash.client.get("/calls/call-1").text
    assert 'href="/calls/call-2">call-2</a> · same ANI hash' in page
    assert 'href="/calls/call-3">call-3</a> · matched watchlist entry wl_00112233aabbccdd' in page
