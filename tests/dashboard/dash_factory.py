"""Alerts, scores and call state written into Redis the way the bridge writes them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import redis

from detectors.alert_schema import (
    Alert,
    Band,
    CallerIdentityInfo,
    CallEvent,
    Dimension,
    Reason,
    ScoreUpdate,
    alert_id_for,
)
from detectors.bus.codec import encode
from detectors.bus.keys import Keys
from detectors.bus.numbers import NumberVault

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
KEYS = Keys("cs-test:")
NUMBERS_KEY = "5a" * 32  # the tests' deployment numbers key (BusSettings.numbers_key)
VAULT = NumberVault(bytes.fromhex(NUMBERS_KEY))
WEBHOOK_KEY = "dGVzdHMtb25seS13ZWJob29rLWtleS0zMi1ieXRlcyE="  # Fernet: 32 bytes, base64
ANI, DNIS = "+442071234567", "+14155550123"


def make_alert(
    call_id: str = "call-1",
    dimension: Dimension = Dimension.SYNTHETIC_VOICE,
    band: Band = Band.HIGH,
    score: float = 0.93,
    revision: int = 1,
    tenant: str = "default",
) -> Alert:
    return Alert(
        alert_id=alert_id_for(call_id, dimension, 0),
        revision=revision,
        call_id=call_id,
        external_ids={"twilio_from": ANI, "asterisk_linkedid": "1764504000.42"},
        node_id="node-t",
        dimension=dimension,
        band=band,
        score=score,
        threshold=0.7,
        episode=0,
        reasons=(
            Reason(dimension=dimension, start_s=2.0, end_s=6.0, score=score, detail=f"from {ANI}"),
        ),
        created_at=T0,
        updated_at=T0 + timedelta(seconds=revision),
        policy_version="p1",
        model_versions={"aasist": "1.0"},
        provider="CPUExecutionProvider",
        tenant=tenant,
    )


def add_alert(r: redis.Redis, alert: Alert) -> str:
    entry_id = r.xadd(KEYS.alerts, encode(alert))  # type: ignore[arg-type]
    return entry_id.decode()


def start_call(
    r: redis.Redis,
    call_id: str = "call-1",
    at: datetime = T0,
    ani: str = ANI,
    identity: CallerIdentityInfo | None = None,
    tenant: str = "default",
) -> None:
    numbers = VAULT.seal(call_id, ani, DNIS)  # as the bridge seals them
    event = CallEvent(
        call_id=call_id,
        event="started",
        at=at,
        external_ids={"twilio_from": ani, "asterisk_linkedid": "1764504000.42"},
        numbers=numbers,
        identity=identity,
        tenant=tenant,
    )
    payload = event.model_dump_json()
    r.xadd(KEYS.events, {"kind": "call_event", "json": payload})
    fields = {"state": "started", "at": at.isoformat(), "json": payload}
    fields |= {"numbers": numbers.sealed, "ani_hash": numbers.ani_hash}
    r.hset(KEYS.call(call_id), mapping=fields)  # type: ignore[arg-type]
    r.zadd(KEYS.live_calls, {call_id: at.timestamp()})


def add_scores(r: redis.Redis, call_id: str = "call-1", n: int = 6) -> None:
    for i in range(n):
        for dim, base in ((Dimension.SYNTHETIC_VOICE, 0.2), (Dimension.REPLAY, 0.1)):
            score = ScoreUpdate(
                call_id=call_id,
                leg_id=f"{call_id}/ext",
                dimension=dim,
                window_start_s=float(i),
                window_end_s=float(i) + 4.0,
                score=min(1.0, base + 0.12 * i),
            )
            r.xadd(KEYS.scores, {"kind": "score", "json": score.model_dump_json()})
    abstained = {
        "call_id": call_id,
        "leg_id": f"{call_id}/ext",
        "dimension": "caller_id",
        "window_start_s": 0.0,
        "window_end_s": 4.0,
        "score": None,
        "abstained": "too_little_speech",
    }
    r.xadd(KEYS.scores, {"kind": "score", "json": json.dumps(abstained)})
