"""``DELETE /api/v1/subjects/{ref}`` on the real app and a real redis-server, with the
data written the way each component writes it: enrolments and a watchlist entry through
the dashboard's API, mid-call claims through ``PATCH /calls``, fingerprint records as
the bridges' replay state files them in ``fp:log``, sealed evidence (a clip and the call
embedding) through the bridge's evidence writer, a legal hold through the API. Then
Redis is scanned for anything of the subject: nothing outside the audit log, and the
audit log holds no voiceprint."""

from __future__ import annotations

import base64
import json
import os
import struct
from datetime import UTC, datetime, timedelta

import redis
from conftest import Dash
from dash_factory import KEYS, T0, start_call
from test_watchlist_api import DIM, ENTRY

from detectors.alert_schema import CallEvent
from detectors.bus.allowlist import LogRecord
from detectors.bus.biometrics import encode_embedding
from detectors.bus.evidence import EvidenceKind, EvidenceMeta, EvidenceVault
from detectors.bus.evidence_store import EvidenceWriter

SUBJECT, CONSENT, CASE = "acct-9", "IVR-consent-9931", "FR-2026-77"


def consent(subject: str) -> str:
    return CONSENT if subject == SUBJECT else "IVR-consent-other"


def vec(seed: int) -> list[float]:
    raw = [float((seed * 7 + i * 13) % 11) - 5.0 for i in range(DIM)]
    norm = sum(v * v for v in raw) ** 0.5
    return [v / norm for v in raw]


def voiceprint(seed: int) -> dict[str, object]:
    return {
        "model": "speaker-resemblyzer-1.0.0+w300",
        "dim": DIM,
        "embedding": encode_embedding(struct.pack(f"<{DIM}f", *vec(seed))),
        "net_speech_s": 9.5,
        "source": "wav:subject.wav",
    }


def fingerprint(seed: int) -> str:
    bits = base64.urlsafe_b64encode(bytes([seed % 256]) * 16).decode().rstrip("=")
    valid = base64.urlsafe_b64encode(b"\xff").decode().rstrip("=")
    return f"4.{bits}.{valid}"


def file_fingerprint(r: redis.Redis, owner: str, seed: int) -> None:
    """As ``detectors.replay.shared_state`` files an external leg's fingerprints."""
    rec = LogRecord(
        clip_id=f"clip-{owner}-{seed}",
        node_id="node-t",
        owner=owner,
        ani_hash="ab" * 16,
        seen_at=1.0,
        start_s=float(seed),
        fingerprint=fingerprint(seed),
    )
    r.xadd(KEYS.fingerprint_log, {"r": rec.model_dump_json()})


def keep_evidence(r: redis.Redis, call_id: str, embedding: bytes) -> None:
    """As the bridge's evidence recorder keeps a clip and the call embedding."""
    vault = EvidenceVault(os.urandom(32))
    writer = EvidenceWriter(r, KEYS, 3600)
    now = datetime.now(UTC)
    for kind, evidence_id, plain in (
        (EvidenceKind.CLIP, f"clip:al_{call_id}", b"\x01\x02" * 400),
        (EvidenceKind.EMBEDDING, "embedding", embedding),
    ):
        meta = EvidenceMeta(
            kind=kind,
            evidence_id=evidence_id,
            tenant="bank",
            call_id=call_id,
            node_id="node-t",
            created_at=now,
            expires_at=now + timedelta(days=7),
        )
        writer.write(meta, vault.seal(meta, plain))


def live_call(r: redis.Redis, call_id: str, correlation_id: str) -> None:
    event = CallEvent(call_id=call_id, event="started", at=T0, correlation_id=correlation_id)
    r.hset(KEYS.call(call_id), mapping={"state": "started", "json": event.model_dump_json()})
    r.zadd(KEYS.live_calls, {call_id: T0.timestamp()})


def dump(r: redis.Redis) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for key in r.scan_iter(count=1000):
        kind = r.type(key).decode()
        if kind == "string":
            parts = [r.get(key) or b""]
        elif kind == "hash":
            parts = [b for kv in r.hgetall(key).items() for b in kv]  # type: ignore[union-attr]
        elif kind == "stream":
            parts = [b for _, f in r.xrange(key) for kv in f.items() for b in kv]  # type: ignore[union-attr]
        elif kind == "zset":
            parts = list(r.zrange(key, 0, -1))  # type: ignore[arg-type]
        else:
            parts = list(r.lrange(key, 0, -1)) if kind == "list" else [b"?"]  # type: ignore[arg-type]
        out[key.decode()] = key + b"\x00" + b"\x00".join(parts)  # type: ignore[operator]
    return out


def test_erasure_leaves_nothing_of_the_subject_but_the_audit_record(dash: Dash) -> None:
    r = dash.redis
    analyst = dash.key_headers("analyst")
    # enrolments of the subject in two tenants, and someone else's
    for tenant, subject, seed in (
        ("bank", SUBJECT, 1),
        ("cards", SUBJECT, 2),
        ("bank", "acct-1", 3),
    ):
        body = {"tenant": tenant, "consent_ref": consent(subject), "voiceprint": voiceprint(seed)}
        assert (
            dash.client.put(f"/api/v1/enrolments/{subject}", json=body, headers=analyst).status_code
            == 200
        )
    # the subject claimed on two live calls (one with a correlation id), another on a third
    start_call(r, "c-1")
    live_call(r, "c-2", "corr-2")
    start_call(r, "c-9")
    for call_id, account in (("c-1", SUBJECT), ("c-2", SUBJECT), ("c-9", "acct-1")):
        claim = {"claimed_account": account, "consent_ref": consent(account)}
        assert (
            dash.client.patch(f"/api/v1/calls/{call_id}", json=claim, headers=analyst).status_code
            == 202
        )
    # their calls' fingerprints (c-2's filed under its correlation id) and evidence
    for owner, seed in (("c-1", 1), ("c-1", 2), ("corr-2", 3), ("c-9", 4)):
        file_fingerprint(r, owner, seed)
    embedding = struct.pack(f"<{DIM}f", *vec(5))
    keep_evidence(r, "c-1", embedding)
    keep_evidence(r, "c-2", embedding)
    keep_evidence(r, "c-9", struct.pack(f"<{DIM}f", *vec(6)))
    admin = dash.key_headers("admin")
    hold = dash.client.put(
        "/api/v1/evidence/calls/c-2/hold", json={"reason": "court case 12"}, headers=admin
    )
    assert hold.status_code == 200, hold.text
    # a fraud case whose entry names the subject's case reference
    listed = dash.client.post(
        "/api/v1/watchlist",
        json={**ENTRY, "case_ref": CASE, "voiceprint": voiceprint(7)},
        headers=analyst,
    )
    assert listed.status_code == 201
    version = int(r.get(KEYS.watchlist_version("bank")) or 0)

    # only admins, only with a reason
    url = f"/api/v1/subjects/{SUBJECT}"
    assert (
        dash.client.request("DELETE", url, json={"reason": "x" * 5}, headers=analyst).status_code
        == 403
    )
    assert dash.client.request("DELETE", url, headers=admin).status_code == 422
    done = dash.client.request(
        "DELETE", url, json={"reason": "GDPR art. 17 request 41"}, headers=admin
    )
    assert done.status_code == 200, done.text
    counts = done.json()
    assert counts["enrolments"] == 2 and counts["call_updates"] == 2
    assert counts["fingerprints"] == 2  # c-1's; c-2 is on legal hold
    assert counts["evidence_records"] == 2 and counts["held_calls"] == 1
    assert done.json()["held_call_ids"] == ["c-2"] and counts["linked_calls"] == 2
    case = dash.client.request(
        "DELETE", f"/api/v1/subjects/{CASE}", json={"reason": "case closed"}, headers=admin
    )
    assert case.status_code == 200 and case.json()["watchlist_entries"] == 1
    assert int(r.get(KEYS.watchlist_version("bank")) or 0) == version + 1  # bridges reload

    # what is left: the other subject's data, the held call's evidence and fingerprints
    assert r.exists(KEYS.enrolment("bank", "acct-1"))
    assert r.xlen(KEYS.call_updates) == 1 and r.xlen(KEYS.fingerprint_log) == 2
    assert r.hlen(KEYS.evidence_index("c-9")) == 2 and r.hlen(KEYS.evidence_index("c-2")) == 2
    assert not r.exists(KEYS.evidence_index("c-1"))
    # nothing of the subject anywhere but the held call and the audit log
    subject_vps = [voiceprint(s)["embedding"] for s in (1, 2, 7)]
    audit_key = KEYS.prefix + "dash:audit"
    held = (KEYS.evidence_index("c-2"), KEYS.evidence("c-2", ""))
    for key, blob in dump(r).items():
        for vp in subject_vps:
            assert str(vp)[:24].encode() not in blob, key
        assert embedding not in blob, key  # sealed, never in clear, even when held
        if key == audit_key or key.startswith(held):
            continue
        for text in (SUBJECT, CONSENT, CASE):
            assert text.encode() not in blob, (key, text)
    # the erasure's own audit records: who, why, counts, a hash of the reference
    entries = dash.client.portal.call(dash.ctx.audit.recent)  # type: ignore[union-attr]
    erased = [e for e in entries if e["action"] == "subject.erase"]
    assert len(erased) == 2 and erased[1]["actor"] == "key:m-admin"
    assert erased[1]["target"].startswith("sha256:") and SUBJECT not in json.dumps(erased)
    assert erased[1]["detail"]["tenants"] == ["bank", "cards"]
    assert erased[1]["detail"]["reason"] == "GDPR art. 17 request 41"
