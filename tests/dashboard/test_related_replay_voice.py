"""Related calls by replayed audio and by voice. Replay: the bridges' real replay state
(``RedisReplayState``) records a matched pair of calls, by call id or a recording's
correlation id; the call page and API link both calls, either way. Voice: the calls'
kept speaker embeddings (sealed evidence, as the bridge's recorder writes them) are
compared by cosine; only the same tenant and model, only at or above the threshold,
and nothing for a call that kept no embedding."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta

import redis
from conftest import Dash
from dash_factory import KEYS, T0, start_call

from detectors.alert_schema import CallEvent
from detectors.bus.evidence import (
    EvidenceKind,
    EvidenceMeta,
    EvidenceSettings,
    load_evidence_vault,
)
from detectors.bus.evidence_store import EvidenceWriter
from detectors.replay.shared_state import RedisReplayState

DIM = 8
MODEL = "speaker-resemblyzer-1.0.0+w300"


def _ani(n: int) -> str:
    return f"+4420712345{n:02d}"


def _recording(r: redis.Redis, call_id: str, correlation_id: str) -> None:
    """A SIPREC recording of a call: its events carry the call's correlation id."""
    event = CallEvent(call_id=call_id, event="started", at=T0, correlation_id=correlation_id)
    r.xadd(KEYS.events, {"kind": "call_event", "json": event.model_dump_json()})
    r.hset(KEYS.call(call_id), mapping={"state": "started", "json": event.model_dump_json()})


def _related(dash: Dash, call_id: str) -> list[tuple[str, str, str]]:
    got = dash.client.get(f"/api/v1/calls/{call_id}/related")
    assert got.status_code == 200, got.text
    return sorted((r["call_id"], r["link"], r["why"]) for r in got.json())


def test_same_replayed_audio_links_both_calls(dash: Dash) -> None:
    _recording(dash.redis, "rec-1", "corr-1")
    start_call(dash.redis, "call-2", ani=_ani(2))
    start_call(dash.redis, "call-3", ani=_ani(3))  # no replay match
    dash.redis.hset(KEYS.call("call-old"), "state", "ended")  # events trimmed, state kept
    state = RedisReplayState(dash.redis, KEYS, "node-t")
    state.relate("call-2", "corr-1")  # call-2 replays audio the recording heard first
    state.relate("call-2", "corr-1")  # the same pair again: written once
    state.relate("call-old", "call-2")
    state.relate("call-gone", "call-2")  # neither in the events nor in call state
    state.refresh()
    assert state.stats.related == 3 and state.stats.redis_errors == 0
    assert dash.redis.ttl(KEYS.replay_related("corr-1")) > 0  # expires with call data
    dash.login("viewer")
    same = "same replayed audio"
    assert _related(dash, "call-2") == [("call-old", "replay", same), ("rec-1", "replay", same)]
    assert _related(dash, "rec-1") == [("call-2", "replay", same)]  # via its correlation id
    assert _related(dash, "call-3") == []
    page = dash.client.get("/calls/call-2").text
    assert 'href="/calls/rec-1"' in page and same in page


def _keep_embedding(dash: Dash, call_id: str, vec: list[float], tenant: str = "bank") -> None:
    """As the bridge's evidence recorder keeps the call embedding (sealed)."""
    vault = load_evidence_vault(EvidenceSettings(), dash.bus.state_dir)  # the app's key
    now = datetime.now(UTC)
    meta = EvidenceMeta(
        kind=EvidenceKind.EMBEDDING,
        evidence_id="embedding",
        tenant=tenant,
        call_id=call_id,
        node_id="node-t",
        created_at=now,
        expires_at=now + timedelta(days=7),
        model=MODEL,
        dim=DIM,
    )
    plain = struct.pack(f"<{DIM}f", *vec)
    EvidenceWriter(dash.redis, KEYS, 3600).write(meta, vault.seal(meta, plain))


def _unit(raw: list[float]) -> list[float]:
    norm = sum(v * v for v in raw) ** 0.5
    return [v / norm for v in raw]


def test_same_voice_by_kept_embeddings(dash: Dash) -> None:
    voice = _unit([1.0, 0.5, -0.3, 0.2, 0.0, 0.7, -0.1, 0.4])
    near = _unit([v + 0.05 * (-1) ** i for i, v in enumerate(voice)])
    other = _unit([0.1, -0.8, 0.3, 0.6, -0.5, 0.0, 0.9, -0.2])
    for n, call in enumerate(("v-1", "v-2", "v-3", "v-4", "v-5"), start=10):
        start_call(dash.redis, call, at=T0 + timedelta(minutes=n), ani=_ani(n))
    _keep_embedding(dash, "v-1", voice)
    _keep_embedding(dash, "v-2", near)  # the same speaker
    _keep_embedding(dash, "v-3", other)  # another speaker
    _keep_embedding(dash, "v-4", near, tenant="other-bank")  # never across tenants
    # v-5 kept no embedding
    dash.login("viewer")
    (link,) = _related(dash, "v-1")
    assert link[:2] == ("v-2", "voiceprint") and link[2].startswith("same voice (cosine 0.9")
    assert MODEL in link[2]
    assert [c for c, _, _ in _related(dash, "v-2")] == ["v-1"]
    assert _related(dash, "v-3") == []
    assert _related(dash, "v-5") == []
    assert "same voice (cosine" in dash.client.get("/calls/v-1").text
