"""Watchlist, enrolment and mid-call claim APIs on the real app and a real redis-server:
analyst only, audited, never returning a voiceprint, refusing voiceprints that are not
unit float32 of the declared size, purging expired entries, and writing a claim as a
command on the bridges' stream only for a live call (by our id or the PBX's)."""

from __future__ import annotations

import json
import math
import struct

from conftest import Dash
from dash_factory import KEYS, start_call

from detectors.bus.biometrics import CallUpdate, WatchlistEntry, encode_embedding

DIM = 16


def voiceprint(scale: float = 1.0) -> dict[str, object]:
    v = [scale / math.sqrt(DIM)] * DIM
    return {
        "model": "speaker-resemblyzer-1.0.0+w300",
        "dim": DIM,
        "embedding": encode_embedding(struct.pack(f"<{DIM}f", *v)),
        "net_speech_s": 9.5,
        "source": "wav:case114.wav",
    }


ENTRY = {
    "tenant": "bank",
    "label": "case 114 caller",
    "legal_basis": "GDPR art. 9(2)(f) legal claims",
    "case_ref": "FR-2025-114",
    "expires_in_days": 30,
}


def audit_actions(dash: Dash) -> list[str]:
    return [e["action"] for e in dash.client.portal.call(dash.ctx.audit.recent)]


def test_watchlist_add_list_remove_audited_without_voiceprints(dash: Dash) -> None:
    h = dash.key_headers("analyst")
    made = dash.client.post(
        "/api/v1/watchlist", json={**ENTRY, "voiceprint": voiceprint()}, headers=h
    )
    assert made.status_code == 201, made.text
    body = made.json()
    assert "embedding" not in body and body["added_by"] == "key:m-analyst"
    stored = WatchlistEntry.model_validate_json(
        dash.redis.hget(KEYS.watchlist("bank"), body["entry_id"])  # type: ignore[arg-type]
    )
    assert stored.case_ref == "FR-2025-114" and stored.dim == DIM
    assert dash.redis.get(KEYS.watchlist_version("bank")) == b"1"
    listed = dash.client.get("/api/v1/watchlist?tenant=bank", headers=h).json()
    assert [e["entry_id"] for e in listed["entries"]] == [body["entry_id"]]
    assert "embedding" not in json.dumps(listed) and listed["version"] == 1
    # viewers see nothing of it
    assert (
        dash.client.get("/api/v1/watchlist", headers=dash.key_headers("viewer")).status_code == 403
    )
    gone = dash.client.delete(f"/api/v1/watchlist/{body['entry_id']}?tenant=bank", headers=h)
    assert gone.status_code == 200 and gone.json()["version"] == 2
    assert (
        dash.client.delete(
            f"/api/v1/watchlist/{body['entry_id']}?tenant=bank", headers=h
        ).status_code
        == 404
    )
    assert audit_actions(dash)[:2] == ["watchlist.remove", "watchlist.add"]


def test_bad_voiceprints_and_missing_fields_are_refused(dash: Dash) -> None:
    h = dash.key_headers("analyst")
    for bad, status, text in (
        ({**ENTRY, "voiceprint": voiceprint(scale=2.0)}, 422, "not L2-normalised"),
        ({**ENTRY, "voiceprint": {**voiceprint(), "dim": DIM + 1}}, 422, "bytes"),
        ({**ENTRY, "call_id": "call-1"}, 409, "no speaker embedding was kept"),
        ({**ENTRY}, 422, "voiceprint"),
        (
            {**{k: v for k, v in ENTRY.items() if k != "legal_basis"}, "voiceprint": voiceprint()},
            422,
            "legal_basis",
        ),
    ):
        resp = dash.client.post("/api/v1/watchlist", json=bad, headers=h)
        assert resp.status_code == status and text in resp.text, resp.text
    assert dash.redis.hlen(KEYS.watchlist("bank")) == 0


def test_expired_entries_are_purged_and_audited(dash: Dash) -> None:
    h = dash.key_headers("analyst")
    made = dash.client.post(
        "/api/v1/watchlist",
        json={**ENTRY, "expires_in_days": 1, "voiceprint": voiceprint()},
        headers=h,
    )
    assert made.status_code == 201
    dash.clock.now += 2 * 86_400
    listed = dash.client.get("/api/v1/watchlist?tenant=bank", headers=h).json()
    assert listed["entries"] == [] and listed["version"] == 2
    assert audit_actions(dash)[0] == "watchlist.expire"


def test_enrolment_needs_consent_and_is_audited(dash: Dash) -> None:
    h = dash.key_headers("analyst")
    body = {"tenant": "bank", "voiceprint": voiceprint()}
    assert dash.client.put("/api/v1/enrolments/acct-1", json=body, headers=h).status_code == 422
    ok = dash.client.put(
        "/api/v1/enrolments/acct-1", json={**body, "consent_ref": "IVR-7"}, headers=h
    )
    assert ok.status_code == 200 and "embedding" not in ok.json()
    assert dash.redis.exists(KEYS.enrolment("bank", "acct-1"))
    got = dash.client.get("/api/v1/enrolments/acct-1?tenant=bank", headers=h).json()
    assert got["consent_ref"] == "IVR-7"
    assert dash.client.delete("/api/v1/enrolments/acct-1?tenant=bank", headers=h).status_code == 200
    assert not dash.redis.exists(KEYS.enrolment("bank", "acct-1"))
    assert audit_actions(dash)[:2] == ["enrolment.remove", "enrolment.put"]


def test_patch_writes_a_command_for_live_calls_only(dash: Dash) -> None:
    start_call(dash.redis, "call-1")
    h = dash.key_headers("analyst")
    claim = {
        "claimed_account": "acct-1",
        "consent_ref": "IVR-7",
        "queue": "cards",
        "agent_id": "a-9",
    }
    resp = dash.client.patch("/api/v1/calls/call-1", json=claim, headers=h)
    assert resp.status_code == 202, resp.text
    assert resp.json()["fields"] == sorted(claim)
    by_ext = dash.client.patch(
        "/api/v1/calls/by-external-id/asterisk/1764504000.42", json={"queue": "loans"}, headers=h
    )
    assert by_ext.status_code == 404  # no extid mapping written yet
    dash.redis.set(KEYS.external_id("asterisk", "1764504000.42"), "call-1")
    by_ext = dash.client.patch(
        "/api/v1/calls/by-external-id/asterisk/1764504000.42", json={"queue": "loans"}, headers=h
    )
    assert by_ext.status_code == 202 and by_ext.json()["call_id"] == "call-1"
    updates = [
        CallUpdate.model_validate_json(f[b"json"]) for _, f in dash.redis.xrange(KEYS.call_updates)
    ]
    assert [u.fields() for u in updates] == [claim, {"queue": "loans"}]
    assert updates[0].requested_by == "key:m-analyst" and updates[0].call_id == "call-1"
    assert dash.client.patch("/api/v1/calls/nope", json=claim, headers=h).status_code == 404
    assert dash.client.patch("/api/v1/calls/call-1", json={}, headers=h).status_code == 422
    assert dash.client.patch("/api/v1/calls/call-1", json={"x": 1}, headers=h).status_code == 422
    viewer = dash.key_headers("viewer")
    assert dash.client.patch("/api/v1/calls/call-1", json=claim, headers=viewer).status_code == 403
    assert audit_actions(dash)[:2] == ["call.update", "call.update"]
