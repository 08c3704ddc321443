"""``biometrics_mode`` per tenant and the two-person rule on the bridge side, with real
parts: real speech as µ-law RTP through the native jitter buffer into the detector
runtime, a speaker-embedding ONNX model (the tiny fixture encoder), the watchlist and an
enrolment in a real redis-server read by the bridge's cache, a mid-call claim through the
updates stream, and every score and alert published to that Redis by the real publisher.

- ``off``: the speaker model never runs on the call (its batches are counted) and its
  windows abstain ``biometrics_off``;
- ``watchlist_only``: the watchlist is searched, no voice_mismatch is ever scored and no
  enrolment is fetched, even for a call that claims an enrolled account;
- ``full``: both;
- nothing embedding-like reaches Redis for callers who match nothing;
- a watchlist entry pending a second analyst's approval is not used until approved.
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from math import gcd
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import redis
import redis.asyncio
from conftest import Built
from scipy.signal import resample_poly
from test_runtime_admission import _drive

from detectors.alert_schema import Abstention, Dimension, LegRole
from detectors.bus.biometrics import (
    BiometricsMode,
    CallUpdate,
    Enrolment,
    WatchlistEntry,
    encode_embedding,
    new_id,
)
from detectors.bus.biometrics_store import BiometricsStore
from detectors.bus.call_updates import CallUpdates
from detectors.bus.keys import Keys
from detectors.bus.publisher import AlertPublisher
from detectors.bus.redis_server import RedisServer, find_redis_server, free_port
from detectors.bus.settings import BusSettings
from detectors.contract import BatchOutput, FloatArray, WindowResult
from detectors.onnx_detector import OnnxDetector
from detectors.runtime import DetectorRuntime, RuntimeConfig
from detectors.scheduler import LaneConfig
from detectors.speaker.biometrics_stage import BiometricsConfig, SpeakerBiometrics
from detectors.speaker.call_updates import BiometricsClaims
from detectors.speaker.scoring import Cohort, aggregate, l2_normalise
from detectors.speaker.shared_state import EnrolledVoice, RedisSpeakerState, wait_for_version

KEYS = Keys("cs-bm:")
MODES = {"t-off": BiometricsMode.OFF, "t-wl": BiometricsMode.WATCHLIST_ONLY}
SECONDS = 6.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    find_redis_server()
    s = RedisServer(data_dir=tmp_path_factory.mktemp("redis"), port=free_port())
    s.start()
    yield s
    s.stop()


@pytest.fixture
def client(server: RedisServer) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(server.url, socket_timeout=5)
    c.flushall()
    yield c
    c.close()


class Counting:
    """The speaker detector, counting the windows it is given and keeping every
    embedding it computed (to search Redis for them afterwards)."""

    def __init__(self, inner: OnnxDetector) -> None:
        self.inner, self.rows = inner, 0
        self.manifest = inner.manifest
        self.embeddings: list[FloatArray] = []

    @property
    def spec(self) -> Any:
        return self.inner.spec

    @property
    def provider(self) -> str:
        return self.inner.provider

    def run_batch(self, audio: FloatArray) -> BatchOutput:
        self.rows += audio.shape[0]
        out = self.inner.run_batch(audio)
        assert out.embeddings is not None
        self.embeddings.extend(np.array(e, np.float32) for e in out.embeddings)
        return out

    def warm_up(self, batch_sizes: tuple[int, ...]) -> None:
        self.inner.warm_up(batch_sizes)


class CountingState(RedisSpeakerState):
    """The bridge's real cache, counting enrolment fetches."""

    fetched = 0

    def enrolment(self, tenant: str, subject: str) -> EnrolledVoice | None:
        self.fetched += 1
        return super().enrolment(tenant, subject)


def speech_files(shared_dir: Path, pattern: str, n: int) -> list[Path]:
    files = sorted((shared_dir / "data/speech").glob(pattern))[:n]
    assert len(files) == n, pattern
    return files


def pcm_8k(path: Path) -> npt.NDArray[np.int16]:
    import soundfile

    x, rate = soundfile.read(str(path), dtype="float32", always_2d=False)
    if rate != 8000:
        g = gcd(rate, 8000)
        x = resample_poly(x, 8000 // g, rate // g)
    return np.clip(np.round(np.asarray(x) * 32768), -32768, 32767).astype(np.int16)


def speech(paths: list[Path], seconds: float) -> npt.NDArray[np.int16]:
    pcm = np.concatenate([pcm_8k(p) for p in paths])
    n = int(seconds * 8000)
    assert pcm.size >= n
    return pcm[:n]


def embed(det: OnnxDetector, pcm8k: npt.NDArray[np.int16]) -> FloatArray:
    """Window embeddings of 8 kHz speech at the model's 16 kHz (offline)."""
    x = resample_poly(pcm8k.astype(np.float32) / 32768, 2, 1).astype(np.float32)
    w = det.spec.window
    rows = np.stack([x[i : i + w] for i in range(0, x.size - w + 1, w)])
    out = det.run_batch(rows)
    assert out.embeddings is not None
    return l2_normalise(np.asarray(out.embeddings, np.float32))


def voiceprint(model: str, vec: FloatArray) -> dict[str, Any]:
    v = l2_normalise(np.asarray(vec, np.float32))
    return {
        "model": model,
        "dim": int(v.size),
        "embedding": encode_embedding(v.astype("<f4").tobytes()),
        "net_speech_s": 5.0,
        "source": "wav:test",
    }


def entry(tenant: str, vp: dict[str, Any], status: str = "active") -> WatchlistEntry:
    now = datetime.now(UTC)
    return WatchlistEntry(
        entry_id=new_id("wl"),
        tenant=tenant,
        label="case",
        legal_basis="test",
        case_ref="CASE-1",
        expires_at=now + timedelta(days=1),
        added_by="alice",
        created_at=now,
        status=status,  # type: ignore[arg-type]
        **vp,
    )


def write(server: RedisServer, work: Callable[[BiometricsStore], Any]) -> Any:
    async def run() -> Any:
        c = redis.asyncio.Redis.from_url(server.url)
        try:
            return await work(BiometricsStore(c, KEYS))  # as the dashboard writes
        finally:
            await c.aclose()

    return asyncio.run(run())


def redis_dump(client: redis.Redis) -> dict[str, bytes]:
    """Every key's content, whatever its type, as bytes."""
    out: dict[str, bytes] = {}
    for key in client.scan_iter(count=1000):
        kind = client.type(key).decode()
        parts: list[bytes] = []
        if kind == "string":
            parts.append(client.get(key) or b"")  # type: ignore[arg-type]
        elif kind == "hash":
            for f, v in client.hgetall(key).items():  # type: ignore[union-attr]
                parts += [f, v]
        elif kind == "list":
            parts += client.lrange(key, 0, -1)  # type: ignore[operator]
        elif kind == "set":
            parts += list(client.smembers(key))  # type: ignore[arg-type]
        elif kind == "zset":
            parts += client.zrange(key, 0, -1)  # type: ignore[operator]
        elif kind == "stream":
            for _, fields in client.xrange(key):  # type: ignore[union-attr]
                for f, v in fields.items():
                    parts += [f, v]
        out[key.decode()] = b"\x00".join(parts)
    return out


BASE64_RUN = re.compile(rb"[A-Za-z0-9+/]{80,}={0,2}")
FLOAT_ARRAY = re.compile(rb"\[\s*-?\d+\.\d+(\s*,\s*-?\d+\.\d+){7,}")


def test_modes_per_tenant_and_no_embedding_in_redis(
    tiny_embedding: Built,
    client: redis.Redis,
    server: RedisServer,
    shared_dir: Path,
    tmp_path: Path,
) -> None:
    data, manifest = tiny_embedding
    det = OnnxDetector(manifest, data)
    files = speech_files(shared_dir, "asterisk_prompts/en/*.wav", 40)
    # the cohort: the model's embeddings of prompts not used as calls
    cohort_vecs = np.concatenate([embed(det, pcm_8k(p)) for p in files[20:40]])
    cohort = Cohort(cohort_vecs, top_k=50)
    calls = {
        "c-off": ("t-off", speech(files[0:4], SECONDS)),
        "c-wl": ("t-wl", speech(files[4:8], SECONDS)),
        "c-full": ("t-full", speech(files[8:12], SECONDS)),
    }
    other = aggregate(embed(det, speech(files[12:16], SECONDS)))  # nobody's voice here
    enrolled = aggregate(embed(det, speech(files[16:20], SECONDS)))
    for tenant in ("t-wl", "t-full"):
        write(server, lambda s, t=tenant: s.add_entry(entry(t, voiceprint(manifest.key, other))))
        write(
            server,
            lambda s, t=tenant: s.put_enrolment(
                Enrolment(
                    subject="acct-9",
                    tenant=t,
                    consent_ref="IVR-1",
                    added_by="alice",
                    created_at=datetime.now(UTC),
                    **voiceprint(manifest.key, enrolled),
                )
            ),
        )
    state = CountingState(client, KEYS, cohort, manifest.key, refresh_s=0.05)
    config = BiometricsConfig(
        min_net_speech_s=2.0, default_mode=BiometricsMode.FULL, modes=dict(MODES)
    )
    bio = SpeakerBiometrics(state, config, manifest.name)
    updates = CallUpdates(client, KEYS, [BiometricsClaims(bio)], block_ms=50)
    speaker = Counting(det)
    bus = BusSettings(redis_url=server.url, state_dir=tmp_path / "outbox", key_prefix=KEYS.prefix)
    publisher = AlertPublisher(redis.Redis.from_url(server.url, socket_timeout=5), bus)
    seen: list[WindowResult] = []
    rt = DetectorRuntime(
        [speaker],  # type: ignore[list-item]
        publisher,
        config=RuntimeConfig(lanes=LaneConfig(max_batch=4, max_wait_s=0.01, deadline_s=60)),
        on_result=seen.append,
        stage=bio,
    )
    publisher.start()
    rt.start()
    speaker.rows = 0  # the pre-warm's timing runs (noise), not windows of a call
    speaker.embeddings.clear()
    try:
        for call_id, (tenant, _) in calls.items():
            assert rt.open_call(call_id, tenant=tenant).analysed
        state.start()
        updates.start()
        assert wait_for_version(state, "t-wl", 1, 10.0)
        assert wait_for_version(state, "t-full", 1, 10.0)
        for call_id in calls:  # every call claims the enrolled account
            claim = CallUpdate(
                command_id=new_id("cu"),
                call_id=call_id,
                claimed_account="acct-9",
                requested_by="ivr",
                at=datetime.now(UTC),
            )
            write(server, lambda s, u=claim: s.submit_update(u))
        deadline = time.monotonic() + 10
        while updates.stats.applied < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert updates.stats.applied == 3
        # the off call alone first: the model must not see one window of it
        rt.add_leg("c-off", 1, "caller", LegRole.EXTERNAL)
        _drive(rt, {1: calls["c-off"][1]}, SECONDS)
        assert rt.scheduler.wait_idle(30)
        assert speaker.rows == 0
        off = [r for r in seen if r.key.call_id == "c-off"]
        assert len(off) >= int(SECONDS / 0.5) - 2
        # every window abstained: the speech ones for the mode, the others as before
        gated = [r for r in off if r.abstained is Abstention.BIOMETRICS_OFF]
        assert all(r.score is None for r in off) and len(gated) >= len(off) // 2
        assert bio.stats.windows_gated_off == len(gated)
        rt.add_leg("c-wl", 2, "caller", LegRole.EXTERNAL)
        rt.add_leg("c-full", 3, "caller", LegRole.EXTERNAL)
        _drive(rt, {2: calls["c-wl"][1], 3: calls["c-full"][1]}, SECONDS)
        assert rt.scheduler.wait_idle(30)
        for call_id in calls:
            rt.end_call(call_id)
        assert publisher.flush(10)
    finally:
        rt.close()
        updates.close()
        state.close()
        publisher.close()

    def of(call_id: str) -> list[WindowResult]:
        return [r for r in seen if r.key.call_id == call_id]

    assert speaker.rows > 0 and len(speaker.embeddings) == speaker.rows
    # the off call: still nothing but abstentions
    assert all(r.score is None and r.embedding is None for r in of("c-off"))
    # watchlist_only: searched, never verified, no enrolment fetched
    wl = of("c-wl")
    assert any(r.dimension is Dimension.KNOWN_FRAUDSTER and r.score is not None for r in wl)
    mismatch = [r for r in wl if r.dimension is Dimension.VOICE_MISMATCH]
    assert mismatch and all(r.abstained is Abstention.BIOMETRICS_OFF for r in mismatch)
    assert not any(r.detector == "enrolment" for r in wl)
    assert state.fetched == 1  # the full call's claim only
    # full: both
    full = of("c-full")
    assert any(r.dimension is Dimension.KNOWN_FRAUDSTER and r.score is not None for r in full)
    verified = [r for r in full if r.detector == "enrolment"]
    assert verified and all(
        r.dimension is Dimension.VOICE_MISMATCH and r.score is not None for r in verified
    )
    # the scores stream holds what fusion saw, voice_mismatch scored only for c-full
    dump = redis_dump(client)
    scores = dump[KEYS.scores]
    assert b"biometrics_off" in scores and b'"voice_mismatch"' in scores
    # no embedding of any caller, in any form, anywhere in Redis
    for emb in speaker.embeddings:
        raw = emb.astype("<f4").tobytes()
        b64 = base64.b64encode(raw)
        for key, blob in dump.items():
            assert raw not in blob and b64[:24] not in blob and raw.hex().encode() not in blob, key
    stored = (KEYS.prefix + "watchlist:", KEYS.prefix + "enrol:")  # voiceprints, on purpose
    for key, blob in dump.items():
        if key.startswith(stored):
            continue
        assert not BASE64_RUN.search(blob), key
        assert not FLOAT_ARRAY.search(blob), key
        assert b'"embedding"' not in blob, key  # no field of that name


def test_pending_entries_are_not_used_until_approved(
    client: redis.Redis, server: RedisServer
) -> None:
    rng = np.random.default_rng(7)
    cohort = Cohort(l2_normalise(rng.standard_normal((60, 16)).astype(np.float32)), top_k=20)
    model = "speaker-test@1"
    vecs = l2_normalise(rng.standard_normal((2, 16)).astype(np.float32))
    active = entry("bank", voiceprint(model, vecs[0]))
    pending = entry("bank", voiceprint(model, vecs[1]), status="pending")
    write(server, lambda s: s.add_entry(active))
    write(server, lambda s: s.add_entry(pending))
    state = RedisSpeakerState(client, KEYS, cohort, model)
    index = state.refresh("bank")
    assert index.ids == (active.entry_id,) and state.stats.skipped_pending == 1
    probe = vecs[1]  # the pending entry's own voice calls
    stats = tuple(float(x[0]) for x in cohort.stats(probe[None, :]))
    found = index.search(probe, stats)  # type: ignore[arg-type]
    assert found is not None and found.entry_id == active.entry_id
    approved = write(
        server, lambda s: s.approve_entry("bank", pending.entry_id, "bob", datetime.now(UTC))
    )
    assert approved.active and approved.approved_by == "bob"
    # the author of a pending entry cannot approve it, even through the store
    own = entry("bank", voiceprint(model, vecs[0]), status="pending")
    write(server, lambda s: s.add_entry(own))
    with pytest.raises(ValueError, match="cannot approve"):
        write(server, lambda s: s.approve_entry("bank", own.entry_id, "alice", datetime.now(UTC)))
    index = state.refresh("bank")
    assert pending.entry_id in index.ids
    found = index.search(probe, stats)  # type: ignore[arg-type]
    assert found is not None and found.entry_id == pending.entry_id
    assert own.entry_id not in index.ids


def test_not_applicable_windows_do_not_count_against_coverage() -> None:
    from detectors.alert_schema import CallCoverage, DimensionCoverage
    from detectors.bus.coverage_objective import CoverageRule, applies

    def cov(**abst: int) -> CallCoverage:
        d = DimensionCoverage(windows=sum(abst.values()), abstentions=abst)  # type: ignore[arg-type]
        return CallCoverage(dimensions={Dimension.VOICE_MISMATCH: d})

    vm = Dimension.VOICE_MISMATCH
    assert not applies(cov(biometrics_off=9), vm)
    assert not applies(cov(no_enrolment=4, biometrics_off=1), vm)
    # any other abstention is a real loss of coverage, as is no window at all
    assert applies(cov(no_enrolment=4, too_much_concealed=1), vm)
    assert applies(cov(), vm) and applies(None, vm)
    assert not CoverageRule().covered(cov(no_enrolment=4, too_much_concealed=1), vm)
