"""Alert policy hot reload with real parts: a real bridge in-process (tiny dev fixture
models, whose marker tone the synthetic-voice fixture scores high) publishing to a real
redis-server; a call placed through the control API streams real speech as µ-law RTP,
marked from 1 s on. The bridge starts under policy A (synthetic voice capped at
``elevated``); mid-call the dashboard's store applies policy B, whose rule for the
call's DNIS lowers the threshold and lifts the cap. The alert's next revisions carry
B's version, thresholds and band, no alert after the first B one carries A, and the
call lost nothing: no packet lost, late or concealed, every frame sent played, and the
synthetic-voice windows of the leg run back to back across the swap with none
unavailable."""

from __future__ import annotations

import asyncio
import itertools
import time
import urllib.request
from pathlib import Path

import redis
import redis.asyncio
from bridge_runner import load_speech, wait_for

from detectors.alert_schema import Abstention, Alert, Band, CallEvent, Dimension, ScoreUpdate
from detectors.bus.codec import decode
from detectors.bus.keys import Keys
from detectors.bus.policy import Policy, PolicyBody
from detectors.bus.policy_store import PolicyStore
from detectors.bus.settings import BusSettings
from detectors.model_store import ModelSettings
from sip_bridge.bench.api_calls import ApiCall, BridgeHost, bridge_settings, marked
from sip_bridge.wiring import Wiring

SV = Dimension.SYNTHETIC_VOICE
TOKEN = "policy-test-token"
DNIS = "8005550100"
POLICY_A = {"dimensions": {"synthetic_voice": {"threshold": 0.5, "max_band": "elevated"}}}
POLICY_B = {
    "dimensions": {"synthetic_voice": {"threshold": 0.5, "max_band": "elevated"}},
    "tenants": {
        "default": {
            "dnis": {DNIS: {"dimensions": {"synthetic_voice": {"threshold": 0.4}}}},
        }
    },
}


def _apply(url: str, keys: Keys, body: dict[str, object]) -> Policy:
    async def go() -> Policy:
        r = redis.asyncio.Redis.from_url(url)
        try:
            return await PolicyStore(r, keys).apply(PolicyBody.model_validate(body))
        finally:
            await r.aclose()

    return asyncio.run(go())


def _alerts(client: redis.Redis, keys: Keys, call_id: str) -> list[Alert]:
    found = [decode(f) for _, f in client.xrange(keys.alerts)]
    return [a for a in found if isinstance(a, Alert) and a.call_id == call_id]


def test_policy_change_reaches_a_live_call_without_losing_frames(
    shared_dir: Path, tmp_path: Path, settings: BusSettings, client: redis.Redis
) -> None:
    keys = Keys(settings.key_prefix)
    url = settings.redis_url.get_secret_value()  # type: ignore[union-attr]
    policy_a = _apply(url, keys, POLICY_A)
    base = 41000 + (time.monotonic_ns() // 1000 % 40) * 200
    wiring = Wiring(
        bridge_settings(base, TOKEN, "tiny"),
        settings,
        ModelSettings(models_dir=tmp_path / "no-models"),
    )
    host = BridgeHost(wiring.settings, wiring)
    host.start()
    try:
        assert wiring.runtime.policy == policy_a  # loaded before the bridge was ready
        call = ApiCall(
            host.api_url, TOKEN, marked(load_speech(shared_dir, 9.0), 1.0), 1.0, dnis=DNIS
        )
        call.start()
        assert wait_for(lambda: bool(_alerts(client, keys, call.call_id)), 15)
        assert {a.policy_version for a in _alerts(client, keys, call.call_id)} == {policy_a.version}
        policy_b = _apply(url, keys, POLICY_B)
        assert policy_b.version != policy_a.version
        assert wait_for(
            lambda: any(
                a.policy_version == policy_b.version for a in _alerts(client, keys, call.call_id)
            ),
            10,
        )
        call.wait()
        assert not call.error
        call.end()
        assert wait_for(
            lambda: any(
                isinstance(m := decode(f), CallEvent)
                and m.call_id == call.call_id
                and m.event == "ended"
                for _, f in client.xrange(keys.events)
            ),
            10,
        )
        assert wiring.http is not None
        h, p = wiring.http.address
        with urllib.request.urlopen(f"http://{h}:{p}/metrics", timeout=5) as resp:
            metrics = resp.read().decode()
    finally:
        host.stop()

    assert f'callshield_policy_info{{version="{policy_b.version}"}} 1.0' in metrics
    assert "callshield_policy_reloads_total 2.0" in metrics  # A at start, then B
    assert "callshield_policy_rejected_total 0.0" in metrics

    alerts = sorted(_alerts(client, keys, call.call_id), key=lambda a: a.revision)
    assert len({a.alert_id for a in alerts}) == 1  # one episode: revisions, not new alerts
    first_b = next(i for i, a in enumerate(alerts) if a.policy_version == policy_b.version)
    before, after = alerts[:first_b], alerts[first_b:]
    assert before and all(a.policy_version == policy_a.version for a in before)
    assert all(a.policy_version == policy_b.version for a in after)
    assert all(a.band is Band.ELEVATED and a.thresholds["threshold"] == 0.5 for a in before)
    assert after[0].band is Band.HIGH  # B's rule for this DNIS lifts the cap
    assert all(a.thresholds["threshold"] == 0.4 for a in after)
    assert (after[0].thresholds["n"], after[0].thresholds["m"]) == (2.0, 3.0)

    ended = next(
        m
        for _, f in client.xrange(keys.events)
        if isinstance(m := decode(f), CallEvent)
        and m.call_id == call.call_id
        and m.event == "ended"
    )
    assert ended.coverage is not None
    leg = ended.coverage.legs[call.leg_id]
    # nothing lost, late or concealed; every frame played but what the jitter buffer
    # still held at hang-up (its delay: well under 10 frames here)
    assert (leg.packets_lost, leg.packets_late, leg.concealed_s) == (0, 0, 0.0)
    assert call.sent - 10 <= round(leg.media_s / 0.02) <= call.sent
    windows = sorted(
        (m.window_start_s, m)
        for _, f in client.xrange(keys.scores)
        if isinstance(m := decode(f), ScoreUpdate) and m.call_id == call.call_id
        if m.dimension is SV
    )
    starts = [s for s, _ in windows]
    hop = starts[1] - starts[0]
    assert hop > 0 and len(starts) >= 30
    assert all(abs(b - a - hop) < 1e-6 for a, b in itertools.pairwise(starts))
    assert not [m for _, m in windows if m.abstained is Abstention.UNAVAILABLE]
    assert max(m.quality.net_speech_s for _, m in windows) > 0.0
