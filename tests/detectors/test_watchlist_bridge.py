"""Known fraudster and voice mismatch with real parts: the speaker model derived by the
project's command, its S-norm cohort built from the shared corpus, real speech as µ-law
RTP through the native jitter buffer into the detector runtime, watchlist entries and an
enrolment in a real redis-server read by the bridge's cache, a mid-call claim through
the updates stream, fusion to a publisher. Also: the speaker model never sees the
internal leg, a handoff to a second genuine speaker stays at or below elevated, and
``callshield eval --watchlist-sizes`` runs end to end on a small pool.

Skipped only where the convert extra (torch, resemblyzer) is missing (CI installs it)."""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from math import gcd
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import redis
from test_fusion_policy import Publisher
from test_runtime_admission import _drive

from detectors.alert_schema import Band, Dimension, LegRole
from detectors.bus.biometrics import BiometricsMode, CallUpdate, Enrolment, WatchlistEntry, new_id
from detectors.bus.biometrics_store import BiometricsStore
from detectors.bus.call_updates import CallUpdates
from detectors.bus.keys import Keys
from detectors.bus.redis_server import RedisServer, find_redis_server, free_port
from detectors.contract import BatchOutput, FloatArray, WindowResult
from detectors.onnx_detector import OnnxDetector
from detectors.runtime import DetectorRuntime, RuntimeConfig
from detectors.scheduler import LaneConfig
from detectors.speaker.biometrics_stage import BiometricsConfig, SpeakerBiometrics
from detectors.speaker.call_updates import BiometricsClaims
from detectors.speaker.cohort import cohort_path, in_cohort, load_cohort
from detectors.speaker.shared_state import RedisSpeakerState, wait_for_version
from detectors.speaker.watchlist_cli import voiceprint

HAVE_CONVERT = all(importlib.util.find_spec(m) for m in ("torch", "resemblyzer"))
pytestmark = pytest.mark.skipif(not HAVE_CONVERT, reason="convert extra not installed")
KEYS = Keys("cs-wl:")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, shared_dir: Path) -> Path:
    """The speaker model (``callshield models derive-speaker``) and its cohort
    (``callshield models build-cohort``), derived into a temporary models directory."""
    from detectors.model_store import ModelStore
    from detectors.speaker.cohort import run_cli as build_cohort
    from detectors.speaker.deriver import derive_speaker

    out = tmp_path_factory.mktemp("models")
    speech = sorted((shared_dir / "data/speech/speechocean762/WAVE").glob("*/*.WAV"))[:2]
    derive_speaker(out, reference_audio=speech)
    assert build_cohort(ModelStore(out), shared_dir / "data/speech", "speechocean762", 0.25) == 0
    return out


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


def speech(shared_dir: Path, pattern: str, n: int, skip: int = 0) -> list[Path]:
    files = sorted((shared_dir / "data/speech").glob(pattern))[skip : skip + n]
    assert len(files) == n, pattern
    return files


def pcm_8k(paths: list[Path]) -> npt.NDArray[np.int16]:
    from scipy.signal import resample_poly

    from detectors.speaker.evaluate import load_audio

    out = []
    for p in paths:
        loaded = load_audio(p)
        assert loaded is not None
        x, rate = loaded
        if rate != 8000:
            g = gcd(rate, 8000)
            x = resample_poly(x, 8000 // g, rate // g)
        out.append(np.clip(np.round(np.asarray(x) * 32768), -32768, 32767).astype(np.int16))
    return np.concatenate(out)


class Counting:
    """The real speaker detector, counting the windows it is given."""

    def __init__(self, inner: OnnxDetector) -> None:
        self.inner, self.rows = inner, 0
        self.manifest = inner.manifest

    @property
    def spec(self) -> Any:
        return self.inner.spec

    @property
    def provider(self) -> str:
        return self.inner.provider

    def run_batch(self, audio: FloatArray) -> BatchOutput:
        self.rows += audio.shape[0]
        return self.inner.run_batch(audio)

    def warm_up(self, batch_sizes: tuple[int, ...]) -> None:
        self.inner.warm_up(batch_sizes)


def entry(vp: dict[str, Any], label: str) -> WatchlistEntry:
    return WatchlistEntry(
        entry_id=new_id("wl"),
        tenant="default",
        label=label,
        legal_basis="test",
        case_ref="T-1",
        expires_at=datetime.now(UTC) + timedelta(days=1),
        added_by="test",
        created_at=datetime.now(UTC),
        **vp,
    )


def filler(models: Path, shared_dir: Path, n: int) -> list[dict[str, Any]]:
    """Voiceprints of ``n`` speechocean762 speakers outside the cohort."""
    out = []
    for spk in sorted((shared_dir / "data/speech/speechocean762/WAVE").iterdir()):
        sid = "so762_" + spk.name.removeprefix("SPEAKER")
        if in_cohort(sid):
            continue
        out.append(voiceprint(models, sorted(spk.glob("*.WAV")), 1.0))
        if len(out) == n:
            break
    return out


def test_fraudster_matched_claim_scored_internal_leg_never_embedded(
    models: Path, client: redis.Redis, server: RedisServer, shared_dir: Path
) -> None:
    from detectors.model_store import ModelStore

    inst = ModelStore(models).get("speaker-resemblyzer")
    cohort, _, _ = load_cohort(cohort_path(models, inst.manifest))
    fraud_enrol = speech(shared_dir, "ljspeech/wavs/*.flac", 3)
    fraud_call = pcm_8k(speech(shared_dir, "ljspeech/wavs/*.flac", 3, skip=3))
    customer = speech(shared_dir, "asterisk_prompts/en/*.wav", 4)
    customer_call = pcm_8k(speech(shared_dir, "asterisk_prompts/en/*.wav", 4, skip=4))
    agent = pcm_8k(speech(shared_dir, "asterisk_prompts/ru/*.wav", 6))

    listed = entry(voiceprint(models, fraud_enrol, 3.0), "lj case")
    fillers = [entry(vp, f"filler {i}") for i, vp in enumerate(filler(models, shared_dir, 12))]
    enrolment = Enrolment(
        subject="acct-7",
        tenant="default",
        consent_ref="IVR-consent-1",
        added_by="test",
        created_at=datetime.now(UTC),
        **voiceprint(models, customer, 3.0),
    )

    async def write() -> None:
        c = redis.asyncio.Redis.from_url(server.url)
        store = BiometricsStore(c, KEYS)  # as the dashboard writes them
        for e in [listed, *fillers]:
            await store.add_entry(e)
        await store.put_enrolment(enrolment)
        await c.aclose()

    asyncio.run(write())
    state = RedisSpeakerState(client, KEYS, cohort, inst.manifest.key, refresh_s=0.05)
    bio = SpeakerBiometrics(
        state, BiometricsConfig(min_net_speech_s=4.0, default_mode=BiometricsMode.FULL)
    )
    updates = CallUpdates(client, KEYS, [BiometricsClaims(bio)], block_ms=50)
    speaker = Counting(OnnxDetector(inst.manifest, inst.model_path))
    pub = Publisher()
    seen: list[WindowResult] = []
    rt = DetectorRuntime(
        [speaker],  # type: ignore[list-item]
        pub,
        config=RuntimeConfig(lanes=LaneConfig(max_batch=4, max_wait_s=0.01, deadline_s=60)),
        on_result=seen.append,
        stage=bio,
    )
    rt.start()
    speaker.rows = 0  # the pre-warm's timing runs (noise), not windows of a call
    try:
        for call in ("fraud", "customer"):
            assert rt.open_call(call).analysed
        state.start()
        updates.start()
        assert wait_for_version(state, "default", 13, 10.0)
        claim = CallUpdate(
            command_id=new_id("cu"),
            call_id="customer",
            claimed_account="acct-7",
            requested_by="ivr",
            at=T0,
        )

        async def patch() -> None:
            c = redis.asyncio.Redis.from_url(server.url)
            await BiometricsStore(c, KEYS).submit_update(claim)
            await c.aclose()

        asyncio.run(patch())
        deadline = time.monotonic() + 10
        while bio._calls["customer"].enrolled is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert bio._calls["customer"].claimed == "acct-7"
        rt.add_leg("fraud", 1, "caller", LegRole.EXTERNAL)
        rt.add_leg("customer", 2, "caller", LegRole.EXTERNAL)
        rt.add_leg("customer", 3, "agent", LegRole.INTERNAL)
        n = min(fraud_call.size, customer_call.size, agent.size)
        seconds = n / 8000
        _drive(rt, {1: fraud_call[:n], 2: customer_call[:n], 3: agent[:n]}, seconds)
        windows = 2 * int((seconds - 3.0) / 1.5 + 1)
        deadline = time.monotonic() + 60
        while speaker.rows < windows - 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        rt.end_call("fraud")
        rt.end_call("customer")
    finally:
        rt.close()
        updates.close()
        state.close()
    # the agent leg never reached the speaker model, nor the biometrics
    assert {r.key.leg_id for r in seen} == {"caller"}
    assert speaker.rows == len(
        [r for r in seen if r.detector in ("speaker-resemblyzer", "enrolment")]
    )
    assert bio.stats.embeddings_refused_leg == 0 and bio.stats.embeddings_used > 0
    kf = [a for a in pub.alerts if a.dimension is Dimension.KNOWN_FRAUDSTER]
    assert {a.call_id for a in kf} == {"fraud"}, [(a.call_id, a.reasons) for a in kf]
    assert any(listed.entry_id in r.detail for a in kf for r in a.reasons)
    body = json.dumps([a.model_dump(mode="json") for a in pub.alerts])
    assert listed.embedding[:24] not in body and "embedding" not in body
    vm = [r for r in seen if r.detector == "enrolment"]
    assert vm and all(r.key.call_id == "customer" for r in vm)
    assert all(r.score is not None and r.score < 0.9 for r in vm)  # the account's owner
    assert "claimed account's voiceprint" in vm[-1].reasons[0]
    assert all("acct-7" not in r for v in vm for r in v.reasons)  # never the reference
    assert updates.stats.applied == 1 and updates.stats.malformed == 0


def test_handoff_to_a_second_genuine_speaker_stays_at_most_elevated(
    models: Path, shared_dir: Path
) -> None:
    """ "Let me put my wife on": the account owner (enrolled) talks, then another genuine
    speaker on the same phone; a watchlist of other voices; fusion's default policy."""
    from detectors.eval.watchlist import windows
    from detectors.fusion import Fusion, Policy
    from detectors.model_store import ModelStore
    from detectors.speaker.cohort import Embedder
    from detectors.speaker.deriver import to_16k
    from detectors.speaker.evaluate import load_audio
    from detectors.speaker.shared_state import StaticSpeakerState
    from detectors.speaker.watchlist_index import WatchlistIndex

    inst = ModelStore(models).get("speaker-resemblyzer")
    cohort, _, _ = load_cohort(cohort_path(models, inst.manifest))
    emb = Embedder(inst.model_path, inst.manifest)

    def clip(paths: list[Path]) -> Any:
        parts = [to_16k(*load_audio(p)) for p in paths]  # type: ignore[misc]
        return emb.clip(np.concatenate(parts), 16_000)

    owner = speech(shared_dir, "asterisk_prompts/en/*.wav", 4)
    owner_call = clip(speech(shared_dir, "asterisk_prompts/en/*.wav", 4, skip=8))
    wife = clip(speech(shared_dir, "ljspeech/wavs/*.flac", 3, skip=10))
    state = StaticSpeakerState(cohort)
    vps = filler(models, shared_dir, 20)
    vecs = np.stack([np.frombuffer(base64.b64decode(v["embedding"]), "<f4") for v in vps])
    state.indexes["default"] = WatchlistIndex.build(
        "default", 1, [f"wl_{i:016x}" for i in range(len(vps))], vecs, cohort, 0.001
    )
    state.enrol("default", "acct-1", clip(owner).call_embedding(), "consent")
    bio = SpeakerBiometrics(
        state, BiometricsConfig(min_net_speech_s=4.0, default_mode=BiometricsMode.FULL)
    )
    pub = Publisher()
    fusion = Fusion(pub, Policy())
    bio.open_call("h", "default")
    fusion.open_call("h")
    bio.claim("h", claimed_account="acct-1", enrolled=state.enrolment("default", "acct-1"))
    from detectors.speaker.cohort import Clip

    both = Clip(
        np.concatenate([owner_call.embeddings, wife.embeddings]),
        np.concatenate([owner_call.speech_s, wife.speech_s]),
    )
    scored = []
    for w in windows("h", both, emb.window / 16_000, emb.hop / 16_000):
        for r in bio.process(w):
            scored.append(r)
            fusion.on_result(r)
    fusion.end_call("h")
    assert any(r.detector == "enrolment" for r in scored)
    assert any(r.dimension is Dimension.KNOWN_FRAUDSTER for r in scored)
    assert all(a.band is not Band.HIGH for a in pub.alerts), [
        (a.dimension, a.band) for a in pub.alerts
    ]


def test_eval_watchlist_sizes_end_to_end(models: Path, shared_dir: Path) -> None:
    from detectors.eval.watchlist import WatchlistEvalConfig, evaluate_watchlist, format_text
    from detectors.model_store import ModelStore

    inst = ModelStore(models).get("speaker-resemblyzer")
    cohort, speakers, _ = load_cohort(cohort_path(models, inst.manifest))
    # speechocean762 has ~2 s of net speech per utterance: one utterance enrols, the
    # next is the probe call (the bridge's 6 s / 3 s defaults leave nobody listable here)
    cfg = WatchlistEvalConfig(
        sizes=(4, 40),
        min_net_speech_s=1.5,
        enrol_net_speech_s=1.5,
        folds=2,
        mixtures=20,
        handoffs=4,
        max_speakers=16,
        probe_datasets=(),
    )
    r = evaluate_watchlist(inst.model_path, inst.manifest, cohort, shared_dir / "data/speech", cfg)
    avail = r["availability"]["speechocean762"]
    assert avail["speakers"] == 16 and len(set(speakers)) >= 3
    listable = r["pool_speakers"]
    assert avail["targets"] == listable and 8 <= listable <= 16
    small, big = r["sizes"]["4"], r["sizes"]["40"]
    assert small["entries"] == {"real": 4, "speed": 0, "mixture": 0}
    assert big["entries"]["real"] == round(0.72 * listable)
    assert sum(big["entries"].values()) <= 40
    assert big["threshold_snorm"] > small["threshold_snorm"]
    assert small["target_calls"] == 2 * 4 and small["target_speakers"] <= 8
    # impostor calls: every call (1-2 each) of the 12 speakers not listed in a fold that
    # reaches the search point
    assert 2 * 10 <= small["impostor_calls"] <= 2 * 12 * 2
    assert 10 <= small["impostor_speakers"] <= 16
    assert 0.0 <= small["false_match_rate"] <= 1.0 and 0.0 <= small["hit_rate"] <= 1.0
    assert big["hit_rate"] >= big["hit_rate_own_pseudo_competing"]
    assert len(small["false_match_pairs"]) == small["false_matches"]
    assert r["handoff"]["calls"] == 4
    assert "voice_mismatch" in format_text(r)
