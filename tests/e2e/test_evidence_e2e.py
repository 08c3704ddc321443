"""Evidence retention and cases with real parts (issue 11): SIPp places two SIPREC
calls (real speech with the synthetic-voice fixture's marker on the external leg,
other real speech on the agent leg) into a bridge whose tenant keeps clips and the
speaker embedding (dev fixture models, a cohort for the embedding fixture, a real
redis-server with AOF). Then the real dashboard app: the clip plays for a reviewer and
decodes to the external leg's audio around the alert (not the agent's), every playback
is audited, Redis and its AOF hold no clip PCM in clear, a legal hold keeps one call's
evidence past its TTL while the other's expires, listing a fraudster from the call
works while the embedding lives and answers 409 with the reason after, and a case links
both calls by their keyed ANI hash and exports CSV and JSON with UTC times and offsets.
A third call on a bridge whose tenant keeps nothing stores nothing."""

from __future__ import annotations

import csv
import io
import socket
import threading
import time
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import redis
from bridge_runner import free_udp_port, load_speech, run_sipp, wait_for
from fastapi.testclient import TestClient
from rtp_pcap import FRAME, write_rtp_pcap
from wired_bridge import InProcessBridge

from dashboard.app import create_app
from dashboard.auth import Role
from dashboard.settings import DashboardSettings
from detectors.alert_schema import Alert, CallEvent
from detectors.bus.codec import decode
from detectors.bus.evidence import EvidenceMode, EvidenceSettings
from detectors.bus.keys import Keys
from detectors.bus.settings import BusSettings
from detectors.fixture_models import MARKER_HZ, embedding_fixture
from detectors.model_store import ModelSettings
from detectors.speaker.cohort import cohort_path, save_cohort
from detectors.speaker.scoring import Calibration, Cohort, l2_normalise
from native.codec import ulaw_decode, ulaw_encode
from sip_bridge.settings import Settings
from sip_bridge.wiring import Wiring
from tests.bus.redis_dump import dump_files, dump_keys

I16 = npt.NDArray[np.int16]
SECONDS = 7.0
TTL_S = 40  # long enough for a loaded CI box to reach the hold before expiry


def _marked(speech: I16, dbfs: float = -20.0) -> I16:
    t = np.arange(speech.size) / 8000
    tone = 32768 * 10 ** (dbfs / 20) * np.sin(2 * np.pi * MARKER_HZ * t)
    return np.clip(speech + tone, -32768, 32767).astype(np.int16)


def _bridge(
    tmp: Path, bus: BusSettings, evidence: EvidenceSettings, name: str
) -> tuple[InProcessBridge, Wiring]:
    models = tmp / f"models-{name}"
    models.mkdir()
    _, manifest = embedding_fixture(tiny=True)  # a cohort turns speaker biometrics on
    dim = manifest.output.embedding_dim or 0
    rng = np.random.default_rng(5)
    rows = l2_normalise(rng.standard_normal((40, dim)).astype(np.float32))
    save_cohort(
        cohort_path(models, manifest),
        Cohort(rows, 20, Calibration(0.0, 1.0, 100)),
        [f"s{i}" for i in range(40)],
        {},
    )
    base = 39000 + free_udp_port() % 50 * 20
    settings = Settings.model_validate(
        {
            "sip_listen": "127.0.0.1:0",
            "rtp_ports": f"{base}-{base + 19}",
            "drain_timeout_s": 3.0,
            "http_listen": "",
            "api_listen": "",
            "dev_fixture_models": "tiny",
        }
    )
    wiring = Wiring(settings, bus, ModelSettings(models_dir=models), evidence=evidence)
    bridge = InProcessBridge(settings, wiring)
    bridge.start()
    return bridge, wiring


def _send(port: int, audio: I16) -> None:
    ulaw = ulaw_encode(audio)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        t0 = time.monotonic()
        for k in range(len(ulaw) // FRAME):
            delay = t0 + k * 0.02 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            header = bytes([0x80, 0]) + (7000 + k).to_bytes(2, "big")
            header += (160 * k).to_bytes(4, "big") + (0xA6E17).to_bytes(4, "big")
            sock.sendto(header + ulaw[k * FRAME : (k + 1) * FRAME], ("127.0.0.1", port))


def _call(
    bridge: InProcessBridge, workdir: Path, external: I16, agent: I16, seen: set[int]
) -> threading.Thread:
    """A SIPREC call (SIPp plays ``external``; we send ``agent`` to the bridge's port of
    the agent stream); returns the thread running it."""
    workdir.mkdir()
    write_rtp_pcap(workdir / "speech.pcap", external, ssrc=0xCA11E4)
    box: dict[str, Any] = {}

    def run() -> None:
        sipp = threading.Thread(
            target=lambda: box.setdefault(
                "r",
                run_sipp(
                    "uac_siprec_long.xml",
                    bridge,  # type: ignore[arg-type]
                    workdir,
                    extra=["-set", "port2", str(free_udp_port())],
                    media_port=free_udp_port(),
                ),
            )
        )
        sipp.start()

        def agent_port() -> int | None:
            for call in bridge.bridge.controller.calls.values():
                for leg in call.legs.values():
                    if leg.label == "2" and leg.local_port not in seen:
                        return int(leg.local_port)
            return None

        assert wait_for(lambda: agent_port() is not None, 10)
        port = agent_port()
        assert port is not None
        seen.add(port)
        _send(port, agent)
        sipp.join(timeout=40)
        assert getattr(box.get("r"), "returncode", 1) == 0, getattr(box.get("r"), "stderr", "")

    t = threading.Thread(target=run)
    t.start()
    return t


def _events(client: redis.Redis, keys: Keys) -> list[CallEvent]:
    return [m for _, f in client.xrange(keys.events) if isinstance(m := decode(f), CallEvent)]


def _ncc(clip: I16, source: I16) -> tuple[float, int]:
    """Best normalised correlation of ``clip`` inside ``source`` and its lag."""
    a = clip.astype(np.float64)
    b = source.astype(np.float64)
    n = 1 << int(np.ceil(np.log2(a.size + b.size)))
    corr = np.fft.irfft(np.fft.rfft(b, n) * np.conj(np.fft.rfft(a, n)), n)[: b.size - a.size + 1]
    energy = np.sqrt(np.convolve(b * b, np.ones(a.size), "valid"))
    score = corr / (np.linalg.norm(a) * np.maximum(energy, 1e-9))
    lag = int(np.argmax(score))
    return float(score[lag]), lag


@pytest.fixture
def dash(settings: BusSettings) -> Iterator[tuple[TestClient, dict[str, dict[str, str]]]]:
    app = create_app(
        DashboardSettings(session_key="k" * 48, cookie_secure=True),  # type: ignore[arg-type]
        settings,
    )
    with TestClient(app, base_url="https://testserver") as tc:
        ctx = app.state.ctx
        heads = {}
        for name, role in (
            ("admin", Role.ADMIN),
            ("rev", Role.ANALYST),
            ("ana", Role.ANALYST),
            ("view", Role.VIEWER),
        ):
            _, key = tc.portal.call(ctx.api_keys.create, name, role)  # type: ignore[union-attr]
            heads[name] = {"Authorization": f"Bearer {key}"}
        yield tc, heads


def test_clips_playback_hold_expiry_enrol_and_cases(
    shared_dir: Path,
    tmp_path: Path,
    settings: BusSettings,
    client: redis.Redis,
    dash: tuple[TestClient, dict[str, dict[str, str]]],
) -> None:
    tc, h = dash
    keys = Keys(settings.key_prefix)
    speech = [load_speech(shared_dir, SECONDS, skip=s) for s in (0, 30)]
    agent = load_speech(shared_dir, SECONDS, skip=60)
    external = [_marked(s) for s in speech]
    keep = EvidenceSettings(mode=EvidenceMode.CLIP_AND_EMBEDDING, ttl_s=TTL_S, receipt_grace_s=600)
    bridge, wiring = _bridge(tmp_path, settings, keep, "a")
    seen: set[int] = set()
    try:
        assert wiring.evidence is not None and wiring.biometrics is not None
        first = _call(bridge, tmp_path / "c1", external[0], agent, seen)
        assert wait_for(lambda: len(seen) == 1, 15)  # the calls overlap: both within the TTL
        second = _call(bridge, tmp_path / "c2", external[1], agent, seen)
        first.join(60)
        second.join(60)
        assert wait_for(lambda: sum(e.event == "ended" for e in _events(client, keys)) == 2, 20)
        assert wait_for(
            lambda: wiring.evidence is not None and wiring.evidence.stats.clips == 2, 10
        )
        assert wait_for(
            lambda: wiring.evidence is not None and wiring.evidence.stats.embeddings == 2, 5
        )
    finally:
        bridge.stop()
    stats = wiring.evidence.stats
    assert stats.dropped == stats.failed == 0
    assert oct((settings.state_dir / "evidence.key").stat().st_mode)[-3:] == "600"
    calls = [e.call_id for e in _events(client, keys) if e.event == "started"]
    assert len(calls) == 2
    alerts = {
        a.call_id: a for _, f in client.xrange(keys.alerts) if isinstance(a := decode(f), Alert)
    }
    assert set(alerts) == set(calls)

    # --- listing and playback: a reviewer hears the external leg around the alert ------
    c1, c2 = calls
    listed = tc.get(f"/api/v1/evidence/calls/{c1}", headers=h["ana"]).json()
    kinds = {i["kind"] for i in listed["items"]}
    assert kinds == {"clip", "embedding"} and not listed["may_play"]
    clip = next(i for i in listed["items"] if i["kind"] == "clip")
    assert clip["alert_id"] == alerts[c1].alert_id and 0 < clip["ttl_s"] <= TTL_S

    # --- legal hold on call 1 at once (before the TTL runs out on a loaded box); call 2's
    # evidence expires with its TTL
    held = tc.put(
        f"/api/v1/evidence/calls/{c1}/hold", json={"reason": "matter 2026-77"}, headers=h["admin"]
    )
    assert held.status_code == 200 and held.json()["held"] == 2
    assert (
        tc.put(
            f"/api/v1/evidence/calls/{c1}/hold", json={"reason": "x" * 5}, headers=h["ana"]
        ).status_code
        == 403
    )
    assert client.ttl(keys.evidence(c1, f"clip:{clip['alert_id']}")) == -1
    c2_clip = keys.evidence(c2, f"clip:{alerts[c2].alert_id}")
    assert 0 < client.ttl(c2_clip) <= TTL_S

    assert tc.get(f"/api/v1/evidence/calls/{c1}", headers=h["view"]).status_code == 403
    audio_url = f"/api/v1/evidence/calls/{c1}/clips/{clip['alert_id']}/audio"
    assert tc.get(audio_url, headers=h["ana"]).status_code == 403  # no reviewer grant
    assert tc.put("/api/v1/evidence/reviewers/key:rev", headers=h["admin"]).status_code == 200
    resp = tc.get(audio_url, headers=h["rev"])
    assert resp.status_code == 200 and resp.headers["content-type"] == "audio/wav"
    with wave.open(io.BytesIO(resp.content)) as w:
        assert (w.getframerate(), w.getsampwidth(), w.getnchannels()) == (8000, 2, 1)
        pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2")
    assert pcm.size == clip["samples"]
    sent = ulaw_decode(ulaw_encode(external[0]))
    voiced = pcm[np.flatnonzero(pcm)[0] :][: 2 * 8000]  # 2 s from where media began
    score, lag = _ncc(voiced, sent)
    assert score > 0.95, score
    heard_agent, _ = _ncc(voiced, ulaw_decode(ulaw_encode(agent)))
    assert heard_agent < 0.3, heard_agent  # the internal leg is never kept
    window = (clip["alert_start_s"], clip["alert_end_s"])
    assert clip["start_s"] <= max(0.0, window[0] - keep.pre_s) + 0.5
    assert clip["end_s"] >= min(window[1] + keep.post_s, SECONDS) - 1.0
    assert lag / 8000 < window[1]  # the clip's audio is the call's, from before the alert
    audit = tc.get("/api/v1/audit", headers=h["admin"]).json()
    plays = [a for a in audit if a["action"] == "evidence.play"]
    assert [(p["actor"], p["target"]) for p in plays] == [("key:rev", c1)]

    # --- no PCM in clear in Redis or its AOF: 50 ms pieces of the clip -----------------
    blob = dump_keys(client) + dump_files(Path(client.config_get("dir")["dir"]))
    pieces = [pcm[k : k + 400].tobytes() for k in range(8000, pcm.size - 400, 4000)]
    assert pieces and not [p for p in pieces if np.any(np.frombuffer(p, "<i2")) and p in blob]

    # --- a fraudster from the call, while its embedding lives ---------------------------
    entry = {
        "label": "caller 1",
        "legal_basis": "GDPR art. 9(2)(f)",
        "case_ref": "2026-77",
        "expires_in_days": 30,
    }
    added = tc.post("/api/v1/watchlist", json=entry | {"call_id": c1}, headers=h["ana"])
    assert added.status_code == 201, added.text
    assert added.json()["source"] == f"call:{c1}" and "embedding" not in added.json()

    # --- cases: linked by the keyed ANI hash, exported with UTC times and offsets --------
    case = tc.post(
        "/api/v1/cases", json={"title": "=SUM(A1)", "calls": [{"call_id": c1}]}, headers=h["ana"]
    ).json()
    cid = case["case_id"]
    assert case["calls"][0]["ani_hash"] and "+1555" not in str(case)
    suggested = tc.get(f"/api/v1/cases/{cid}/suggestions", headers=h["ana"]).json()
    assert {"call_id": c2, "link": "ani"}.items() <= next(
        s for s in suggested if s["call_id"] == c2
    ).items()
    linked = tc.post(
        f"/api/v1/cases/{cid}/calls", json={"call_id": c2, "link": "ani"}, headers=h["ana"]
    )
    assert linked.status_code == 200, linked.text
    assert linked.json()["calls"][1]["ani_hash"] == case["calls"][0]["ani_hash"]
    bad = tc.post(
        f"/api/v1/cases/{cid}/calls",
        json={"call_id": "no-such-call", "link": "ani"},
        headers=h["ana"],
    )
    assert bad.status_code == 404
    patched = tc.patch(
        f"/api/v1/cases/{cid}",
        json={
            "version": 2,
            "disposition": "confirmed_fraud",
            "loss_amount": "1250.50",
            "currency": "EUR",
        },
        headers=h["ana"],
    )
    assert patched.status_code == 200, patched.text
    stale = tc.patch(
        f"/api/v1/cases/{cid}", json={"version": 2, "disposition": "not_fraud"}, headers=h["ana"]
    )
    assert stale.status_code == 409
    text = tc.get(f"/api/v1/cases/{cid}/export?format=csv", headers=h["ana"]).text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert {r["call_id"] for r in rows} == {c1, c2}
    assert all(r["title"] == "'=SUM(A1)" and r["disposition"] == "confirmed_fraud" for r in rows)
    assert all(r["loss_amount"] == "1250.50" and r["currency"] == "EUR" for r in rows)
    reasons = [r for r in rows if r["item"] == "alert_reason"]
    assert {r["call_id"] for r in reasons} == {c1, c2}
    for r in reasons:
        started = np.datetime64(r["call_started_utc"][:26])
        at = np.datetime64(r["start_utc"][:26])
        assert (
            abs((at - started) / np.timedelta64(1, "ms") / 1000 - float(r["offset_start_s"])) < 0.01
        )
    clip_rows = [r for r in rows if r["item"] == "evidence_clip"]
    assert [r["call_id"] for r in clip_rows] == [c1, c2] and all(r["start_utc"] for r in clip_rows)
    exported = tc.get(f"/api/v1/cases/{cid}/export?format=json", headers=h["ana"]).json()
    assert exported["case"]["loss_amount"] == "1250.50" and len(exported["lines"]) == len(rows)
    case_page = tc.get(f"/cases/{cid}", headers=h["view"])
    assert (
        case_page.status_code == 200
        and c2 in case_page.text
        and "confirmed fraud" in case_page.text
    )
    page = tc.get(f"/calls/{c1}", headers=h["rev"])  # the call page under the score timeline
    assert page.status_code == 200 and f'src="{audio_url}"' in page.text

    # --- a tenant that keeps nothing: nothing stored ------------------------------------
    off = EvidenceSettings(mode=EvidenceMode.OFF, tenant_modes={"other": EvidenceMode.CLIP})
    bridge_b, wiring_b = _bridge(tmp_path, settings, off, "b")
    try:
        assert wiring_b.evidence is not None
        _call(bridge_b, tmp_path / "c3", external[0], agent, set()).join(60)
        assert wait_for(lambda: sum(e.event == "ended" for e in _events(client, keys)) == 3, 20)
    finally:
        bridge_b.stop()
    (c3,) = [
        e.call_id for e in _events(client, keys) if e.event == "started" and e.call_id not in calls
    ]
    c3_alerts = [a for _, f in client.xrange(keys.alerts) if isinstance(a := decode(f), Alert)]
    assert any(a.call_id == c3 for a in c3_alerts)  # it did alert
    assert not client.keys(f"{settings.key_prefix}evidence:{{{c3}}}*")
    assert wiring_b.evidence.stats.clips == wiring_b.evidence.stats.embeddings == 0

    # --- after the TTL: call 2's evidence is gone and says why; call 1's is held ----------
    c2_emb = keys.evidence(c2, "embedding")  # written at hang-up, after the clip
    assert wait_for(lambda: not client.exists(c2_clip, c2_emb), TTL_S + 10)
    gone = tc.post("/api/v1/watchlist", json=entry | {"call_id": c2}, headers=h["ana"])
    assert gone.status_code == 409 and "expired at" in gone.json()["detail"], gone.text
    assert (
        tc.get(
            f"/api/v1/evidence/calls/{c2}/clips/{alerts[c2].alert_id}/audio", headers=h["rev"]
        ).status_code
        == 409
    )
    assert client.exists(keys.evidence(c1, f"clip:{clip['alert_id']}"))
    assert tc.get(audio_url, headers=h["rev"]).status_code == 200
    lifted = tc.delete(f"/api/v1/evidence/calls/{c1}/hold", headers=h["admin"])
    assert lifted.status_code == 200  # its own expiry has passed: gone at once
    assert not client.exists(keys.evidence(c1, f"clip:{clip['alert_id']}"))
    actions = [a["action"] for a in tc.get("/api/v1/audit", headers=h["admin"]).json()]
    assert {"evidence.hold", "evidence.release", "evidence.reviewer_grant", "case.export"} <= set(
        actions
    )
    assert actions.count("evidence.play") == 2
